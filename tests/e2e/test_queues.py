"""Queue fallback on the real testbed: a study listing `queue: [capped, overflow]` whose
trials together need more than `capped`'s 16 GPUs fills `capped`, sends the rest to
`overflow`, and says so in the panel, the record and `status`."""

from __future__ import annotations

import json

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, QUEUE, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.record import record_name
from tests.e2e.support import fake_study, unique

pytestmark = pytest.mark.e2e

TRIALS, GANG = 12, 2  # 24 GPUs in all, `capped` holds 16


def test_trials_fill_the_capped_queue_then_go_to_the_next(testbed, api, cli, studies):
    capped = api.get(QUEUE, "capped")
    assert capped["spec"]["capability"]["nvidia.com/gpu"] == "16"
    api.get(QUEUE, "overflow")  # testbed/queues.yaml (testbed/up.sh applies it)
    name = unique("qfall")
    path = studies(
        name, fake_study(name, testbed.namespace, TRIALS, "20s", replicas=GANG, fields={"queue": "[capped, overflow]"})
    )
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


def test_move_waiting_takes_gangs_that_have_not_started_out_of_the_full_queue(testbed, api, cli, studies):
    name = unique("qmove")
    one_queue = fake_study(name, testbed.namespace, 10, "40s", replicas=GANG, fields={"queue": "capped"})
    path = studies(name, one_queue)
    first = cli.call("submit", path, "--timeout", "8s", timeout=120)  # 8 gangs start in capped, 2 wait there
    assert first.returncode == 124, first.stderr
    jobs, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    assert len(jobs) == 10 and {j["spec"]["queue"] for j in jobs} == {"capped"}
    waiting = {j["metadata"]["labels"][labels.TRIAL] for j in jobs if not (j.get("status") or {}).get("running")}
    assert len(waiting) == 2, [j.get("status") for j in jobs]
    # the same trials (the first queue is unchanged, so are their spec hashes), now with a second queue
    with open(path, "w") as f:
        f.write(one_queue.replace("queue: capped", "queue: [capped, overflow]"))
    done = cli.call("submit", path, "--move-waiting", timeout=240)
    assert done.returncode == 0, done.stderr
    for trial in waiting:
        # the first to move sees the other still waiting in capped: "(16/16 GPUs, 2 more waiting)"
        assert (
            f"trial {trial} moved: queue capped → overflow, it had not started and capped full (16/16 GPUs"
            in done.stderr
        ), done.stderr
    jobs, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    where = {j["metadata"]["labels"][labels.TRIAL]: j["spec"]["queue"] for j in jobs}
    assert len(jobs) == 10 and {t for t, q in where.items() if q == "overflow"} == waiting
    rows = cli.status(name)["trials"]
    assert {r["state"] for r in rows} == {"succeeded"} and {r["trial"]: r["queue"] for r in rows} == where
    record = api.get(CONFIGMAP, record_name(name), testbed.namespace)
    assert record["data"]["moved"] == "2"
    assert json.loads(record["data"]["placements"]) == {"capped": 8, "overflow": 2}
