"""A closed-loop search (strategy tpe) on the testbed: trials chosen from the results of
finished ones, each trial's result its loss computed from its parameters (the fake
trial's termination message, rendered per trial), the submit loop killed with SIGKILL
mid-search and run again: the same search continues, every trial exactly once, within
the budget, and `status --best` ranks by the study's objective without --sort."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from stratctl import labels
from stratctl.errors import NotFound
from stratctl.kube.cluster import CONFIGMAP, VOLCANO_JOB
from stratctl.kube.record import parse_record, record_name
from tests.e2e.support import finish, unique, wait_until

pytestmark = pytest.mark.e2e
pytest.importorskip("optuna", reason="the [search] extra")

BUDGET = 12


def search_yaml(name: str, namespace: str) -> str:
    loss = "{{ ((params.x - 2) ** 2 + (params.y - 3) ** 2 / 10) | round(6) }}"
    return f"""\
name: {name}
namespace: {namespace}
priority_class: stratctl-low
space:
  x: {{type: uniform, low: -5, high: 10}}
  y: {{type: uniform, low: 0, high: 15}}
strategy: {{kind: tpe, trials: {BUDGET}, seed: 7}}
objective: {{metric: loss, direction: minimize}}
trial:
  image: stratctl.invalid/fake-trial:0
  annotations:
    testbed.stratctl.io/run-duration: 3s
    testbed.stratctl.io/termination-message: '{{"loss": {loss}}}'
  resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}, limits: {{nvidia.com/gpu: 1}}}}
  tasks: [{{name: worker, replicas: 1}}]
checkpoint: {{location: "/ckpt/{{{{ study }}}}/{{{{ trial }}}}"}}
throttle: {{qps: 50, burst: 20, parallelism: {{min: 1, initial: 3, max: 3}}}}
"""


def told_of(api, study) -> dict:
    try:
        return parse_record(api.get(CONFIGMAP, record_name(study))).told
    except NotFound:  # the loop has not written its record yet
        return {}


def jobs_of(api, study):
    return api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={study}")[0]


def test_a_search_killed_mid_run_continues_exactly_once_within_its_budget(testbed, api, cli, studies):
    name = unique("tpe")
    path = studies(name, search_yaml(name, testbed.namespace))
    plan = json.loads(subprocess.run([sys.executable, "-m", "stratctl", "plan", str(path), "-o", "json"],
                                     capture_output=True, text=True, check=True).stdout)
    first = [t["name"] for t in plan["trials"]]
    assert len(first) == 3 and plan["estimate"]["trials"] == BUDGET

    run = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        # a few trials ended (told) and more asked: then the loop dies without a word
        wait_until(lambda: len(told_of(api, name)) >= 4, 120, message="four trials of the search ended")
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(10)
    before = {j["metadata"]["name"] for j in jobs_of(api, name)}
    assert 4 <= len(before) < BUDGET
    # the first trials were the ones `plan` showed (same seed, nothing ended yet)
    assert set(first) <= before

    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=240)
    jobs = jobs_of(api, name)
    trials = [j["metadata"]["labels"][labels.TRIAL] for j in jobs]
    assert len(trials) == BUDGET == len(set(trials)), trials  # each trial once, one attempt each
    assert before <= {j["metadata"]["name"] for j in jobs}
    assert progress["succeeded"] == BUDGET and progress["failed"] == 0
    assert progress["created"] == BUDGET - len(before)

    told = parse_record(api.get(CONFIGMAP, record_name(name))).told
    assert set(told) == set(trials)
    losses = {}
    for trial, entry in told.items():
        x, y = entry["params"]["x"], entry["params"]["y"]
        assert entry["state"] == "complete"
        assert entry["values"][0] == pytest.approx((x - 2) ** 2 + (y - 3) ** 2 / 10, abs=1e-5)
        losses[trial] = entry["values"][0]

    # --best needs no --sort: the study declares its objective
    snap = json.loads(cli.run("status", name, "--best", "1", "-o", "json"))
    [best] = snap["trials"]
    assert best["trial"] == min(losses, key=losses.get)
