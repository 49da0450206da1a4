"""The cap holds whatever the trials do: a trial whose next attempt is due holds its place
under the cap, and next attempts go only into room the cap leaves."""

from __future__ import annotations

from stratctl.backends.kubernetes.attempts.requeue import Requeue
from stratctl.backends.kubernetes.loop.controller import Submitter
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.run.options import SubmitOptions
from stratctl.run.throttle import Throttle
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make
from tests.unit.rendering import Renderer


def in_flight(cluster: FakeCluster) -> int:
    return len(cluster.jobs(lambda phase: phase in ("Pending", "Running")))


def failing_run(study_file, monkeypatch, undecided_cycles: int, **options):
    """Every attempt fails; whether a failed attempt was preempted stays undecided for
    `undecided_cycles` cycles (as with the pod watch: `requeue.SETTLE`). Returns the
    progress and the trials in flight after each cycle."""
    cluster, clock = FakeCluster(), FakeClock()
    study = load_study(study_file("retries: {max_failures: 2}\n"))
    trials = expand(study)
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    seen: dict[str, int] = {}
    decide = Requeue._state

    def undecided(self, job, state):
        uid = job["metadata"]["uid"]
        if state.name == "FAILED" and seen.setdefault(uid, 0) < undecided_cycles:
            seen[uid] += 1
            return None
        return decide(self, job, state)

    monkeypatch.setattr(Requeue, "_state", undecided)
    peak: list[int] = []

    ran: dict[str, int] = {}

    def sleep(seconds):  # between two cycles: what the cycle left in flight, then the cluster moves
        peak.append(in_flight(cluster))
        clock.sleep(seconds)
        for job in cluster.jobs():  # each attempt starts, runs three cycles, and fails
            phase, name = cluster.phase(job), job["metadata"]["name"]
            if phase == "Pending":
                cluster.set_phase(job, "Running")
            elif phase == "Running":
                ran[name] = ran.get(name, 0) + 1
                if ran[name] == 3:
                    cluster.set_phase(job, "Failed")

    opts = SubmitOptions(poll_interval=1, workers=1, **options)
    submitter = Submitter(study, trials, Renderer(study), cluster, throttle, opts, clock=clock, sleep=sleep)
    return submitter.run(), peak, cluster


def test_with_every_trial_failing_no_more_than_the_target_is_ever_in_flight(study_file, monkeypatch):
    # the loop's study: initial 3, max 3; a failed attempt undecided for two cycles used to
    # free its place at once, a new trial took it, then the retry came on top
    progress, peak, cluster = failing_run(study_file, monkeypatch, undecided_cycles=2)
    assert max(peak) == 3, peak
    assert (progress.failed, progress.succeeded) == (10, 0)
    assert len(cluster.creates) == 30  # every trial still had its three attempts, each once


def test_a_static_cap_holds_with_every_trial_failing(study_file, monkeypatch):
    progress, peak, cluster = failing_run(
        study_file, monkeypatch, undecided_cycles=2, parallelism="static", max_inflight=2
    )
    assert max(peak) == 2, peak
    assert progress.failed == 10 and len(cluster.creates) == 30


def test_next_attempts_wait_for_room_when_the_target_fell_below_what_is_in_flight(study_file):
    from dataclasses import replace

    from tests.unit.backends.kubernetes.test_requeue import restart_out

    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock)
    seen: list[tuple[int, int]] = []  # (creates, in flight) after each cycle once the target fell

    def sleep(seconds):
        clock.sleep(seconds)
        running = cluster.jobs(lambda phase: phase == "Running")
        if len(running) == 3 and not seen:
            # the target falls to 1 (a congested scheduler, say) while three run; two are preempted
            submitter.policy.state = replace(submitter.policy.state, target=1)
            submitter.deciding.last = replace(submitter.deciding.last, target=1)
            restart_out(running[0])
            restart_out(running[1])
            seen.append((len(cluster.creates), 3))
            return
        if seen:
            seen.append((len(cluster.creates), in_flight(cluster)))
        cluster.advance()

    submitter.sleep = sleep
    progress = submitter.run()
    created = seen[0][0]
    # no room at first: both next attempts wait, their places held, while the third runs
    assert seen[1] == (created, 1)
    # then one at a time, never more than the target in flight
    assert max(flying for _, flying in seen[1:]) == 1
    assert progress.succeeded == 10 and len(cluster.creates) == 12  # 10 trials + 2 next attempts, each once
