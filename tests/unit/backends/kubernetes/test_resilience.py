"""The submit loop when the API server stops answering (restarted, etcd paused), in virtual time."""

from __future__ import annotations

import pytest

from stratctl.errors import ExitCode, Invalid, Unavailable, Unreachable
from stratctl.run.loop import OUTAGE_BACKOFF, outage_wait
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import Events, FakeClock
from tests.unit.loop import make

REFUSED = Unavailable(
    "list Job: cannot reach the API server at https://127.0.0.1:6443: "
    "Failed to establish a new connection: [Errno 111] Connection refused"
)


def outage(cluster: FakeCluster, clock: FakeClock, start_cycle: int, cycles: int):
    """A cluster step: jobs advance every cycle; the API server is out for `cycles` sleeps
    from the `start_cycle`-th on. Returns the step and the sleeps taken while it was out."""
    count = {"n": 0}
    slept_out: list[float] = []

    def sleep(seconds: float) -> None:
        if cluster.down is not None:
            slept_out.append(seconds)
        clock.sleep(seconds)
        count["n"] += 1
        if count["n"] == start_cycle:
            cluster.down = REFUSED
        elif count["n"] == start_cycle + cycles:
            cluster.down = None
        if cluster.down is None:
            cluster.advance()

    return sleep, slept_out


def test_an_outage_is_a_pause_said_once_then_the_study_goes_on_exactly_once(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.reporter = events = Events()
    submitter.sleep, slept_out = outage(cluster, clock, start_cycle=2, cycles=5)
    progress = submitter.run()
    assert progress.succeeded == 10 and progress.errors == {}
    assert sorted(cluster.creates) == sorted(t.name for t in trials)  # each created exactly once
    [down] = events.about("API server unreachable")
    assert "Connection refused" in down and "retrying, giving up after 5m without an answer" in down
    [back] = events.about("API server answering again")
    # out from the failed cycle after the 2nd sleep to the 1st cycle after it came back:
    # the waits of five failed cycles, 1 + 2 + 4 + 8 + 15 s
    assert back == "API server answering again after 30s out; carrying on"
    assert slept_out == [1.0, 2.0, 4.0, 8.0, 15.0]


def test_waits_between_failed_cycles_grow_to_30s_and_never_undercut_the_poll_interval():
    assert [outage_wait(n, 1.0) for n in range(1, 9)] == [1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0]
    assert outage_wait(1, 5.0) == 5.0 and OUTAGE_BACKOFF[-1] == 30.0


def test_an_outage_longer_than_the_timeout_gives_up_with_exit_3_and_one_message(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock, outage_timeout=120.0)
    submitter.reporter = events = Events()
    submitter.sleep, _ = outage(cluster, clock, start_cycle=2, cycles=10**6)
    began = clock()
    with pytest.raises(Unreachable) as caught:
        submitter.run()
    assert caught.value.exit_code == ExitCode.CLUSTER == 3
    message = str(caught.value)
    assert message.startswith("no answer from the API server for 2m")
    assert "Connection refused" in message and "Run the same command again once it is back" in message
    # given up at the first failed cycle after 120 s out, within one 30 s wait of it
    assert 120.0 <= clock() - began - 2.0 <= 150.0
    assert len(events.about("API server unreachable")) == 1 and not events.about("answering again")


def test_a_transient_create_failure_leaves_the_trial_waiting_not_refused(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.reporter = events = Events()
    victim = trials[1].name
    cluster.fail[victim] = Unavailable(
        f"create Job {victim}: forbidden although the same request worked 2s ago: "
        "the API server is probably restarting",
        status=403,
        reason="Forbidden",
    )
    sleep = submitter.sleep

    def heal(seconds):
        cluster.fail.pop(victim, None)
        sleep(seconds)

    submitter.sleep = heal
    progress = submitter.run()
    assert progress.errors == {} and progress.succeeded == 10
    assert cluster.creates.count(victim) == 1
    [said] = events.about(f"trial {victim}: not created this cycle")
    assert "probably restarting" in said and said.endswith("trying again")


def test_a_refusal_is_still_the_trials_verdict(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    cluster.fail[trials[2].name] = Invalid(
        'jobs.batch.volcano.sh is forbidden: User "alice" cannot create resource', status=403, reason="Forbidden"
    )
    progress = submitter.run()
    assert list(progress.errors) == [trials[2].name] and progress.succeeded == 9 and progress.done


class LostAnswer:
    """The study's jobs as a watch that has not yet seen the job whose create answer was lost."""

    following = True

    def __init__(self, cluster: FakeCluster, hidden: str):
        self.cluster, self.hidden = cluster, hidden

    def snapshot(self):
        jobs = [dict(j) for j in self.cluster.jobs() if j["metadata"]["name"] != self.hidden]
        self.hidden = None  # shown from the next cycle on
        return jobs, 0

    def add(self, obj):
        pass


def test_a_create_whose_answer_was_lost_is_recognised_not_created_twice(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    victim = trials[0].name
    create = cluster.create

    def lost_answer(manifest, dry_run=False):
        obj = create(manifest, dry_run)
        if (
            manifest["metadata"]["name"] == victim
            and cluster.creates.count(victim) == 1
            and not hasattr(cluster, "lied")
        ):
            cluster.lied = True
            submitter.jobs = LostAnswer(cluster, victim)
            raise Unavailable(f"create Job {victim}: Read timed out. (read timeout=60)")
        return obj

    cluster.create = lost_answer
    progress = submitter.run()
    assert progress.errors == {} and progress.succeeded == 10
    assert cluster.creates.count(victim) == 1  # the retry's 409 with the same spec hash counted it
    assert progress.existing == 1


@pytest.mark.parametrize("method", ["create", "get", "list", "patch", "delete"])
def test_a_transient_error_in_any_step_of_a_cycle_is_survived(study_file, method):
    cluster, clock = FakeCluster(), FakeClock()
    # cleanup: delete makes the loop delete finished jobs, so `delete` is a step too
    submitter, trials = make(study_file("cleanup: delete\n"), cluster, clock)
    submitter.reporter = events = Events()
    real = getattr(cluster, method)
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] in (2, 3):  # the second and third calls fail (the first may be the record's)
            raise Unavailable(f"{method}: the server answered 504: etcdserver: request timed out", status=504)
        return real(*args, **kwargs)

    setattr(cluster, method, flaky)
    progress = submitter.run()
    assert calls["n"] > 3, "the step under test never ran"
    assert progress.succeeded == 10 and progress.errors == {}
    assert sorted(cluster.creates) == sorted(t.name for t in trials)
    if method == "create":  # two of the first batch of three: the third went through, no outage
        assert len(events.about("not created this cycle")) == 2 and not events.about("unreachable")
    else:
        assert len(events.about("API server unreachable")) == 1 and len(events.about("answering again")) == 1


def test_a_resubmission_failing_transiently_waits_for_the_server_instead_of_being_reported_per_trial(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.reporter = events = Events()
    victim, retry = trials[0].name, f"{trials[0].name}-a1"
    cluster.fail[retry] = Unavailable(f"create Job {retry}: the server answered 503", status=503)
    aborted: list[float] = []

    def sleep(seconds):
        clock.sleep(seconds)
        for job in cluster.jobs():
            if job["metadata"]["name"] == victim and cluster.phase(job) == "Running" and not aborted:
                cluster.set_phase(job, "Aborted")  # a worker exited non-zero: retried as attempt 1
                aborted.append(clock())
        if aborted and clock() - aborted[0] > 10:
            cluster.fail.pop(retry, None)  # the server is back
        cluster.advance()

    submitter.sleep = sleep
    progress = submitter.run()
    assert progress.succeeded == 10 and progress.errors == {}
    assert cluster.creates.count(retry) == 1 and not events.about("cannot resubmit")
    assert len(events.about("API server unreachable")) == 1 and len(events.about("answering again")) == 1
