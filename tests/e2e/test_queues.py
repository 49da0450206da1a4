"""Queue fallback on the real testbed: a study listing `queue: [capped, overflow]` whose
trials together need more than `capped`'s 16 GPUs fills `capped`, sends the rest to
`overflow`, and says so in the panel, the record and `status`."""

from __future__ import annotations

import json

import pytest

from stratctl import labels
from stratctl.kube.cluster import CONFIGMAP, QUEUE, VOLCANO_JOB
from stratctl.kube.record import record_name
from tests.e2e.support import fake_study, unique

pytestmark = pytest.mark.e2e

TRIALS, GANG = 12, 2  # 24 GPUs in all, `capped` holds 16


def test_trials_fill_the_capped_queue_then_go_to_the_next(testbed, api, cli, studies):
    capped = api.get(QUEUE, "capped")
    assert capped["spec"]["capability"]["nvidia.com/gpu"] == "16"
    api.get(QUEUE, "overflow")  # testbed/queues.yaml (testbed/up.sh applies it)
    name = unique("qfall")
    path = studies(name, fake_study(name, testbed.namespace, TRIALS, "20s", replicas=GANG,
                                    fields={"queue": "[capped, overflow]"}))
    done = cli.call("submit", path, timeout=240)
    assert done.returncode == 0, done.stderr
    jobs, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    assert len(jobs) == TRIALS
    where = {j["metadata"]["labels"][labels.TRIAL]: j["spec"]["queue"] for j in jobs}
    by_queue = {q: sum(1 for v in where.values() if v == q) for q in ("capped", "overflow")}
    # the first 8 gangs fill capped's 16 GPUs; later ones go to overflow until capped has room
    assert by_queue["capped"] >= 16 // GANG and by_queue["overflow"] >= 1, by_queue
    assert sum(by_queue.values()) == TRIALS
    assert all(j["metadata"]["annotations"][labels.QUEUE] == j["spec"]["queue"] for j in jobs)
    # the panel said why
    assert "→ queue overflow: capped full (16/16 GPUs)" in done.stderr, done.stderr
    # status: every trial succeeded, each with its queue
    status = cli.status(name)
    rows = {t["trial"]: t for t in status["trials"]}
    assert {t["state"] for t in rows.values()} == {"succeeded"}
    assert {t: r["queue"] for t, r in rows.items()} == where
    table = cli.run("status", name)
    assert "queue" in table and "overflow" in table
    # the record keeps the placements
    record = api.get(CONFIGMAP, record_name(name), testbed.namespace)
    assert json.loads(record["data"]["placements"]) == by_queue
    # a rerun adopts every trial wherever it went: nothing duplicated, nothing refused
    again = cli.call("submit", path, timeout=120)
    assert again.returncode == 0, again.stderr
    jobs_after, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    assert sorted(j["metadata"]["uid"] for j in jobs_after) == sorted(j["metadata"]["uid"] for j in jobs)
