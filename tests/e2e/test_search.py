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
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.record import parse_record, record_name
from stratctl.errors import NotFound
from tests.e2e.support import ReportingTrials, finish, unique, wait_until

pytestmark = pytest.mark.e2e

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
    plan = json.loads(
        subprocess.run(
            [sys.executable, "-m", "stratctl", "plan", str(path), "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
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


def pruned_yaml(name: str, namespace: str) -> str:
    return (
        search_yaml(name, namespace)
        .replace(
            "objective: {metric: loss, direction: minimize}\n",
            "objective: {metric: loss, direction: minimize}\npruner: {kind: median, startup_trials: 3, warmup_steps: "
            "1}\n",
        )
        .replace("run-duration: 3s", "run-duration: 10s")
    )


REPORTED = 5  # steps each trial reports, about 1.5 s apart: within its pod's 10 s run


class Trials(ReportingTrials):
    """The study's trials, each reporting `loss + 1 / (step + 1)` of a loss set by its
    parameters (its pod's annotation), REPORTED steps."""

    def __init__(self, testbed, api, study, tmp_path):
        super().__init__(testbed, api, study, tmp_path, REPORTED)

    def value(self, pod, step):
        params = json.loads(pod["metadata"]["annotations"][labels.PARAMS])
        return (params["x"] - 2) ** 2 + (params["y"] - 3) ** 2 / 10 + 1 / (step + 1)


def test_the_median_pruner_stops_losing_trials_on_the_testbed(testbed, api, cli, studies, tmp_path):
    name = unique("prune")
    path = studies(name, pruned_yaml(name, testbed.namespace))
    with Trials(testbed, api, name, tmp_path) as trials:
        progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=400)
    assert not trials.errors, trials.errors[:3]
    told = told_of(api, name)
    pruned = {t for t, e in told.items() if e["state"] == "pruned"}
    assert pruned, "no trial was pruned"
    assert progress["pruned"] == len(pruned) and progress["succeeded"] == BUDGET - len(pruned)
    assert len(told) == BUDGET
    jobs = {j["metadata"]["labels"][labels.TRIAL]: j for j in jobs_of(api, name)}
    assert len(jobs) == BUDGET - len(pruned) and not pruned & set(jobs)  # pruned trials' jobs are gone
    for trial in pruned:
        entry = told[trial]
        x, y = entry["params"]["x"], entry["params"]["y"]
        assert entry["value"] == pytest.approx((x - 2) ** 2 + (y - 3) ** 2 / 10 + 1 / (entry["step"] + 1), abs=1e-5)
        assert entry["step"] >= 1  # warmup_steps: 1
    snap = json.loads(cli.run("status", name, "-o", "json"))
    [study] = snap["studies"]
    assert study["states"]["pruned"] == len(pruned) and study["states"]["succeeded"] == BUDGET - len(pruned)
    assert study["gpu_hours_saved"] > 0
    assert {t["trial"] for t in snap["trials"] if t["state"] == "pruned"} == pruned
