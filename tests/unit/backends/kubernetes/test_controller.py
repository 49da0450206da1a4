"""The submit loop against an in-memory cluster, in virtual time."""

from __future__ import annotations

import copy
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB
from stratctl.backends.kubernetes.loop.controller import Submitter
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import Invalid
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import Decision, StaticPolicy
from stratctl.run.throttle import Throttle
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import STUDY, make
from tests.unit.rendering import Renderer


def test_keeps_the_cap_in_flight_until_every_trial_finishes(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    progress = submitter.run()
    assert len(trials) == 10
    assert progress.succeeded == 10 and progress.failed == 0 and progress.created == 10
    assert sorted(cluster.creates) == sorted(t.name for t in trials)  # each created exactly once
    assert cluster.max_in_flight_seen == 3
    record = cluster.record("loop")
    assert record["data"]["trials"] == "10" and record["data"]["target"] == "3"


class Killed(BaseException):
    """The launcher dying mid-run (SIGKILL): nothing after it runs."""


def test_a_rerun_recognises_what_exists_and_creates_only_the_rest(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    first, trials = make(study_file(), cluster, clock, max_inflight=4)

    def die(seconds):
        raise Killed()

    first.sleep = die
    with pytest.raises(Killed):
        first.run()
    assert len(cluster.creates) == 3  # the study's parallelism.initial
    # the rerun must not create those three again
    second, _ = make(study_file(), cluster, clock)
    progress = second.run()
    assert sorted(cluster.creates) == sorted(t.name for t in trials)
    assert progress.created == 7 and progress.existing == 0 and progress.succeeded == 10


def test_detach_returns_once_every_trial_is_submitted(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock, detach=True, max_inflight=4)
    progress = submitter.run()
    assert progress.detached and progress.waiting == 0 and progress.created == 10
    assert progress.succeeded < 10  # it did not wait for them to finish


class Watching(FakeCluster):
    """The in-memory cluster with a watch: each brings every job as it is now, then ends."""

    def watch(self, kind, resource_version, **_):
        time.sleep(0.01)
        for job in self.jobs():
            yield "MODIFIED", copy.deepcopy(job)


def detached(study_file, max_inflight: int):
    from stratctl.backends.kubernetes.loop.controller import study_selector
    from stratctl.backends.kubernetes.watch.mirror import Mirror, trimmed_job

    cluster, clock = Watching(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock, detach=True, max_inflight=max_inflight)
    submitter.jobs = Mirror(
        cluster,
        VOLCANO_JOB,
        all_namespaces=False,
        namespace=submitter.namespace,
        label_selector=study_selector(submitter.study),
        transform=trimmed_job,
    ).start(follow=False)
    return submitter, cluster


def test_a_detach_submitted_in_one_cycle_keeps_no_job_and_never_watches(study_file):
    """--detach of a study admitted whole: one list, the creates, a summary from the
    trials' names alone (what 100,000 trials need of memory), no watch."""
    submitter, cluster = detached(study_file, max_inflight=10)
    submitter.policy = StaticPolicy(10)
    progress = submitter.run()
    assert progress.detached and progress.created == 10 and progress.pending == 10
    assert submitter.jobs.items() == [] and not submitter.jobs.following and submitter.jobs.relists == 1
    assert len(submitter._unseen) == 10


def test_a_detach_that_needs_a_second_cycle_watches_from_a_fresh_list_and_creates_nothing_twice(study_file):
    submitter, cluster = detached(study_file, max_inflight=4)
    cycles = []
    observe = submitter.observe

    def observed():
        states = observe()
        cycles.append(
            (
                submitter.jobs.following,
                sorted(j["metadata"]["name"] for j in submitter.jobs.items()),
                sorted(submitter._unseen),
                sorted(cluster.creates),
            )
        )
        return states

    submitter.observe = observed
    try:
        progress = submitter.run()
    finally:
        submitter.jobs.stop()
    assert progress.detached and progress.created == 10
    assert sorted(cluster.creates) == sorted(submitter.order)  # each trial created once
    following, held, unseen, created = cycles[0]
    assert (following, held, unseen, created) == (False, [], [], [])  # the first list: nothing yet
    following, held, unseen, created = cycles[1]
    # the second: the mirror lists again and watches; the trials created before are in it
    assert following and created and held == created and unseen == [] and submitter.jobs.relists == 2


def test_409_with_the_same_spec_hash_is_success(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    # another launcher created the trial between our list and our create
    manifest = submitter.renderer.render(trials[0])[0]
    cluster.create(manifest)
    assert submitter.submit_trial(trials[0]) == "existing"


def test_409_with_another_spec_hash_is_reported_and_the_rest_go_on(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    # an object of the trial's name that this study did not render (another study, edited by hand)
    manifest = submitter.renderer.render(trials[0])[0]
    manifest["metadata"]["labels"].update({labels.SPEC_HASH: "someoneelse", labels.STUDY: "other"})
    cluster.create(manifest)
    progress = submitter.run()
    assert list(progress.errors) == [trials[0].name]
    assert "spec hash someoneelse" in progress.errors[trials[0].name]
    assert progress.succeeded == 9 and progress.done
    assert progress.conflicts == [trials[0].name]  # what makes `submit` exit 4


def test_a_permanent_error_is_reported_per_trial_with_the_server_message(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    cluster.fail[trials[3].name] = Invalid("create Job x: spec.queue: queue 'nope' not found", status=422)
    progress = submitter.run()
    assert progress.errors == {trials[3].name: "create Job x: spec.queue: queue 'nope' not found"}
    assert progress.succeeded == 9 and progress.done


def test_a_drained_study_holds_new_submissions(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.ensure_record()
    cluster.record("loop")["data"]["drained"] = "true"
    decisions = []
    original = submitter.policy.decide

    def spy(observed, now):
        decision = original(observed, now)
        decisions.append(decision)
        if len(decisions) == 3:
            cluster.record("loop")["data"]["drained"] = "false"
        return decision

    submitter.policy.decide = spy
    progress = submitter.run()
    assert [d.hold for d in decisions[:3]] == [True, True, True]
    assert decisions[0].reason == "study drained"
    assert progress.succeeded == 10


def test_cleanup_delete_removes_finished_jobs_and_remembers_outcomes(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file("cleanup: delete\n"), cluster, clock)
    progress = submitter.run()
    assert progress.succeeded == 10
    assert cluster.jobs() == []
    rerun, _ = make(study_file("cleanup: delete\n"), cluster, clock)
    again = rerun.run()
    assert again.created == 0 and again.succeeded == 10
    assert len(cluster.creates) == 10


def test_failed_trials_are_retried_max_failures_times_then_count_as_finished(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    study = load_study(study_file("retries: {max_failures: 2}\n"))
    trials = expand(study)
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep)

    def sleep(seconds):
        clock.sleep(seconds)
        cluster.advance(finish="Failed")

    submitter = Submitter(
        study,
        trials,
        Renderer(study),
        cluster,
        throttle,
        SubmitOptions(poll_interval=1, workers=1),
        clock=clock,
        sleep=sleep,
    )
    progress = submitter.run()
    assert (progress.failed, progress.succeeded, progress.created) == (10, 0, 10)
    assert len(cluster.creates) == 30  # every trial: attempts 0, 1 and 2
    assert sorted(cluster.creates) == sorted(f"{t.name}{s}" for t in trials for s in ("", "-a1", "-a2"))


def test_policy_decides_how_many_to_admit():
    from stratctl.run.policy import Observed

    assert Decision(5, False, "").admit(Observed(in_flight=3, pending=0, waiting=10)) == 2
    assert Decision(5, False, "").admit(Observed(in_flight=3, pending=0, waiting=1)) == 1
    assert Decision(5, False, "").admit(Observed(in_flight=7, pending=0, waiting=10)) == 0
    assert Decision(5, True, "").admit(Observed(in_flight=0, pending=0, waiting=10)) == 0


def test_a_slow_etcd_reported_by_prometheus_holds_new_submissions(study_file):
    from stratctl.backends.kubernetes.watch.prometheus import ControlPlane

    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    readings = [ControlPlane(0.9, 0.5), ControlPlane(0.9, 0.5)]

    created_when_asked = []

    class Slow:  # the background reader's latest reading, cycle by cycle
        def latest(self):
            created_when_asked.append(len(cluster.creates))
            return readings.pop(0) if readings else ControlPlane(0.01, 0.1)

    submitter.prometheus = Slow()
    events = []
    submitter.reporter = type("R", (), {"update": lambda self, p: None, "event": lambda self, m: events.append(m)})()
    progress = submitter.run()
    decisions = [e for e in events if e.startswith("target in flight")]
    assert "etcd p99 900ms above 250ms" in decisions[0] and "(holding)" in decisions[0]
    assert created_when_asked[:3] == [0, 0, 0]  # nothing was created while etcd was slow
    assert progress.succeeded == 10  # once etcd recovered, every trial ran
    assert progress.etcd_p99 == pytest.approx(0.01)


class LaggingMirror:
    """The study's jobs as a watch delivers them: one cycle late, plus what the loop added."""

    following = True

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        self.seen: list[dict] = []
        self.added: dict[str, dict] = {}

    def items(self) -> list[dict]:
        now_seen = {j["metadata"]["name"]: j for j in self.seen}
        out = list({**self.added, **now_seen}.values())
        self.seen = [dict(j) for j in self.cluster.jobs()]  # what the next call will show
        self.added = {k: v for k, v in self.added.items() if k not in now_seen}
        return out

    def add(self, obj: dict) -> None:
        self.added.setdefault(obj["metadata"]["name"], obj)

    def snapshot(self) -> tuple[list[dict], int]:
        return self.items(), 0


def test_jobs_from_a_lagging_watch_are_never_created_twice_nor_over_admitted(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.jobs = LaggingMirror(cluster)
    calls = {"create": 0, "list": 0}
    create, listing = cluster.create, cluster.list

    def counted_create(manifest, dry_run=False):
        calls["create"] += manifest["kind"] == "Job"
        return create(manifest, dry_run)

    def counted_list(kind, *args, **kwargs):
        calls["list"] += kind[1] == "Job"
        return listing(kind, *args, **kwargs)

    cluster.create, cluster.list = counted_create, counted_list
    progress = submitter.run()
    assert progress.succeeded == 10 and progress.created == 10
    assert sorted(cluster.creates) == sorted(t.name for t in trials)
    assert calls == {"create": 10, "list": 0}  # no 409 round trips; every cycle read the watch's copy
    assert cluster.max_in_flight_seen == 3


def test_a_job_change_wakes_the_loop_early_but_never_sooner_than_min_cycle(study_file):
    from stratctl.backends.kubernetes.loop.controller import MIN_CYCLE

    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock)
    slept, waited = [], []
    submitter.sleep = slept.append

    class Watched(LaggingMirror):
        def wait(self, timeout):
            waited.append(timeout)
            return True

    submitter.jobs = Watched(cluster)
    submitter.pause()
    assert slept == [MIN_CYCLE] and waited == [pytest.approx(1.0 - MIN_CYCLE)]
    submitter.jobs = None  # no watch: the plain poll interval
    submitter.pause()
    assert slept == [MIN_CYCLE, 1.0]


class WatchedJobs:
    """The study's jobs as an up-to-date watch has them, with the deletions it saw, and a
    `wait` that returns at once: every cycle is an early wake-up (the clock hardly moves)."""

    following = True

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        self.deletions = 0
        self._names: set[str] = set()

    def snapshot(self) -> tuple[list[dict], int]:
        jobs = [dict(j) for j in self.cluster.jobs()]
        names = {j["metadata"]["name"] for j in jobs}
        self.deletions += len(self._names - names)
        self._names = names
        return jobs, self.deletions

    def add(self, obj: dict) -> None:
        pass

    def wait(self, timeout: float) -> bool:
        return True


def test_a_drain_seen_as_deleted_jobs_is_read_from_the_record_before_the_loop_acts(study_file):
    from stratctl.backends.kubernetes.verbs.drain import drain

    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock, poll_interval=30.0)
    submitter.jobs = WatchedJobs(cluster)
    start = clock()
    cycles = {"n": 0}
    created_at_drain = {}

    def sleep(seconds):
        clock.sleep(seconds)
        cycles["n"] += 1
        if cycles["n"] == 3:  # another terminal drains the study between two cycles
            drain(cluster, cluster.namespace, "loop", settle=0)
            created_at_drain["n"] = len(cluster.creates)
        if cycles["n"] > 8:
            raise KeyboardInterrupt

    submitter.sleep = sleep
    progress = submitter.run()
    assert progress.interrupted and clock() - start < 30.0  # every read of the record came from a deletion
    assert created_at_drain["n"] == 3 and len(cluster.creates) == 3  # nothing admitted into the drain
    assert cluster.jobs() == [] and progress.target == 3


def test_while_yielding_only_trials_expected_to_end_before_the_shadow_time_are_created(tmp_path):
    from stratctl.backends.kubernetes.objects.precedence import Precedence
    from stratctl.backends.kubernetes.watch.capacity import Capacity

    cluster, clock = FakeCluster(), FakeClock()
    # layers 2: 10 s, layers 4: 20 s (listed order, so both kinds wait side by side); the
    # gang it yields to can start in 16 s: backfill window 13 s
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.replace("throttle: {", "throttle: {order: listed, ")
        + 'cost: {expected_duration: "{{ params.layers * 5 }}s"}\n'
    )
    submitter, trials = make(path, cluster, clock)
    layers = {t.name: t.params["layers"] for t in trials}
    ahead = Precedence("stratctl-e2e/prod-0", 12, "prod", 1000)
    created_while_yielding = []

    class Signals:
        calls = 0

        def capacity(self, now=None):
            self.calls += 1
            if self.calls <= 3:
                created_while_yielding[:] = list(cluster.creates)
                return Capacity(0, 0, 0.0, 2, ahead, 16.0, 4)  # its pods wait for all 8 free GPUs
            return Capacity(16, 8, 0.0, 2)

        def latency_p90(self):
            return None

        def pod_starts(self):
            return {}

    submitter.signals = Signals()
    events = []
    submitter.reporter = type("R", (), {"update": lambda self, p: None, "event": lambda self, m: events.append(m)})()
    progress = submitter.run()
    assert created_while_yielding and all(layers[n.rsplit("-a", 1)[0]] == 2 for n in created_while_yielding)
    assert any("backfilling trials expected to end before" in e for e in events)
    assert progress.succeeded == 10  # once the gang was placed, the 20 s trials ran too
    # every trial's pods carry their expected seconds, for other launchers' shadow times
    pod_meta = Renderer(submitter.study).render(trials[1])[0]["spec"]["tasks"][0]["template"]["metadata"]
    assert pod_meta["annotations"]["stratctl.io/expected-seconds"] == str(trials[1].params["layers"] * 5)


def test_next_attempts_wait_while_the_decision_holds_as_new_trials_do(study_file):
    """A failed trial's next attempt is created like a new trial: not while the policy
    holds (yielding to a higher-priority gang, whose GPUs it would queue for), and as
    soon as it lets trials in again."""
    cluster, clock = FakeCluster(), FakeClock()
    study = load_study(study_file("retries: {max_failures: 2}\n"))
    trials = expand(study)[:2]
    holding = {"from": 2, "until": 8}  # the cycles whose decision holds
    cycles, created = [0], {}

    class Policy:
        def decide(self, observed, now):
            cycles[0] += 1
            created[cycles[0]] = list(cluster.creates)
            hold = holding["from"] <= cycles[0] < holding["until"]
            return Decision(4, hold, "yielding to higher-priority gang prod" if hold else "cap 4")

    finish = iter(["Failed"] * 4)

    def sleep(seconds):
        clock.sleep(seconds)
        cluster.advance(finish=next(finish, "Completed"))

    submitter = Submitter(
        study,
        trials,
        Renderer(study),
        cluster,
        Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep),
        SubmitOptions(poll_interval=1, workers=1),
        clock=clock,
        sleep=sleep,
        policy=Policy(),
    )
    progress = submitter.run()
    assert (progress.succeeded, progress.failed) == (2, 0)
    firsts = sorted(t.name for t in trials)
    # both trials failed while the policy held (a cycle's recovery acts on the decision
    # before it): no next attempt until it let trials in, then both at once
    assert all(sorted(created[c]) == firsts for c in range(holding["from"] + 1, holding["until"] + 1)), created
    assert len(created[holding["until"] + 1]) == 4, created
    assert sorted(cluster.creates) == sorted(f"{t.name}{s}" for t in trials for s in ("", "-a1"))
