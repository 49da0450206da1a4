"""`status` of a Kubernetes study lists every trial, created or not, each with its
parameters, as Slurm and YARN do: a 12-trial study whose loop stopped with 4 created reads
4 in the cluster and 8 waiting (not created yet), before and after `drain`."""

from __future__ import annotations

import json
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB
from tests.e2e.support import fake_study, of_study, recorded, unique, wait_until

pytestmark = pytest.mark.e2e


def trial_names(api, name: str) -> set[str]:
    return {j["metadata"]["labels"][labels.TRIAL] for j in of_study(api, VOLCANO_JOB, name)}


def test_status_lists_every_trial_created_or_not_with_its_parameters_also_after_drain(testbed, api, cli, studies):
    name = unique("every")
    path = studies(name, fake_study(name, testbed.namespace, 12, "600s", parallelism=4))
    submit = cli.start("submit", path, "--poll-interval", "1")
    try:
        recorded(api, name)
        wait_until(lambda: len(trial_names(api, name)) >= 4, 90, message="4 trials created")
        time.sleep(3)  # at most 4 in flight, none ends for 10 minutes: no fifth is created
    finally:
        cli.interrupt(submit)
    created = trial_names(api, name)
    assert len(created) == 4

    doc = json.loads(cli.run("status", name, "-o", "json"))
    trials = doc["trials"]
    assert len(trials) == 12 and sorted(t["params"]["seed"] for t in trials) == list(range(12))
    waiting = [t for t in trials if t["trial"] not in created]
    assert len(waiting) == 8
    assert all(t["state"] == "waiting" and t["pending"] == "not created yet" and t["job"] == "" for t in waiting)
    assert {t["state"] for t in trials if t["trial"] in created} <= {"pending", "running"}
    assert doc["studies"][0]["states"]["waiting"] == 8 and doc["studies"][0]["trials"] == 12
    assert sorted(t["index"] for t in trials) == list(range(12))

    table = cli.run("status", name)  # into a pipe: plain columns, every trial a row
    rows = table.split("\n\n")[1].splitlines()
    assert rows[0].split()[:4] == ["trial", "state", "attempt", "seed"] and len(rows) == 1 + 12
    assert sum(" not created yet" in row for row in rows) == 8

    [outcome] = json.loads(cli.run("drain", name, "--settle", "2", "--json", timeout=120))
    assert sorted(outcome["suspended"]) == sorted(created)
    doc = json.loads(cli.run("status", name, "-o", "json"))
    trials = doc["trials"]
    assert len(trials) == 12 and sorted(t["params"]["seed"] for t in trials) == list(range(12))
    states = {t["trial"]: t["state"] for t in trials}
    assert {states[t] for t in created} == {"suspended"}
    held = [t for t in trials if t["trial"] not in created]
    assert all(t["state"] == "waiting" and t["pending"] == "not created yet; the study is drained" for t in held)
