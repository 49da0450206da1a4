"""Merged submissions (`merge: auto`) against the real testbed: a block of trials is one
batch/v1 Indexed Job whose pods Volcano schedules (one PodGroup per block), and every trial
keeps what a Job of its own gave it: exactly once across a kill -9 and a rerun, status per
trial, preemption of one index resumed (not failed), drain and resume inside one block.

KWOK runs no container: these tests check the objects the job controller and Volcano make
(the scripts a block's pods would run are run for real by the unit tests). The stratctl
commands run as separate processes; every wait has a deadline.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD, PODGROUP
from stratctl.backends.kubernetes.blocks.blockmanifests import PRUNED_SCRIPT
from stratctl.backends.kubernetes.blocks.blocks import IGNORED, indexes, listed_of
from stratctl.backends.kubernetes.objects.record import parse_record, record_name
from tests.e2e.support import Cli, ReportingTrials, busybox_study, finish, unique, wait_until

FAILURES = "batch.kubernetes.io/job-index-failure-count"

pytestmark = pytest.mark.e2e


@pytest.fixture
def cli(testbed):
    return Cli(testbed, columns=200)


def merged_study(name, namespace, trials, duration, cap):
    return (
        busybox_study(name, namespace, trials, duration, cap=cap).replace(
            "queue: default\n", "queue: default\nworkload: batch\nmerge: auto\n"
        )
        + 'checkpoint: {location: "/ckpt/{{ study }}/{{ trial }}"}\n'
    )


def blocks(api, study):
    return api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={study},{labels.BLOCK}")[0]


def counted(api, study) -> list[dict]:
    """The study's blocks once the job controller has counted every index ended (a loop ends
    as soon as the pods have; the Job's status follows a moment later)."""

    def settled():
        found = blocks(api, study)
        for job in found:
            status = job.get("status") or {}
            ended = indexes(status.get("completedIndexes")) | indexes(status.get("failedIndexes"))
            if len(ended) < len(listed_of(job)):
                return None
        return found

    return wait_until(settled, 30, message="every block's indexes counted")


def live_pods(api, study):
    pods, _ = api.list(POD, label_selector=f"{labels.STUDY}={study}")
    return [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]


def running(api, study):
    pods = live_pods(api, study)
    return [p for p in pods if p["status"]["phase"] == "Running" and not p["metadata"].get("deletionTimestamp")]


def test_a_merged_study_is_one_indexed_job_run_exactly_once_across_a_kill_and_a_rerun(testbed, api, cli, studies):
    name, trials, cap = unique("mrg"), 12, 4
    path = studies(name, merged_study(name, testbed.namespace, trials, "4s", cap))
    plan = subprocess.run([sys.executable, "-m", "stratctl", "plan", path], capture_output=True, text=True, check=True)
    assert "merged: Indexed Jobs of up to 1000 trials" in plan.stdout
    submit = cli.start("submit", path, "--poll-interval", "1")
    peak = 0
    try:
        wait_until(lambda: running(api, name), 60, message="the block's first trials running")
        submit.send_signal(signal.SIGKILL)
        submit.wait(10)
        [job] = blocks(api, name)
        spec = job["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", trials, cap)
        [scripts] = api.list(CONFIGMAP, label_selector=f"{labels.STUDY}={name},{labels.BLOCK}")[0]
        assert sorted(scripts["data"], key=int) == [str(i) for i in range(trials)]
        assert "exec train --seed=5" in scripts["data"]["5"]
        # no object per trial: no other job, one PodGroup (Volcano's, owned by the block's Job)
        assert [j["metadata"]["name"] for j in api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={name}")[0]] == [
            job["metadata"]["name"]
        ]
        groups = [
            g
            for g in api.list(PODGROUP)[0]
            if any(r.get("uid") == job["metadata"]["uid"] for r in g["metadata"].get("ownerReferences") or [])
        ]
        assert len(groups) == 1 and groups[0]["spec"]["queue"] == "default"
        rerun = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
        deadline = time.monotonic() + 180
        while rerun.poll() is None and time.monotonic() < deadline:
            peak = max(peak, len(live_pods(api, name)))
            time.sleep(0.5)
        progress = finish(rerun, timeout=10)
    finally:
        for process in (submit,):
            if process.poll() is None:
                process.kill()
    assert (progress["succeeded"], progress["failed"], progress["created"], progress["existing"]) == (trials, 0, 0, 0)
    assert peak <= cap, f"{peak} pods of the block at once, cap {cap}"
    [job] = counted(api, name)  # the loop ends once the pods succeeded; the Job counts them a moment later
    assert indexes(job["status"]["completedIndexes"]) == set(range(trials))
    snap = cli.status(name)
    rows = {row["trial"]: row for row in snap["trials"]}
    assert len(rows) == trials and {r["state"] for r in rows.values()} == {"succeeded"}
    assert {r["attempt"] for r in rows.values()} == {0}
    assert sorted(r["params"]["seed"] for r in rows.values()) == list(range(trials))
    assert all(r["gpu_seconds"] >= 4 for r in rows.values()), [r["gpu_seconds"] for r in rows.values()]


def evict(api, pod):
    meta = pod["metadata"]
    api.request(
        "POST",
        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction",
        body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"]}},
        what=f"create eviction {meta['name']}",
    )


def test_a_preempted_index_runs_again_in_its_block_and_is_not_a_failure(testbed, api, cli, studies):
    name, trials = unique("mpre"), 4
    path = studies(name, merged_study(name, testbed.namespace, trials, "15s", trials))
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        wait_until(lambda: len(running(api, name)) == trials, 60, message="every trial of the block running")
        victim = sorted(running(api, name), key=lambda p: p["metadata"]["name"])[0]
        index = victim["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        evict(api, victim)  # as Volcano's preemption does: DisruptionTarget, then the pod is killed

        def replaced():
            return [
                p
                for p in running(api, name)
                if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == index
                and p["metadata"]["name"] != victim["metadata"]["name"]
            ]

        wait_until(replaced, 60, message=f"index {index} running again")
        [again] = replaced()
        assert again["metadata"]["annotations"].get(IGNORED) == "1"
        progress = finish(submit, timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert (progress["succeeded"], progress["failed"]) == (trials, 0)
    [job] = blocks(api, name)
    assert not job["status"].get("failedIndexes")
    snap = cli.status(name)
    [study] = snap["studies"]
    assert study["states"]["succeeded"] == trials and study["failed_attempts"] == 0
    assert study["preemptions"] >= 1


def test_drain_and_resume_two_trials_inside_one_block(testbed, api, cli, studies):
    name, trials = unique("mdr"), 6
    path = studies(name, merged_study(name, testbed.namespace, trials, "12s", 2))
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        wait_until(lambda: len(running(api, name)) == 2, 60, message="two trials of the block running")
        [outcome] = json.loads(cli.run("drain", name, "--settle", "2", "--json"))
        assert len(outcome["suspended"]) == 2, outcome
        [job] = blocks(api, name)
        assert job["spec"]["suspend"] is True
        wait_until(lambda: not live_pods(api, name), 30, message="the block's pods gone")
        time.sleep(4)  # the loop holds: no pod, no job, no new block for several cycles
        assert not live_pods(api, name)
        assert len(api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={name}")[0]) == 1
        snap = cli.status(name)
        assert snap["studies"][0]["drained"]
        waits = [t["pending"] for t in snap["trials"] if t["state"] == "suspended"]  # held in the drained block
        assert waits and all("suspended (drain)" in w for w in waits), waits
        resumed = json.loads(cli.run("resume", name, "--json"))
        assert set(outcome["suspended"]) <= set(resumed["resumed"])
        wait_until(lambda: len(running(api, name)) == 2, 60, message="two trials of the block running again")
        counts = [p["metadata"]["annotations"].get(FAILURES, "0") for p in running(api, name)]
        print(f"\nafter drain and resume: job-index-failure-count {counts}")
        progress = finish(submit, timeout=150)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert (progress["succeeded"], progress["failed"]) == (trials, 0)
    [job] = counted(api, name)
    assert indexes(job["status"]["completedIndexes"]) == set(range(trials))
    assert len(api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={name}")[0]) == 1


BUDGET, REPORTED = 9, 5  # the search's trials; the steps each reports (the testbed's pods end 4 s after the last)


def search_in_blocks(name, namespace):
    return f"""\
name: {name}
namespace: {namespace}
queue: default
priority_class: stratctl-low
workload: batch
merge: auto
space:
  x: {{type: uniform, low: -5, high: 10}}
  y: {{type: uniform, low: 0, high: 15}}
strategy: {{kind: tpe, trials: {BUDGET}, seed: 7}}
objective: {{metric: loss, direction: minimize}}
pruner: {{kind: median, startup_trials: 3, warmup_steps: 1}}
trial:
  image: busybox
  command: ["train", "--x={{{{ params.x }}}}", "--y={{{{ params.y }}}}"]
  annotations:
    testbed.stratctl.io/run-duration: 10s  # from the pod's start: covers its reports, ~1.5 s apart
  resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}}}
retries: {{max_retry: 0}}
throttle: {{qps: 50, burst: 20, parallelism: {{min: 1, initial: 3, max: 3}}}}
"""


def curve(params, step=None):
    final = (params["x"] - 2) ** 2 + (params["y"] - 3) ** 2 / 10
    return final if step is None else final + 1 / (step + 1)


class BlockTrials(ReportingTrials):
    """The trials of the study's blocks, each reporting its learning curve, REPORTED steps,
    and writing its final loss where the testbed takes a pod's termination message from. A
    pod learns its trial from its block's list and its completion index, as its script
    would."""

    def __init__(self, testbed, api, study, tmp_path):
        super().__init__(testbed, api, study, tmp_path, REPORTED)

    def _params(self, pod) -> dict:
        listed = listed_of(self.api.get(BATCH_JOB, pod["metadata"]["labels"][labels.BLOCK]))
        return listed[int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])].params

    def value(self, pod, step):
        return curve(self._params(pod), step)

    def first(self, pod):
        message = json.dumps({"loss": round(curve(self._params(pod)), 6)})
        patch = {"metadata": {"annotations": {"testbed.stratctl.io/termination-message": message}}}
        self.api.patch(POD, pod["metadata"]["name"], patch)


def test_a_search_asks_in_blocks_and_its_pruner_stops_one_index(testbed, api, cli, studies, tmp_path):
    name = unique("msrch")
    path = studies(name, search_in_blocks(name, testbed.namespace))
    plan = subprocess.run([sys.executable, "-m", "stratctl", "plan", path], capture_output=True, text=True, check=True)
    assert "the trials the search asks in one cycle" in plan.stdout
    with BlockTrials(testbed, api, name, tmp_path) as trials:
        progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=400)
    assert not trials.errors, trials.errors[:3]
    told = parse_record(api.get(CONFIGMAP, record_name(name))).told
    assert len(told) == BUDGET
    pruned = {t for t, e in told.items() if e["state"] == "pruned"}
    assert pruned, "no trial was pruned"
    assert (progress["pruned"], progress["succeeded"], progress["failed"]) == (len(pruned), BUDGET - len(pruned), 0)
    made = counted(api, name)
    jobs = api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={name}")[0]
    assert len(jobs) == len(made) < BUDGET  # blocks alone: no trial has a Job of its own, no next attempt
    carried = {t.name: (job, i) for job in made for i, t in enumerate(listed_of(job))}
    print(f"\nsearch in blocks: {len(made)} blocks ({[len(listed_of(j)) for j in made]}), {len(pruned)} pruned")
    assert set(carried) == set(told)
    for trial, entry in told.items():
        job, i = carried[trial]
        if trial in pruned:  # stopped: its index failed at once (retries 0), its script the stop's
            assert i in indexes(job["status"].get("failedIndexes")), (trial, job["status"])
            scripts = api.get(CONFIGMAP, job["metadata"]["name"])["data"]
            assert scripts[str(i)] == PRUNED_SCRIPT
            assert entry["value"] == pytest.approx(curve(entry["params"], entry["step"]), abs=1e-5)
        else:
            assert i in indexes(job["status"].get("completedIndexes"))
            assert entry["values"][0] == pytest.approx(curve(entry["params"]), abs=1e-5)
    snap = cli.status(name)
    states = {t["trial"]: t["state"] for t in snap["trials"]}
    assert {t for t, s in states.items() if s == "pruned"} == pruned
    assert {t for t, s in states.items() if s == "succeeded"} == set(told) - pruned


def test_a_merged_study_changed_since_it_was_submitted_is_refused_with_exit_4(testbed, api, cli, studies):
    name, trials = unique("mchg"), 4
    text = merged_study(name, testbed.namespace, trials, "30s", 2)
    path = studies(name, text)
    finish(cli.start("submit", path, "--detach", "-o", "json"), timeout=60)
    [job] = blocks(api, name)
    before = sorted(j["metadata"]["name"] for j in api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={name}")[0])
    Path(path).write_text(text.replace('"train"', '"train2"'))
    refused = Cli(testbed, traceback=False).start("submit", path)  # as users run it: no traceback
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 4, err[-2000:]
    assert f"(trial.command.0): {trials} of {trials} trial(s) in the cluster would run with a different spec" in err
    assert "Traceback" not in err
    after = sorted(j["metadata"]["name"] for j in api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={name}")[0])
    assert after == before == [job["metadata"]["name"]]  # nothing sent
    scripts = api.get(CONFIGMAP, job["metadata"]["name"])["data"]
    assert PRUNED_SCRIPT not in scripts.values()
