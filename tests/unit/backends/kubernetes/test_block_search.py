"""A closed-loop search in merged submissions (backends/kubernetes/loop/merged.py): the trials it
asks in one cycle go as one block, it is told each index's result, and its pruner stops one
index (searching.py) without that trial running again, on an in-memory cluster whose job
controller runs Indexed Jobs and their pod failure policy as Kubernetes does."""

from __future__ import annotations

import json
import subprocess

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.blocks.blockmanifests import PRUNED_SCRIPT
from stratctl.backends.kubernetes.blocks.blocks import indexes, listed_of
from stratctl.backends.kubernetes.objects.record import parse_record
from stratctl.backends.kubernetes.verbs.status import collect
from stratctl.backends.launch import prepare
from stratctl.core.merging import merging
from stratctl.core.spec import load_study
from stratctl.errors import StudyError
from tests.unit.backends.kubernetes.test_blocks import NS, IndexedJobs, _ranges
from tests.unit.backends.kubernetes.test_closedloop import make, with_pods
from tests.unit.fakes import FakeClock

SEARCH = """\
name: tpe
namespace: stratctl-e2e
workload: batch
merge: auto
space:
  x: {type: uniform, low: -5, high: 5}
strategy: {kind: tpe, trials: 9, seed: 2}
objective: {metric: loss, direction: minimize}
trial:
  image: busybox
  command: ["train", "--x={{ params.x }}"]
  resources: {requests: {nvidia.com/gpu: 1}}
retries: {max_retry: 2}
throttle: {qps: 100, burst: 10, parallelism: {min: 1, initial: 3, max: 3}}
"""
PRUNED = SEARCH.replace(
    "objective: {metric: loss, direction: minimize}\n",
    "objective: {metric: loss, direction: minimize}\npruner: {kind: median, startup_trials: 3}\n",
)
STEPS = 4  # steps a trial runs (one per cycle) before it ends


def loss(params: dict) -> float:
    return (params["x"] - 2.0) ** 2


class LearningBlocks(IndexedJobs):
    """Indexed Jobs whose trials learn: a running pod reports one step per cycle along a
    curve set by its trial's parameters (`loss + 1 / (step + 1)`, as `stratctl report`
    writes it to its pod) and ends after STEPS steps with its final loss as its result.

    As a kubelet and the job controller do: a pod deleted while it runs ends Failed (exit
    137) and counts as a failure of its index; a pod whose script is not a trial's command
    (no `exec`) is run by /bin/sh for its exit status; the Job's pod failure policy
    decides what a failed pod means (FailIndex: the index fails at once)."""

    def __init__(self):
        super().__init__()
        self.pods_made: dict[tuple[str, int], int] = {}

    def delete(self, kind, name, namespace=None, resource_version=None) -> None:
        pod = self.objects.get(("v1", "Pod", namespace, name))
        if kind[1] == "Pod" and pod is not None:
            self.metrics.record("DELETE", 200, 0.001)
            pod["status"] = _ended("Failed", 137, "")
            pod["_counted"] = False
            return
        super().delete(kind, name, namespace)

    def _step_block(self, job: dict) -> None:
        status, spec = job.setdefault("status", {}), job["spec"]
        done, failed = indexes(status.get("completedIndexes")), indexes(status.get("failedIndexes"))
        failures = status.setdefault("_failures", {})
        scripts = self.objects[("v1", "ConfigMap", NS, job["metadata"]["name"])]["data"]
        listed = listed_of(job)
        for pod in self.pods_of(job):
            i = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            phase = pod["status"]["phase"]
            if phase == "Pending":
                script = scripts[str(i)]
                if "exec " in script:
                    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                    pod["_steps"] = 0
                else:  # not a trial's command: what it exits with is what the kubelet reports
                    code = subprocess.run(["/bin/sh", "-c", script], check=False).returncode
                    pod["status"] = _ended("Failed" if code else "Succeeded", code, "")
                    pod["_counted"] = False
            elif phase == "Running":
                pod["_steps"] += 1
                final = loss(listed[i].params)
                steps = {str(s): {"loss": final + 1 / (s + 1)} for s in range(pod["_steps"])}
                pod["metadata"]["annotations"][labels.REPORT] = json.dumps(steps)
                if pod["_steps"] >= STEPS:
                    pod["status"] = _ended("Succeeded", 0, json.dumps({"loss": final}))
                    done.add(i)
            if pod["status"]["phase"] == "Failed" and pod.get("_counted") is False:
                pod["_counted"] = True
                code = pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
                failures[i] = failures.get(i, 0) + 1
                if _fails_index(spec, code) or failures[i] > spec["backoffLimitPerIndex"]:
                    failed.add(i)
        live = {
            int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            for p in self.pods_of(job)
            if p["status"]["phase"] in ("Pending", "Running")
        }
        for i in range(spec["completions"]):
            if len(live) >= spec["parallelism"]:
                break
            if i in done or i in failed or i in live:
                continue
            live.add(i)
            self.pods_made[(job["metadata"]["name"], i)] = self.pods_made.get((job["metadata"]["name"], i), 0) + 1
            self.new_pod(job, i)
        self.peak_live = max(self.peak_live, len(live))
        status.update(completedIndexes=_ranges(done), failedIndexes=_ranges(failed), active=len(live), ready=len(live))


def _ended(phase: str, code: int, message: str) -> dict:
    terminated = {"exitCode": code, "message": message, "finishedAt": "2026-01-01T01:00:00Z"}
    return {"phase": phase, "containerStatuses": [{"name": "worker", "state": {"terminated": terminated}}]}


def _fails_index(spec: dict, code: int) -> bool:
    for rule in spec["podFailurePolicy"]["rules"]:
        on = rule.get("onExitCodes")
        if on and on["operator"] == "In" and code in on["values"]:
            return rule["action"] == "FailIndex"
    return False


@pytest.fixture
def study_file(tmp_path):
    def write(text: str = SEARCH) -> str:
        path = tmp_path / "study.yaml"
        path.write_text(text)
        return str(path)

    return write


def blocks(cluster) -> list[dict]:
    return [o for (av, k, _, n), o in cluster.objects.items() if k == "Job" and labels.BLOCK in o["metadata"]["labels"]]


def test_a_search_asks_its_trials_in_blocks_and_is_told_every_index(study_file):
    assert "asks in one cycle" in merging(load_study(study_file())).why
    cluster, clock = LearningBlocks(), FakeClock()
    submitter, first = make(study_file(), cluster, clock)
    progress = with_pods(submitter, cluster).run()
    assert progress.succeeded == 9 and progress.failed == 0 and progress.done
    jobs = [k for (_, k, _, n) in cluster.objects if k == "Job"]
    made = blocks(cluster)
    assert len(jobs) == len(made) == 3  # three blocks of three (the trials end together), no Job of one trial
    carried = [t.name for b in made for t in listed_of(b)]
    assert len(carried) == len(set(carried)) == 9 and carried[:3] == [t.name for t in first]
    assert cluster.peak_live == 3
    told = parse_record(cluster.record("tpe")).told
    assert set(told) == set(carried)
    for entry in told.values():
        assert entry["state"] == "complete" and entry["values"] == [pytest.approx(loss(entry["params"]))]


def test_the_pruner_stops_one_index_which_fails_at_once_and_is_not_run_again(study_file):
    cluster, clock = LearningBlocks(), FakeClock()
    submitter, _ = make(study_file(PRUNED), cluster, clock)
    events: list[str] = []
    submitter.reporter.event = events.append
    progress = with_pods(submitter, cluster).run()
    told = parse_record(cluster.record("tpe")).told
    pruned = {n for n, e in told.items() if e["state"] == "pruned"}
    assert pruned and progress.pruned == len(pruned) and progress.succeeded == 9 - len(pruned) and progress.done
    assert progress.failed == 0
    where = {t.name: (b, t) for b in blocks(cluster) for t in listed_of(b)}
    for name in pruned:
        block, trial = where[name]
        i = [t.name for t in listed_of(block)].index(name)
        scripts = cluster.objects[("v1", "ConfigMap", NS, block["metadata"]["name"])]["data"]
        assert scripts[str(i)] == PRUNED_SCRIPT
        assert i in indexes(block["status"]["failedIndexes"])
        # the stopped pod (a failure of its index), then one that ran the stop's script: FailIndex
        assert cluster.pods_made[(block["metadata"]["name"], i)] == 2
        assert block["status"]["_failures"][i] == 2 <= block["spec"]["backoffLimitPerIndex"]
        assert any(e.startswith(f"trial {name} pruned at step ") for e in events)
    assert not [n for (_, k, _, n) in cluster.objects if k == "Job" and n.endswith("-a1")]  # no next attempt
    rows = {r.trial: r for r in collect(cluster, NS, "tpe").trials}
    assert {n for n, r in rows.items() if r.state == "pruned"} == pruned
    assert {n for n, r in rows.items() if r.state == "succeeded"} == set(where) - pruned


def test_a_search_whose_template_puts_a_parameter_outside_command_and_env_is_refused_at_merge(study_file):
    text = SEARCH.replace("  image: busybox\n", "  image: busybox\n  annotations: {x: '{{ params.x }}'}\n")
    text = text.replace("initial: 3", "initial: 1")  # one first trial: the space's ends show it
    assert len(prepare(study_file(text.replace("merge: auto", "merge: off"))).trials) == 1
    with pytest.raises(StudyError) as caught:
        prepare(study_file(text))
    said = str(caught.value)
    assert said.startswith(f"{study_file(text)}:4:") and "a trial at the space's low end" in said
    assert "its pod's metadata.annotations.x differs from the first trial's" in said
