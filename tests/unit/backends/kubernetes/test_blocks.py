"""Merged submissions on Kubernetes: a block of trials is one Indexed Job (blocks.py), sent
and kept to the adaptive target by the submit loop (merged.py), read back per trial."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB
from stratctl.backends.kubernetes.blocks.blockmanifests import (
    PRUNED_SCRIPT,
    NotMergeable,
    block_manifests,
    mergeable,
    part_of,
    shell_word,
)
from stratctl.backends.kubernetes.blocks.blocks import expand, indexes, parallelism_for
from stratctl.backends.kubernetes.objects.record import parse_record
from stratctl.backends.kubernetes.objects.state import TrialState, classify, latest_attempts
from stratctl.backends.kubernetes.objects.summary import summary_of
from stratctl.backends.kubernetes.verbs.drain import drain, resume
from stratctl.backends.kubernetes.verbs.logs import pods_of
from stratctl.backends.kubernetes.verbs.revision import revise
from stratctl.backends.kubernetes.verbs.status import collect
from stratctl.backends.launch import prepare
from stratctl.cli.main import app
from stratctl.core.merging import merging
from stratctl.core.space import expand as trials_of
from stratctl.core.spec import load_study
from stratctl.errors import StudyChanged, StudyDeleted, StudyError, UsageError
from stratctl.run.throttle import Throttle
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import Events, FakeClock, MaxRng
from tests.unit.loop import STUDY, make
from tests.unit.rendering import Renderer

MERGED = STUDY.replace("  tasks: [{name: worker, replicas: 2}]\n", "").replace(
    "queue: default\n", "queue: default\nworkload: batch\nmerge: auto\n"
)
NS = "stratctl-e2e"


def merged_study(tmp_path: Path, text: str = MERGED) -> str:
    path = tmp_path / "merged.yaml"
    path.write_text(text)
    return str(path)


def _ranges(done: set[int]) -> str:
    return ",".join(str(i) for i in sorted(done))


class IndexedJobs(FakeCluster):
    """A cluster whose job controller runs Indexed Jobs as Kubernetes does: pods for the
    lowest indexes without one, up to `parallelism` live at once; each step running pods end
    (`fail`: indexes whose pod fails, retried up to backoffLimitPerIndex) and pending pods
    start. Single batch Jobs (next attempts) complete in two steps."""

    def __init__(self, fail: dict[str, set[int]] | None = None):
        super().__init__(NS)
        self.fail_indexes = fail or {}
        self.peak_live = 0

    def pods_of(self, block: dict) -> list[dict]:
        uid = block["metadata"]["uid"]
        return [o for (av, k, _, _), o in self.objects.items() if k == "Pod" and o["_owner"] == uid]

    def advance(self, finish: str = "Completed") -> None:
        for (av, kind, _, _), job in list(self.objects.items()):
            if (av, kind) != BATCH_JOB:
                continue
            if labels.BLOCK in job["metadata"]["labels"]:
                self._step_block(job)
            elif classify(job) is TrialState.PENDING:
                job["status"] = {"active": 1, "ready": 1}
            elif classify(job) is TrialState.RUNNING:
                job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}

    def new_pod(self, job: dict, i: int) -> None:
        """The pod the job controller makes for index `i`, labelled as Kubernetes labels it."""
        self.uids += 1
        name = f"{job['metadata']['name']}-{i}-{self.uids}"
        self.objects[("v1", "Pod", NS, name)] = {
            "_owner": job["metadata"]["uid"],
            "metadata": {
                "name": name,
                "namespace": NS,
                "creationTimestamp": f"2026-01-01T{self.uids // 3600:02d}:{self.uids // 60 % 60:02d}:"
                f"{self.uids % 60:02d}Z",
                "labels": {
                    **job["spec"]["template"]["metadata"]["labels"],
                    "job-name": job["metadata"]["name"],
                    "batch.kubernetes.io/job-completion-index": str(i),
                },
                "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
                "ownerReferences": [{"uid": job["metadata"]["uid"], "controller": True}],
            },
            "status": {"phase": "Pending"},
        }

    def _step_block(self, job: dict) -> None:
        status, spec = job.setdefault("status", {}), job["spec"]
        done, failed = indexes(status.get("completedIndexes")), indexes(status.get("failedIndexes"))
        failures = status.setdefault("_failures", {})
        for pod in self.pods_of(job):
            i, phase = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]), pod["status"]
            if phase["phase"] == "Running":
                if i in self.fail_indexes.get(job["metadata"]["name"], set()):
                    phase["phase"] = "Failed"
                    failures[i] = failures.get(i, 0) + 1
                    if failures[i] > spec["backoffLimitPerIndex"]:
                        failed.add(i)
                else:
                    phase["phase"] = "Succeeded"
                    done.add(i)
            elif phase["phase"] == "Pending":
                phase.update(phase="Running", conditions=[{"type": "Ready", "status": "True"}])
        live = {
            int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            for p in self.pods_of(job)
            if p["status"]["phase"] in ("Pending", "Running")
        }
        for i in range(spec["completions"]):
            if len(live) >= spec["parallelism"] or spec.get("suspend"):
                break
            if i in done or i in failed or i in live:
                continue
            live.add(i)
            self.new_pod(job, i)
        self.peak_live = max(self.peak_live, len(live))
        status.update(completedIndexes=_ranges(done), failedIndexes=_ranges(failed), active=len(live), ready=len(live))


def created(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [(k, n) for (_, k, _, n) in cluster.objects if k in ("Job", "ConfigMap") and not n.startswith("stratctl-")]


# -- merging ------------------------------------------------------------------------------


def test_kubernetes_merges_one_process_batch_trials_with_a_command_and_says_why_not_otherwise(tmp_path):
    assert merging(load_study(merged_study(tmp_path))).merged
    volcano = load_study(merged_study(tmp_path, MERGED.replace("workload: batch\n", "")))
    assert not merging(volcano).merged and "set workload: batch" in merging(volcano).why
    said = CliRunner().invoke(app, ["validate", merged_study(tmp_path, MERGED.replace("merge: auto", "merge: yes"))])
    assert (
        said.exit_code == 2
        and "merge: must be 'off' or 'auto' (YAML reads yes, true and on as a boolean)" in said.output
    )
    no_command = load_study(merged_study(tmp_path, MERGED.replace("  command:", "  args:")))
    assert not merging(no_command).merged and "states no command" in merging(no_command).why
    gang_text = MERGED.replace("  resources:", "  tasks: [{name: worker, replicas: 2}]\n  resources:")
    gang = load_study(merged_study(tmp_path, gang_text))
    assert not merging(gang).merged and "gang of its own" in merging(gang).why
    off = merging(load_study(merged_study(tmp_path, MERGED.replace("merge: auto", "merge: off"))))
    assert not off.merged and off.could  # `plan` says what auto would do
    assert off.why.startswith("merge: off: one scheduler object per trial (merge: auto would merge them: Indexed Jobs")
    assert not merging(volcano.model_copy(update={"merge": "off"})).could


# -- the block's objects --------------------------------------------------------------------


def rendered(path: str, n: int | None = None):
    study = load_study(path)
    renderer = Renderer(study)
    return study, [(t, renderer.render(t, 0)) for t in trials_of(study)[:n]]


def block_of(study, trials, parallelism: int, n: int = 0):
    return block_manifests(study, n, trials[0][1], [part_of(t, docs) for t, docs in trials], parallelism)


def test_a_block_is_a_configmap_of_scripts_and_an_indexed_job_whose_hash_leaves_out_parallelism(tmp_path):
    study, trials = rendered(merged_study(tmp_path), 6)
    (cm, job), listed = block_of(study, trials, parallelism=2)
    assert (cm["kind"], cm["metadata"]["name"], job["metadata"]["name"]) == (
        "ConfigMap",
        "loop-block-0",
        "loop-block-0",
    )
    assert sorted(cm["data"]) == [str(i) for i in range(6)]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 6, 2)
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailIndex", "onExitCodes": {"containerName": "worker", "operator": "In", "values": [199]}},
    ]
    assert spec["backoffLimitPerIndex"] == study.retries.max_retry
    pod = spec["template"]
    assert pod["metadata"]["labels"][labels.BLOCK] == "loop-block-0" and labels.TRIAL not in pod["metadata"]["labels"]
    assert pod["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "default"
    assert pod["spec"]["containers"][0]["command"] == ["/bin/sh", "/etc/stratctl/block/$(JOB_COMPLETION_INDEX)"]
    assert [t.name for t in listed] == [t.name for t, _ in trials]
    (cm5, job5), _ = block_of(study, trials, parallelism=5)
    assert job5["metadata"]["labels"][labels.SPEC_HASH] == job["metadata"]["labels"][labels.SPEC_HASH]
    (_, other), _ = block_of(study, trials[:5], parallelism=2)
    assert other["metadata"]["labels"][labels.SPEC_HASH] != job["metadata"]["labels"][labels.SPEC_HASH]


def test_each_trials_script_runs_its_own_command_line_with_its_own_environment(tmp_path):
    study, trials = rendered(merged_study(tmp_path), 4)
    (cm, _), listed = block_of(study, trials, parallelism=2)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    train = bin_dir / "train"
    train.write_text('#!/bin/sh\necho "argv=$*"\necho "trial=$STRATCTL_TRIAL rank=$RANK resume=$STRATCTL_RESUME"\n')
    train.chmod(0o755)
    script = tmp_path / "2"
    script.write_text(cm["data"]["2"])
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": "2", "RANK": "2"}
    out = subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True, check=True).stdout
    params = listed[2].params
    assert out.splitlines() == [
        f"argv=--lr={params['lr']} --layers={params['layers']}",
        f"trial={listed[2].name} rank=0 resume=",
    ]
    env["STRATCTL_INDEX_DISRUPTIONS"] = "1"  # its pod was preempted once: it resumes
    out = subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[1].endswith("resume=1")


@pytest.mark.parametrize(
    "word, said",
    [
        ("--shard=$(JOB_COMPLETION_INDEX)", '--shard="${JOB_COMPLETION_INDEX}"'),
        ("$$(X)", "'$''(X)'"),
        ("$HOME", "'$'HOME"),
        ("a b", "'a b'"),
        ("", "''"),
    ],
)
def test_a_command_word_keeps_kubernetes_references_and_nothing_else_of_the_shell(word, said):
    assert shell_word(word) == said


def test_trials_whose_pods_differ_in_more_than_command_and_env_cannot_share_a_block(tmp_path):
    text = MERGED.replace("  image: busybox\n", '  image: busybox\n  annotations: {team: "{{ params.layers }}"}\n')
    _, trials = rendered(merged_study(tmp_path, text), 2)
    with pytest.raises(NotMergeable, match=r"trial 1: its pod's metadata.annotations\.team differs"):
        mergeable(trials[0][1], trials[1][1], "trial 1")
    image = MERGED.replace("  image: busybox\n", '  image: "busybox:{{ params.layers }}"\n')
    _, trials = rendered(merged_study(tmp_path, image), 2)
    with pytest.raises(NotMergeable, match=r"its pod's spec\.containers\[0\]\.image differs"):
        mergeable(trials[0][1], trials[1][1], "trial 1")
    _, same = rendered(merged_study(tmp_path), 2)
    mergeable(same[0][1], same[1][1], "trial 1")


# -- reading a block back -------------------------------------------------------------------


def block_in_cluster(tmp_path, completed="", failed="", pods=()):
    study, trials = rendered(merged_study(tmp_path), 6)
    (_, job), _ = block_of(study, trials, parallelism=3)
    job["metadata"]["uid"] = "u1"
    job["status"] = {"completedIndexes": completed, "failedIndexes": failed}
    made = []
    for i, phase, ready in pods:
        made.append(
            {
                "metadata": {
                    "labels": {labels.BLOCK: "loop-block-0"},
                    "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
                    "ownerReferences": [{"uid": "u1", "controller": True}],
                },
                "status": {
                    "phase": phase,
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }
        )
    return trials, job, made


def test_a_blocks_indexes_read_back_as_its_trials_states(tmp_path):
    trials, job, pods = block_in_cluster(
        tmp_path, completed="0,2", failed="1", pods=[(3, "Running", True), (4, "Pending", False)]
    )
    jobs, [block] = expand([job], pods)
    states = {t: classify(j) for t, j in latest_attempts(jobs).items()}
    names = [t.name for t, _ in trials]
    assert [states[n] for n in names] == [
        TrialState.SUCCEEDED,
        TrialState.FAILED,
        TrialState.SUCCEEDED,
        TrialState.RUNNING,
        TrialState.PENDING,
        TrialState.PENDING,
    ]
    assert block.queued() == [names[5]]
    view = latest_attempts(jobs)[names[5]]
    assert "queued in its block loop-block-0: at most 3" in view["metadata"]["annotations"][labels.WAITS]
    assert view["metadata"]["labels"][labels.ATTEMPT] == "0"


def test_parallelism_follows_the_target_but_never_below_the_live_pods(tmp_path):
    _, job, pods = block_in_cluster(tmp_path, pods=[(0, "Running", True), (1, "Running", True), (2, "Pending", False)])
    [block] = expand([job], pods)[1]
    assert parallelism_for(block, target=8, flying_outside=3) == 5
    assert parallelism_for(block, target=1, flying_outside=0) == 3  # lower would delete a pod: a failure of its index
    assert parallelism_for(block, target=0, flying_outside=9) == 3


# -- the loop -------------------------------------------------------------------------------


def test_a_merged_study_is_one_configmap_and_one_indexed_job_kept_to_the_target(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    loop, trials = make(merged_study(tmp_path), cluster, clock)
    progress = loop.run()
    assert progress.succeeded == 10 and progress.failed == 0 and progress.created == 10
    assert sorted(created(cluster)) == [("ConfigMap", "loop-block-0"), ("Job", "loop-block-0")]
    assert cluster.peak_live == 3  # the study's cap, never a wall of pending pods
    job = cluster.objects[("batch/v1", "Job", NS, "loop-block-0")]
    assert job["status"]["completedIndexes"] == ",".join(str(i) for i in range(10))


class Killed(BaseException):
    """The launcher dying mid-run (SIGKILL)."""


def test_a_rerun_after_a_kill_finds_the_block_and_sends_no_second_one(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    first, _ = make(merged_study(tmp_path), cluster, clock)
    steps = []

    def die(seconds):
        steps.append(seconds)
        cluster.advance()
        if len(steps) == 2:
            raise Killed()

    first.sleep = die
    with pytest.raises(Killed):
        first.run()
    assert sorted(created(cluster)) == [("ConfigMap", "loop-block-0"), ("Job", "loop-block-0")]
    again, _ = make(merged_study(tmp_path), cluster, clock)
    progress = again.run()
    assert progress.succeeded == 10 and progress.created == 0
    assert sorted(created(cluster)) == [("ConfigMap", "loop-block-0"), ("Job", "loop-block-0")]


def test_a_trial_whose_index_failed_runs_its_next_attempt_as_a_job_of_its_own(tmp_path):
    cluster, clock = IndexedJobs(fail={"loop-block-0": {4}}), FakeClock()
    loop, trials = make(merged_study(tmp_path), cluster, clock)
    progress = loop.run()
    fourth = trials[4].name
    assert progress.succeeded == 10 and progress.failed == 0
    assert sorted(created(cluster)) == [("ConfigMap", "loop-block-0"), ("Job", "loop-block-0"), ("Job", f"{fourth}-a1")]


def test_status_shows_each_trial_of_a_block(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    loop, trials = make(merged_study(tmp_path), cluster, clock, detach=True)
    loop.source = Path(merged_study(tmp_path)).read_text()
    loop.run()
    cluster.record("loop")["data"]["study.yaml"] = loop.source
    cluster.advance()  # three pods made (pending)
    cluster.advance()  # they run
    cluster.requests_seen = []
    snap = collect(cluster, NS, "loop", now=clock())
    states = {row.trial: row.state for row in snap.trials}
    assert sorted(states.values()) == ["pending"] * 7 + ["running"] * 3
    pod_lists = sorted(q["labelSelector"] for path, q in cluster.requests_seen if path.endswith("/pods"))  # each once
    assert pod_lists == ["stratctl.io/study=loop,!stratctl.io/block", "stratctl.io/study=loop,stratctl.io/block"]
    waits = [row.pending for row in snap.trials if row.state == "pending"]
    assert all(w.startswith("queued in its block loop-block-0") for w in waits)
    assert snap.studies[0].in_flight == 3  # the seven queued in the block wait: not in flight
    uid = cluster.objects[("batch/v1", "Job", NS, "loop-block-0")]["metadata"]["uid"]
    assert {(r.job, r.podgroup) for r in snap.trials} == {("loop-block-0", f"podgroup-{uid}")}  # names kubectl finds
    loop.save_summary(force=True)  # a fresh summary: a table of the first trials reads those alone
    first = collect(cluster, NS, "loop", now=clock(), shown=4)
    assert [(r.trial, r.state) for r in first.trials] == sorted(states.items())[:4]


def test_drain_suspends_a_block_with_its_running_trials_and_resume_lets_it_run_again(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    loop, trials = make(merged_study(tmp_path), cluster, clock, detach=True)
    loop.run()
    cluster.advance()
    cluster.advance()  # three run, seven are queued
    [outcome] = drain(cluster, NS, "loop", settle=0)
    job = cluster.objects[("batch/v1", "Job", NS, "loop-block-0")]
    assert job["spec"]["suspend"] is True
    assert sorted(outcome.suspended) == sorted(t.name for t in trials[:3])
    cluster.advance()  # the job controller makes no pod while suspended
    live = [o for (_, k, _, _), o in cluster.objects.items() if k == "Pod" and o["status"]["phase"] == "Pending"]
    assert not live
    cluster.record("loop")["data"]["study.yaml"] = Path(merged_study(tmp_path)).read_text()
    snap = collect(cluster, NS, "loop", now=clock())
    held = [r for r in snap.trials if r.state == "suspended"]
    assert len(held) == 7 and all(r.pending == "its block loop-block-0 is suspended (drain)" for r in held)
    [study] = snap.studies
    assert study.states["suspended"] == 7 and study.in_flight == study.states["running"] + study.states["pending"]
    back = resume(cluster, NS, "loop")
    assert job["spec"]["suspend"] is False and len(back.resumed) == 10 - len(indexes(job["status"]["completedIndexes"]))
    assert cluster.record("loop")["data"]["drained"] == "false"


def test_a_trial_of_a_block_out_of_failures_is_given_up_on_its_block_once(tmp_path):
    text = MERGED.replace("throttle:", "retries: {max_failures: 0}\nthrottle:")
    cluster, clock = IndexedJobs(fail={"loop-block-0": {2}}), FakeClock()
    loop, trials = make(merged_study(tmp_path, text), cluster, clock)
    progress = loop.run()
    assert (progress.succeeded, progress.failed) == (9, 1)
    job = cluster.objects[("batch/v1", "Job", NS, "loop-block-0")]
    assert job["metadata"]["annotations"][f"{labels.GIVEN_UP}.2"]
    assert sorted(created(cluster)) == [("ConfigMap", "loop-block-0"), ("Job", "loop-block-0")]
    snap = collect(cluster, NS, "loop", now=clock())
    [failed] = [row for row in snap.trials if row.state == "failed"]
    assert failed.trial == trials[2].name and failed.reason


def test_detach_sends_every_block_at_once_sharing_the_room(tmp_path, monkeypatch):
    monkeypatch.setattr("stratctl.core.merging.KUBERNETES_BLOCK", 4)
    cluster, clock = IndexedJobs(), FakeClock()
    loop, trials = make(merged_study(tmp_path), cluster, clock, detach=True)
    progress = loop.run()
    assert progress.created == 10 and progress.detached
    blocks = [o for (_, k, _, n), o in cluster.objects.items() if k == "Job"]
    assert [b["spec"]["completions"] for b in blocks] == [4, 4, 2]
    assert [b["spec"]["parallelism"] for b in blocks] == [1, 1, 1]  # a target of 3 shared by 3 blocks


def test_submit_refuses_at_the_merge_field_trials_that_cannot_share_a_block(tmp_path):
    text = MERGED.replace("  image: busybox\n", '  image: busybox\n  annotations: {team: "{{ params.layers }}"}\n')
    path = merged_study(tmp_path, text)
    with pytest.raises(StudyError) as refused:
        prepare(path)
    [problem] = refused.value.problems
    line = text.splitlines().index("merge: auto") + 1
    assert (problem.file, problem.line) == (path, line)
    assert "trial 1 (" in problem.message and "metadata.annotations.team differs" in problem.message
    # validate, plan and render refuse it as submit does, at the same place, exit 2, no traceback
    for command in ("validate", "plan", "render"):
        said = CliRunner().invoke(app, [command, path])
        assert said.exit_code == 2 and f"{path}:{line}:" in said.output and "annotations.team" in said.output
        assert "Traceback" not in said.output
    prepare(merged_study(tmp_path))  # trials that differ in command and env alone: accepted


def test_a_blocks_new_pods_are_paced_as_the_studys_writes(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    loop, _ = make(merged_study(tmp_path, MERGED.replace("initial: 3, max: 3", "initial: 8, max: 8")), cluster, clock)
    loop.throttle = Throttle(qps=2, burst=4, clock=clock, sleep=clock.sleep, rng=MaxRng())
    seen: list[int] = []
    sleep = loop.sleep

    def watch(seconds):
        job = cluster.objects.get(("batch/v1", "Job", NS, "loop-block-0"))
        if job is not None:
            seen.append(job["spec"]["parallelism"])
        sleep(seconds)

    loop.sleep = watch
    progress = loop.run()
    assert progress.succeeded == 10
    assert seen[0] <= 4 < max(seen)  # started within the burst (not at the target, 8), raised as tokens came
    assert all(b - a <= 2 for a, b in zip(seen, seen[1:]))  # at most qps x the 1 s cycle at a time


# -- a changed study ------------------------------------------------------------------------


def revised(cluster, path, rerun=False):
    """What `submit` does before its loop starts, for the study file as it is now."""
    study = load_study(path)
    trials = trials_of(study)
    events = Events()
    found = revise(cluster, study, trials, Renderer(study), {}, BATCH_JOB, rerun, events, file=path)
    return found, events


def test_a_merged_study_changed_since_it_was_submitted_is_refused_with_exit_4_and_nothing_sent(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    path = merged_study(tmp_path)
    make(path, cluster, clock)[0].run()
    same, _ = revised(cluster, path)
    assert not same.refused and same.unchanged == 10  # each trial judged by its own spec hash, kept in its block
    objects = dict(cluster.objects)
    Path(path).write_text(MERGED.replace("image: busybox", "image: busybox:1.36"))
    with pytest.raises(StudyChanged) as refused:
        revised(cluster, path)
    assert refused.value.exit_code == 4
    assert "(trial.image): 10 of 10 trial(s) in the cluster would run with a different spec" in str(refused.value)
    assert cluster.objects == objects


def test_rerun_changed_stops_a_running_trials_index_before_its_new_attempt_runs(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    path = merged_study(tmp_path)
    loop, trials = make(path, cluster, clock, detach=True)
    loop.run()
    cluster.advance()  # three pods made: the block's parallelism
    live = {
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        for p in cluster.pods_of(block0(cluster))
    }
    assert len(live) == 3
    Path(path).write_text(MERGED.replace("image: busybox", "image: busybox:1.36"))
    found, events = revised(cluster, path, rerun=True)
    assert len(found.changed) == 10
    scripts = cluster.objects[("v1", "ConfigMap", NS, "loop-block-0")]["data"]
    # every trial not ended is stopped in its block (its script exits 199, FailIndex), the
    # running ones' pods deleted: their new attempts never run beside them
    assert {i for i, s in scripts.items() if s == PRUNED_SCRIPT} == {str(i) for i in range(10)}
    assert not cluster.pods_of(block0(cluster))
    assert sorted(n for (_, k, _, n) in cluster.objects if k == "Job" and n.endswith("-a1")) == sorted(
        f"{t.name}-a1" for t in trials
    )
    assert any("runs the new spec; loop-block-0-" in e for e in events.lines)


def block0(cluster):
    return cluster.objects[("batch/v1", "Job", NS, "loop-block-0")]


def test_logs_find_a_trials_pod_in_its_block(tmp_path):
    cluster, clock = IndexedJobs(), FakeClock()
    loop, trials = make(merged_study(tmp_path), cluster, clock)
    loop.run()
    [pod] = pods_of(cluster, NS, "loop", trials[2].name)
    assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    with pytest.raises(UsageError, match="study loop has no trial 'loop-nosuchtrial'"):
        pods_of(cluster, NS, "loop", "loop-nosuchtrial")
    queued, _ = make(merged_study(tmp_path, MERGED.replace("name: loop", "name: later")), cluster, clock, detach=True)
    queued.run()  # sent, no pod made yet
    first = queued.trials[queued.order[0]].name
    with pytest.raises(UsageError, match=f"trial {first} of study later has no pod yet: it waits for its turn in its "):
        pods_of(cluster, NS, "later", first)


def test_a_pod_that_ended_before_its_job_counts_it_is_not_read_as_queued_again(tmp_path):
    # the job controller lags its pods: index 0's pod Succeeded, index 1's Failed, neither counted yet
    _, job, pods = block_in_cluster(tmp_path, pods=[(0, "Succeeded", False), (1, "Failed", False)])
    jobs, [block] = expand([job], pods)
    states = {j["metadata"]["name"]: classify(j) for j in jobs}
    assert states["loop-block-0-0"] is TrialState.SUCCEEDED
    assert states["loop-block-0-1"] is TrialState.PENDING  # between two runs of its index, in flight
    assert block.queued() == [t.name for t in block.listed[2:]]  # neither is queued again


def test_a_loop_following_a_study_that_delete_force_takes_out_stops_and_sends_nothing_again(tmp_path):
    from stratctl.backends.kubernetes.verbs import delete as deleting

    cluster, clock = IndexedJobs(), FakeClock()
    loop, _ = make(merged_study(tmp_path), cluster, clock)
    cycles = []

    def step(seconds):
        cycles.append(seconds)
        cluster.advance()
        if len(cycles) == 2:  # `stratctl delete --force` while the loop follows
            other = FakeClock()
            outcome = deleting.delete(cluster, NS, "loop", timeout=5, clock=other, sleep=other.sleep)
            assert outcome.deleted["jobs"] == 1 and outcome.left == {"pods": 3}  # no garbage collector here

    loop.sleep = step
    with pytest.raises(StudyDeleted, match="study loop is being deleted"):
        loop.run()
    assert created(cluster) == []  # no second block: the trials the delete took out are not sent again
    assert parse_record(cluster.record("loop")).deleting  # kept (pods left), marked: a later loop stops too


class TimedJobs(IndexedJobs):
    """Each step is 10 s of the cluster's clock: a pod that starts running gets its start
    time, one that ends its finish time, as the kubelet writes them."""

    def __init__(self):
        super().__init__()
        self.now = 1_800_000_000.0

    def advance(self, finish: str = "Completed") -> None:
        self.now += 10
        super().advance(finish)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now))
        for (_, kind, _, _), pod in self.objects.items():
            if kind != "Pod":
                continue
            status = pod["status"]
            if status["phase"] == "Running" and "startTime" not in status:
                status["startTime"] = stamp
            if status["phase"] == "Succeeded" and "containerStatuses" not in status:
                status["containerStatuses"] = [{"state": {"terminated": {"exitCode": 0, "finishedAt": stamp}}}]


def test_the_studys_summary_counts_each_trial_of_a_block_until_its_pod_ended(tmp_path):
    cluster, clock = TimedJobs(), FakeClock()
    loop, _ = make(merged_study(tmp_path), cluster, clock)
    loop.wall = lambda: cluster.now
    loop.mirrored = lambda: ([o for (_, k, _, _), o in cluster.objects.items() if k == "Pod"], [])
    progress = loop.run()
    assert progress.succeeded == 10
    row = summary_of(cluster.record("loop"), cluster.now, 30)
    # each trial's pod ran one step (10 s) on one GPU; not until its block, or the loop, ended
    assert row is not None and row.gpu_hours == pytest.approx(10 * 10 / 3600, abs=1e-4)


def test_plan_says_how_many_blocks_a_merged_study_is(tmp_path):
    from stratctl.core.plan import as_json, notes
    from tests.unit.rendering import make_plan

    plan = make_plan(merged_study(tmp_path, MERGED.replace("values: [2, 4]", f"values: {list(range(250))}")))
    assert len(plan.trials) == 1250
    said = as_json(plan)["merge"]
    assert (said["merged"], said["blocks"]) == (True, 2) and said["why"].startswith("merged: Indexed Jobs")
    assert any(line.endswith("(2 blocks for these trials)") for line in notes(plan, 5))
    off = as_json(make_plan(merged_study(tmp_path, MERGED.replace("merge: auto", "merge: off"))))["merge"]
    assert (off["merged"], off["blocks"]) == (False, None)


def test_render_shows_a_merged_studys_blocks_as_submit_sends_them(tmp_path):
    path = merged_study(tmp_path)
    cluster, clock = IndexedJobs(), FakeClock()
    make(path, cluster, clock)[0].run()
    sent = {k[1]: o for k, o in cluster.objects.items() if k[3] == "loop-block-0"}
    said = CliRunner().invoke(app, ["render", path, "--format", "json"])
    assert said.exit_code == 0 and "note: merge: auto: 10 trials as 1 block(s)" in said.stderr
    shown, text, at = [], said.stdout, 0
    while text[at:].strip():  # one JSON object a document
        doc, at = json.JSONDecoder().raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        shown.append(doc)
    assert [(d["kind"], d["metadata"]["name"]) for d in shown] == [
        ("ConfigMap", "loop-block-0"),
        ("Job", "loop-block-0"),
    ]
    for doc in shown:  # the same objects: the spec hash leaves out only the parallelism the loop changes
        assert doc["metadata"]["labels"][labels.SPEC_HASH] == sent[doc["kind"]]["metadata"]["labels"][labels.SPEC_HASH]
    assert shown[0]["data"] == sent["ConfigMap"]["data"]
