"""Preemption evidence from the pods the loop already watches: a job ended by an eviction
counts as preempted though its Evict event expired, and without listing events."""

from __future__ import annotations

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import EVENT, VOLCANO_JOB
from stratctl.backends.kubernetes.attempts.requeue import Requeue
from stratctl.backends.kubernetes.objects.state import TrialState, classify_attempt, timestamp
from stratctl.backends.kubernetes.watch.disruptions import Disruptions
from tests.unit import recorded
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make


def volcano_pod(job: dict, name: str = "w-0") -> dict:
    """A pod of a Volcano Job, owned by it."""
    meta = job["metadata"]
    return {
        "metadata": {
            "namespace": "stratctl-e2e",
            "name": f"{meta['name']}-{name}",
            "labels": {"volcano.sh/job-name": meta["name"]},
            "ownerReferences": [{"kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}],
        },
        "status": {"phase": "Running", "startTime": "2025-05-01T10:01:00Z"},
    }


def test_a_disrupted_pod_is_remembered_by_job_after_its_deletion_for_a_while():
    clock = FakeClock(0.0)
    seen = Disruptions(keep=600, clock=clock)
    job = recorded.aborted_job()
    uid = job["metadata"]["uid"]
    healthy = volcano_pod(job, "w-1")
    assert seen.observe(healthy) is healthy and seen.of(uid) == []
    evicted = recorded.disrupted(volcano_pod(job))
    seen.observe(evicted)
    assert seen.of(uid) == [evicted]
    clock.sleep(5)
    seen.deleted(evicted)  # the DELETED event carries its last state
    seen.deleted(healthy)  # never disrupted: not kept
    assert seen.of(uid) == [evicted] and seen.deleted_pods() == [evicted]
    clock.sleep(601)
    assert seen.of(uid) == [] and seen.deleted_pods() == []  # forgotten: memory stays bounded


def test_a_pod_deleted_with_its_condition_is_remembered_though_no_update_showed_it():
    seen = Disruptions(clock=FakeClock(0.0))
    job = recorded.aborted_job()
    evicted = recorded.disrupted(volcano_pod(job))
    seen.deleted(evicted)
    assert seen.of(job["metadata"]["uid"]) == [evicted]


def test_stuck_pods_are_the_disrupted_ones_still_there_past_their_deletion_time():
    seen = Disruptions(clock=FakeClock(0.0))
    job = recorded.batch_running_job()
    uid = job["metadata"]["uid"]
    stuck = recorded.disrupted(recorded.batch_pod(job), deleted="2025-05-01T10:31:00Z")
    seen.observe(stuck)
    assert seen.stuck(uid, timestamp("2025-05-01T10:31:10Z"), after=15) == []
    assert seen.stuck(uid, timestamp("2025-05-01T10:31:16Z"), after=15) == [stuck]
    failed = recorded.disrupted(recorded.batch_pod(job, 1, phase="Failed"), deleted="2025-05-01T10:31:00Z")
    seen.observe(failed)  # a kubelet finished this one: the job controller takes it from here
    assert seen.stuck(uid, timestamp("2025-05-01T10:32:00Z"), after=15) == [stuck]
    seen.deleted(stuck)
    assert seen.stuck(uid, timestamp("2025-05-01T10:32:00Z"), after=15) == []


def test_classified_from_pods_an_eviction_survived_before_the_last_start_does_not_excuse_a_failure():
    job = recorded.aborted_job()
    job["status"]["conditions"][1]["lastTransitionTime"] = "2025-05-01T10:10:00Z"  # running again at 10:10
    before = recorded.disrupted(volcano_pod(job), when="2025-05-01T10:05:00Z")
    after = recorded.disrupted(volcano_pod(job), when="2025-05-01T10:15:00Z")
    assert classify_attempt(job, pods=[before]) is TrialState.FAILED
    assert classify_attempt(job, pods=[after]) is TrialState.PREEMPTED


class Signals:
    """The loop's pod signals: what its pod mirror saw, and since when it saw everything."""

    def __init__(self, disruptions: Disruptions, since: float | None):
        self.disruptions, self.since = disruptions, since

    def pod_starts(self):
        return {}

    def pods_complete_since(self):
        return self.since


def requeue_for(study_file, cluster, signals):
    submitter, trials = make(study_file(), cluster, FakeClock())
    submitter.ensure_record()
    requeue = Requeue(
        cluster,
        submitter.renderer,
        submitter.study,
        submitter.trials,
        VOLCANO_JOB,
        submitter.reporter,
        clock=FakeClock(timestamp("2025-05-01T10:30:00Z")),
        signals=signals,
    )
    return requeue, trials


def aborted(cluster, name: str) -> dict:
    """An attempt of trial `name` aborted at 10:20 (a policy aborting on PodEvicted, or a failure)."""
    job = recorded.aborted_job()
    job["metadata"].update(name=name, uid=f"uid-{name}")
    job["metadata"]["labels"][labels.TRIAL] = name
    cluster.objects[(*VOLCANO_JOB, cluster.namespace, name)] = job
    return job


def events_listed(cluster) -> int:
    return sum(1 for kind, _ in cluster.listed if kind == EVENT)


def test_an_aborted_job_whose_pod_was_preempted_is_preempted_without_events(study_file):
    """Its Evict event expired (or the user may not list events): the pod mirror's memory of
    the deleted pod says it was preempted, and no event is asked for."""
    cluster, seen = FakeCluster(), Disruptions(clock=FakeClock(0.0))
    requeue, trials = requeue_for(study_file, cluster, Signals(seen, since=None))
    name = trials[0].name
    job = aborted(cluster, name)
    seen.deleted(recorded.disrupted(volcano_pod(job), when="2025-05-01T10:19:59Z"))
    assert requeue.step({name: TrialState.FAILED}, {name: job}, drained=False) == {name: TrialState.PENDING}
    notes = cluster.get(VOLCANO_JOB, f"{name}-a1")["metadata"]["annotations"]
    assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES]) == ("1", "0")
    assert events_listed(cluster) == 0


def test_a_failed_job_the_pod_mirror_saw_whole_is_failed_without_events(study_file):
    cluster = FakeCluster()
    listed_at = timestamp("2025-05-01T09:00:00Z")  # before the job was created (10:00)
    requeue, trials = requeue_for(study_file, cluster, Signals(Disruptions(), since=listed_at))
    name = trials[0].name
    job = aborted(cluster, name)
    assert requeue.step({name: TrialState.FAILED}, {name: job}, drained=False) == {name: TrialState.PENDING}
    notes = cluster.get(VOLCANO_JOB, f"{name}-a1")["metadata"]["annotations"]
    assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES]) == ("0", "1")
    assert events_listed(cluster) == 0
    # decided once: the next cycles ask nothing either
    requeue.step({name: TrialState.FAILED}, {name: job}, drained=False)
    assert events_listed(cluster) == 0


def test_without_the_pods_story_the_evict_events_decide_once_per_job(study_file):
    """No pod mirror (--detach), or one that started after the job: ask the events, once."""
    for signals in (None, Signals(Disruptions(), since=timestamp("2025-05-01T10:00:30Z"))):
        cluster = FakeCluster()
        requeue, trials = requeue_for(study_file, cluster, signals)
        name = trials[0].name
        job = aborted(cluster, name)
        event = recorded.evict_event(job, when="2025-05-01T10:19:00Z")
        event["metadata"]["name"] = "ev-1"
        cluster.objects[(*EVENT, cluster.namespace, "ev-1")] = event
        for _ in range(3):
            requeue.step({name: TrialState.FAILED}, {name: job}, drained=False)
        assert cluster.get(VOLCANO_JOB, f"{name}-a1")["metadata"]["annotations"][labels.PREEMPTIONS] == "1"
        assert [selector for kind, selector in cluster.listed if kind == EVENT] == [
            f"involvedObject.name={name}-uid-{name},reason=Evict"
        ]


def test_the_submit_loop_hands_its_pod_signals_to_recovery(study_file):
    """End to end in the loop: a trial aborted on an eviction whose event is gone resumes as
    preempted, from what the loop's pod mirror saw."""
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    victim = trials[0].name
    seen = Disruptions(clock=clock)
    done = set()

    def step():
        for job in cluster.jobs():
            if job["metadata"]["name"] == victim and cluster.phase(job) == "Running" and victim not in done:
                done.add(victim)
                job["metadata"]["uid"] = "uid-victim"
                job["status"] = recorded.aborted_job()["status"]
                seen.deleted(recorded.disrupted(volcano_pod(job), when="2025-05-01T10:19:59Z"))
        cluster.advance()

    class LoopSignals(Signals):
        def capacity(self, now=None):
            from stratctl.backends.kubernetes.watch.capacity import Capacity

            return Capacity(64, 32, 0.0, 8)

        def latency_p90(self):
            return None

    submitter.signals = LoopSignals(seen, since=None)
    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert (progress.succeeded, progress.failed) == (10, 0)
    resumed = cluster.get(VOLCANO_JOB, f"{victim}-a1")["metadata"]["annotations"]
    assert (resumed[labels.PREEMPTIONS], resumed[labels.FAILURES]) == ("1", "0")
    assert events_listed(cluster) == 0


def test_a_job_that_just_failed_waits_for_the_last_pod_updates_before_it_counts_as_failed(study_file):
    """The job and its pods come by different watches: a failure seconds old may still be
    explained by a pod update on its way, so its retry waits SETTLE seconds (not finished)."""
    cluster = FakeCluster()
    requeue, trials = requeue_for(study_file, cluster, Signals(Disruptions(), since=timestamp("2025-05-01T09:00:00Z")))
    name = trials[0].name
    job = aborted(cluster, name)
    job["status"]["state"]["lastTransitionTime"] = "2025-05-01T10:29:59Z"  # the clock says 10:30:00
    assert requeue.step({name: TrialState.FAILED}, {name: job}, drained=False) == {name: TrialState.RETRYING}
    assert [k[3] for k in cluster.objects if k[:2] == VOLCANO_JOB] == [name]  # no retry yet
    requeue.clock.sleep(3)
    assert requeue.step({name: TrialState.FAILED}, {name: job}, drained=False) == {name: TrialState.PENDING}
    assert cluster.get(VOLCANO_JOB, f"{name}-a1")["metadata"]["annotations"][labels.FAILURES] == "1"
    assert events_listed(cluster) == 0
