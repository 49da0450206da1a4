"""workload: batch — batch/v1 Jobs ganged by a PodGroup: their states, GPU time, results,
summary, status, drain and preemption, from recorded objects and the in-memory cluster."""

from __future__ import annotations

import json

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD, PODGROUP
from stratctl.backends.kubernetes.attempts.requeue import Requeue
from stratctl.backends.kubernetes.objects.jobview import Carried, usage
from stratctl.backends.kubernetes.objects.record import StudyRecord, record_manifest, record_name, suspended_of
from stratctl.backends.kubernetes.objects.state import (
    TrialState,
    classify,
    podgroup_name,
    preemptions,
    run_starts,
    timestamp,
)
from stratctl.backends.kubernetes.objects.summary import build, latest_slim
from stratctl.backends.kubernetes.verbs.drain import drain
from stratctl.backends.kubernetes.verbs.status import _first_trials, collect
from stratctl.backends.kubernetes.watch.disruptions import Disruptions
from stratctl.core.spec import load_study
from stratctl.errors import StudyError
from tests.unit import recorded
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import STUDY, make

NOW = timestamp("2025-05-01T10:11:00Z")
BATCH_STUDY = STUDY.replace("queue: default", "queue: default\nworkload: batch")


def listed(job: dict) -> dict:
    """A batch/v1 Job as an item of a list: the API server leaves out apiVersion and kind."""
    return {k: v for k, v in job.items() if k not in ("apiVersion", "kind")}


def test_a_batch_job_is_pending_running_succeeded_failed_or_preempted_from_its_status():
    assert classify(recorded.batch_pending_job()) is TrialState.PENDING
    assert classify(recorded.batch_running_job()) is TrialState.RUNNING
    assert classify(listed(recorded.batch_running_job())) is TrialState.RUNNING
    assert classify(recorded.batch_completed_job()) is TrialState.SUCCEEDED
    assert classify(recorded.batch_failed_job()) is TrialState.FAILED
    # the pod failure policy failed it because a pod was preempted: preemption, not failure
    preempted = recorded.batch_preempted_job()
    assert classify(preempted) is TrialState.PREEMPTED and classify(listed(preempted)) is TrialState.PREEMPTED
    assert preemptions(preempted) == 1 and preemptions(recorded.batch_failed_job()) == 0


def test_a_batch_jobs_podgroup_is_the_one_rendered_beside_it():
    assert podgroup_name(recorded.batch_running_job()) == recorded.TRIAL
    assert podgroup_name(recorded.running_job()) == f"{recorded.TRIAL}-{recorded.running_job()['metadata']['uid']}"


def test_gpu_time_of_a_batch_job_runs_from_its_first_pods_start():
    running = recorded.batch_running_job()
    pods = [recorded.batch_pod(running, 0), recorded.batch_pod(running, 1, started="2025-05-01T10:01:01Z")]
    started = run_starts(pods)[recorded.BATCH_UID]
    assert started == timestamp("2025-05-01T10:01:00Z")
    assert usage(running, NOW, started=started).gpu_seconds == 600 * 2  # 10 min on 2 GPUs
    assert usage(running, NOW).gpu_seconds == 0  # no pod known to have started: nothing counted
    done = usage(recorded.batch_completed_job(), NOW + 10_000, started=started)
    assert (done.gpu_seconds, done.gpu_seconds_lost) == (3600 * 2, 0)  # 10:01 -> 11:01
    lost = usage(recorded.batch_preempted_job(), NOW + 10_000, started=started)
    assert lost.gpu_seconds == lost.gpu_seconds_lost == (30 * 60 + 30) * 2  # 10:01 -> failed 10:31:30


def rows(jobs: list[dict], starts=None, results=None):
    cm = record_manifest(StudyRecord(study=recorded.STUDY, spec_hash="x", trials=3), "stratctl-e2e")
    return build(NOW, [cm], latest_slim(jobs), results=results, starts=starts)


def test_a_running_batch_trial_is_running_with_its_gpu_time_in_the_summary():
    running = listed(recorded.batch_running_job())
    [study], [trial] = rows([running], starts={recorded.BATCH_UID: timestamp("2025-05-01T10:01:00Z")})
    assert (trial.state, trial.phase, trial.podgroup) == ("running", "Running", recorded.TRIAL)
    assert study.states["running"] == 1 and study.in_flight == 1
    assert study.gpu_hours == pytest.approx(600 * 2 / 3600)


def batch_study(tmp_path, extra: str = ""):
    path = tmp_path / "batch.yaml"
    path.write_text(BATCH_STUDY + extra)
    return str(path)


def run_jobs(cluster: FakeCluster, finish: dict[str, str] | None = None, at: str = "2025-05-01T10:01:00Z"):
    """One step of a cluster running batch/v1 Jobs: pending ones get their pods (started
    `at`), running ones complete with a result, or fail as `finish` says (job name ->
    "preempted"); returns the pods made."""
    finish = finish or {}
    for (api_version, kind, ns, name), job in list(cluster.objects.items()):
        if (api_version, kind) != BATCH_JOB:
            continue
        job.setdefault("metadata", {}).setdefault("uid", f"uid-{name}")
        state = classify(job)
        if state is TrialState.PENDING:
            job["status"] = recorded.batch_running_job()["status"]
            for i in range(2):
                pod = recorded.batch_pod(job, i, started=at)
                cluster.objects[("v1", "Pod", ns, pod["metadata"]["name"])] = pod
        elif state is TrialState.RUNNING:
            ended = (
                recorded.batch_preempted_job() if finish.get(name) == "preempted" else recorded.batch_completed_job()
            )
            job["status"] = ended["status"]
            for i in range(2):
                pod = cluster.objects.get(("v1", "Pod", ns, f"{name}-{i}abcd"))
                if finish.get(name) == "preempted":
                    cluster.objects.pop(("v1", "Pod", ns, f"{name}-{i}abcd"), None)
                elif pod:
                    pod["status"]["phase"] = "Succeeded"
                    pod["status"]["containerStatuses"] = [
                        {
                            "name": "worker",
                            "state": {"terminated": {"exitCode": 0, "message": json.dumps({"loss": len(name) / 100})}},
                        }
                    ]


def test_status_lists_batch_trials_with_their_results_and_gpu_time(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(batch_study(tmp_path), cluster, clock)
    submitter.ensure_record()
    submitter.source = open(batch_study(tmp_path)).read()
    cluster.record("loop")["data"]["study.yaml"] = submitter.source
    for trial in trials[:3]:
        submitter.submit_trial(trial)
    run_jobs(cluster)
    now = timestamp("2025-05-01T10:11:00Z")
    snap = collect(cluster, "stratctl-e2e", "loop", now=now)
    assert sorted((t.trial, t.state) for t in snap.trials) == sorted((t.name, "running") for t in trials[:3])
    [study] = snap.studies
    assert study.states["running"] == 3 and study.gpu_hours == pytest.approx(3 * 2 * 600 / 3600)
    run_jobs(cluster)  # they complete at 11:01 with their results
    snap = collect(cluster, "stratctl-e2e", "loop", now=now + 86400)
    assert {t.trial: t.result for t in snap.trials} == {t.name: {"loss": len(t.name) / 100} for t in trials[:3]}
    assert snap.studies[0].states["succeeded"] == 3
    assert snap.studies[0].gpu_hours == pytest.approx(3 * 2 * 3600 / 3600)  # 10:01 -> 11:01 on 2 GPUs each
    # the table's fast path (a loop's summary, then the first trials by name) reads batch/v1 Jobs and their pods too
    first, _ = _first_trials(cluster, "stratctl-e2e", cluster.record("loop"), now + 86400, 2)
    assert [(t.trial, t.state, t.result, t.gpu_seconds) for t in first] == [
        (t.trial, t.state, t.result, t.gpu_seconds) for t in snap.trials
    ][:2]


def test_the_loop_stores_a_summary_with_running_batch_trials_and_their_gpu_time(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(batch_study(tmp_path), cluster, clock)
    submitter.ensure_record()
    submitter.wall = lambda: timestamp("2025-05-01T10:11:00Z")
    for trial in trials[:3]:
        submitter.submit_trial(trial)
    run_jobs(cluster)
    pods = [o for (av, k, _, _), o in cluster.objects.items() if (av, k) == POD]

    class Signals:  # what the loop's pod mirror shows
        def pod_starts(self):
            return run_starts(pods)

    # from what the pod mirror shows, or without one (--detach, a static cap that does not
    # yield) from one list of the study's pods
    for signals in (Signals(), None):
        submitter.signals = signals
        submitter.observe()
        submitter.keeper.refresh(0)
        submitter.save_summary(force=True)
        summary = json.loads(cluster.record("loop")["data"]["summary"])
        assert summary["states"]["running"] == 3 and summary["in_flight"] == 3
        assert summary["gpu_hours"] == pytest.approx(3 * 2 * 600 / 3600)


def test_a_preempted_batch_trial_resumes_as_its_next_attempt_counted_as_a_preemption(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(batch_study(tmp_path), cluster, clock)
    victim = trials[0].name
    steps = {"n": 0}

    def step():
        steps["n"] += 1
        run_jobs(cluster, finish={victim: "preempted"} if steps["n"] == 2 else {})

    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert (progress.succeeded, progress.failed) == (10, 0)
    jobs = {o["metadata"]["name"]: o for (av, k, _, _), o in cluster.objects.items() if (av, k) == BATCH_JOB}
    resumed = jobs[f"{victim}-a1"]
    env = {e["name"]: e.get("value") for e in resumed["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STRATCTL_RESUME"] == "1" and env["STRATCTL_ATTEMPT"] == "1"
    notes = resumed["metadata"]["annotations"]
    assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES]) == ("1", "0")
    assert ("scheduling.volcano.sh/v1beta1", "PodGroup", "stratctl-e2e", f"{victim}-a1") in cluster.objects


def test_drain_accounts_a_batch_trials_gpu_time_from_its_pods(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(batch_study(tmp_path), cluster, clock)
    submitter.source = open(batch_study(tmp_path)).read()
    submitter.record = submitter.record.__class__(**{**submitter.record.__dict__, "source": submitter.source})
    submitter.ensure_record()
    for trial in trials[:2]:
        submitter.submit_trial(trial)
    run_jobs(cluster)  # running since 10:01
    [outcome] = drain(cluster, "stratctl-e2e", "loop", settle=0, clock=lambda: timestamp("2025-05-01T10:11:00Z"))
    assert sorted(outcome.suspended) == sorted(t.name for t in trials[:2])
    marks = suspended_of(cluster.record("loop"))
    assert {m["gpu_seconds"] for m in marks.values()} == {600 * 2}
    assert not [k for k in cluster.objects if k[:2] in (BATCH_JOB, PODGROUP)]  # jobs and PodGroups gone


def stuck_attempt(tmp_path, extra: str = ""):
    """A running batch trial whose preempted pod was deleted at 10:31:00 and never
    terminates; the Requeue step of its loop, its wall clock at 10:31:10."""
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(batch_study(tmp_path, extra), cluster, clock)
    submitter.ensure_record()
    submitter.submit_trial(trials[0])
    run_jobs(cluster)
    job = cluster.get(BATCH_JOB, trials[0].name)
    evidence = Disruptions(clock=clock)
    stuck = recorded.disrupted(recorded.batch_pod(job), when="2025-05-01T10:31:00Z", deleted="2025-05-01T10:31:00Z")
    evidence.observe(stuck)

    class Signals:
        disruptions = evidence

        def pod_starts(self):
            return run_starts([stuck])

        def pods_complete_since(self):
            return None

    wall = FakeClock(timestamp("2025-05-01T10:31:10Z"))
    requeue = Requeue(
        cluster,
        submitter.renderer,
        submitter.study,
        submitter.trials,
        BATCH_JOB,
        submitter.reporter,
        clock=wall,
        signals=Signals(),
    )
    return cluster, requeue, wall, trials[0].name, job


def test_a_batch_attempt_whose_preempted_pod_never_terminates_is_ended_and_resumed(tmp_path):
    """A pod failure policy acts on a failed pod; a pod no kubelet finishes (a lost node)
    stays Terminating, and the Job with it. 15 s past its deletion time the loop resumes
    the trial as its next attempt and deletes the stuck one, freeing its GPUs."""
    cluster, requeue, wall, name, job = stuck_attempt(tmp_path)
    assert requeue.step({name: TrialState.RUNNING}, {name: job}, drained=False) == {name: TrialState.RUNNING}
    wall.sleep(10)  # 20 s past its deletion time
    assert requeue.step({name: TrialState.RUNNING}, {name: job}, drained=False) == {name: TrialState.PENDING}
    names = sorted(k[3] for k in cluster.objects if k[:2] == BATCH_JOB)
    assert names == [f"{name}-a1"]  # the stuck attempt deleted once its next one exists
    assert (*PODGROUP, "stratctl-e2e", name) not in cluster.objects
    notes = cluster.get(BATCH_JOB, f"{name}-a1")["metadata"]["annotations"]
    assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES]) == ("1", "0")
    assert float(notes[labels.GPU_SECONDS_LOST]) == (30 * 60 + 20) * 2  # 10:01 -> 10:31:20 on 2 GPUs


@pytest.mark.parametrize("held", ["room", "drained"])
def test_a_stuck_attempt_of_a_held_study_is_marked_and_ended_without_waiting_for_room(tmp_path, held):
    """The study holds its next attempts (yielding to a higher-priority gang: no room; or
    drained), and the stuck pods hold GPUs, maybe the very ones that gang waits for. The
    loop marks the trial preempted in the study record, deletes the stuck Job and
    PodGroup, and makes the next attempt from the mark once there is room."""
    cluster, requeue, wall, name, job = stuck_attempt(tmp_path)
    wall.sleep(10)  # 20 s past its deletion time
    room, drained = (0, "false") if held == "room" else (None, "true")
    cluster.patch(CONFIGMAP, record_name("loop"), {"data": {"drained": drained}}, "stratctl-e2e")
    states = requeue.step({name: TrialState.RUNNING}, {name: job}, drained=False, room=room)
    assert states == {name: TrialState.PREEMPTED}
    assert not [k for k in cluster.objects if k[:2] in (BATCH_JOB, PODGROUP)]  # its GPUs freed, no next attempt
    [mark] = suspended_of(cluster.record("loop")).values()
    assert (mark["attempt"], mark["state"], mark["preemptions"], mark["failures"]) == (0, "preempted", 1, 0)
    assert mark["gpu_seconds_lost"] == (30 * 60 + 20) * 2 and mark["params"] and "by" not in mark
    if held == "drained":  # `status` of the drained study: the trial shows preempted, from its mark
        _, rows = build(wall(), [cluster.record("loop")], {})
        [row] = [r for r in rows if r.trial == name]
        assert (row.state, row.attempt, row.preemptions) == ("preempted", 0, 1)
        cluster.patch(CONFIGMAP, record_name("loop"), {"data": {"drained": "false"}}, "stratctl-e2e")
    # a later cycle with room: the next attempt, from the mark (the old job is gone)
    wall.sleep(5)
    assert requeue.step({name: TrialState.PREEMPTED}, {}, drained=False) == {name: TrialState.PENDING}
    notes = cluster.get(BATCH_JOB, f"{name}-a1")["metadata"]["annotations"]
    assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES]) == ("1", "0")
    assert float(notes[labels.GPU_SECONDS_LOST]) == (30 * 60 + 20) * 2
    assert [k[3] for k in cluster.objects if k[:2] == BATCH_JOB] == [f"{name}-a1"]


def test_a_stuck_job_left_by_a_loop_stopped_after_marking_its_trial_is_deleted_by_the_next(tmp_path):
    cluster, requeue, wall, name, job = stuck_attempt(tmp_path)
    wall.sleep(10)
    requeue.step({name: TrialState.RUNNING}, {name: job}, drained=False, room=0)
    mark = suspended_of(cluster.record("loop"))
    cluster.create(job)  # as if the loop had stopped between the mark and the delete
    events: list[str] = []
    reporter = type("R", (), {"event": lambda self, m: events.append(m)})()
    fresh = Requeue(cluster, requeue.renderer, requeue.study, requeue.trials, BATCH_JOB, reporter, clock=wall)
    assert fresh.step({name: TrialState.RUNNING}, {name: job}, drained=False, room=0) == {name: TrialState.PREEMPTED}
    assert suspended_of(cluster.record("loop")) == mark
    fresh.step({name: TrialState.RUNNING}, {name: job}, drained=False, room=0)
    assert not [k for k in cluster.objects if k[:2] == BATCH_JOB]  # ended on the next cycle, no next attempt yet
    said = len(events)
    fresh.step({name: TrialState.RUNNING}, {name: job}, drained=False, room=0)  # a listing that lags shows it still
    assert len(events) == said == 1, events  # deleted and said once


def test_a_stuck_trial_given_up_keeps_its_job_and_gets_no_mark(tmp_path):
    """Past retries.max_preemptions the trial is given up on its job: a mark and a delete
    would lose that (the trial would look never submitted), so its job stays."""
    cluster, requeue, wall, name, job = stuck_attempt(tmp_path, "retries: {max_preemptions: 0}\n")
    wall.sleep(10)
    for _ in range(2):
        states = requeue.step({name: TrialState.RUNNING}, {name: job}, drained=False, room=0)
        assert states == {name: TrialState.FAILED}
        job = cluster.get(BATCH_JOB, name)
        assert job["metadata"]["annotations"][labels.GIVEN_UP] and not suspended_of(cluster.record("loop"))


def test_a_batch_study_must_not_restart_pods_on_failure(tmp_path):
    path = batch_study(tmp_path).replace(".yaml", "-onfailure.yaml")
    text = BATCH_STUDY.replace("  image: busybox\n", "  image: busybox\n  restart_policy: OnFailure\n")
    open(path, "w").write(text)
    with pytest.raises(StudyError) as e:
        load_study(path)
    line = text.splitlines().index("  restart_policy: OnFailure") + 1
    [problem] = e.value.problems
    assert str(problem).startswith(
        f"{path}:{line}:19: trial.restart_policy: workload 'batch' needs restart_policy Never"
    )
    # a study rendering its own template decides for itself
    open(path, "w").write(text + "templates_dir: mine\n")
    assert load_study(path).trial.restart_policy == "OnFailure"


def test_a_batch_trials_pods_are_its_replicas_and_its_gang_the_minimum(tmp_path):
    from stratctl.core.space import expand
    from tests.unit.rendering import Renderer

    path = tmp_path / "elastic.yaml"
    path.write_text(
        BATCH_STUDY.replace(
            "tasks: [{name: worker, replicas: 2}]", "tasks: [{name: worker, replicas: 8, min_available: 4}]"
        )
    )
    study = load_study(path)
    group, job, _service = Renderer(study).render(expand(study)[0])
    assert group["spec"]["minMember"] == 4
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (8, 8)
    assert job["spec"]["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_carried_totals_ride_on_a_resumed_batch_attempt():
    resumed = recorded.batch_running_job(
        attempt=1, annotations=Carried(preemptions=1, gpu_seconds_lost=100, gpu_seconds=100).annotations()
    )
    [study], [trial] = rows([resumed], starts={resumed["metadata"]["uid"]: timestamp("2025-05-01T10:10:00Z")})
    assert (trial.attempt, trial.preemptions, trial.gpu_seconds) == (1, 1, 100 + 60 * 2)
