"""The submit loop resumes preempted, drained and failed trials as their next attempt (virtual time)."""

from __future__ import annotations

import json

from stratctl import labels
from stratctl.backends.kubernetes.attempts.requeue import Requeue
from stratctl.backends.kubernetes.objects.record import suspended_patch
from stratctl.backends.kubernetes.objects.state import TrialState
from stratctl.errors import ClusterError
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make


def env_of(job: dict) -> dict[str, str]:
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def restart_out(job: dict) -> None:
    """What Volcano does to a running job whose pod is evicted with maxRetry used up."""
    job["status"] = {
        "state": {"phase": "Failed", "lastTransitionTime": "2025-05-01T10:31:01Z"},
        "conditions": [
            {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
            {"status": "Restarting", "lastTransitionTime": "2025-05-01T10:31:00Z"},
            {"status": "Failed", "lastTransitionTime": "2025-05-01T10:31:01Z"},
        ],
        "retryCount": 1,
    }


def abort(job: dict) -> None:
    """What Volcano does to a running job whose worker exits non-zero (PodFailed -> AbortJob)."""
    job["status"] = {
        "state": {"phase": "Aborted", "lastTransitionTime": "2025-05-01T10:20:02Z"},
        "conditions": [
            {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
            {"status": "Aborting", "lastTransitionTime": "2025-05-01T10:20:01Z"},
            {"status": "Aborted", "lastTransitionTime": "2025-05-01T10:20:02Z"},
        ],
    }


def scripted(cluster: FakeCluster, script: dict[str, list]):
    """A cluster step ending the named trials' running attempts as scripted, one entry per
    attempt in order (`restart_out`, `abort`); attempts beyond the script complete."""
    done: set[str] = set()

    def step():
        for job in cluster.jobs():
            name, trial = job["metadata"]["name"], job["metadata"]["labels"][labels.TRIAL]
            attempt = int(job["metadata"]["labels"][labels.ATTEMPT])
            if name not in done and cluster.phase(job) == "Running" and attempt < len(script.get(trial, [])):
                done.add(name)
                script[trial][attempt](job)
        cluster.advance()

    return step


def attempts_of(cluster: FakeCluster, trial: str) -> list[dict]:
    jobs = [j for j in cluster.jobs() if j["metadata"]["labels"][labels.TRIAL] == trial]
    return sorted(jobs, key=lambda j: int(j["metadata"]["labels"][labels.ATTEMPT]))


def preempting(cluster: FakeCluster, victims: set[str], times: int = 1):
    """A cluster step that preempts the named trials' running attempts `times` times each."""
    count: dict[str, int] = {}

    def step():
        for job in cluster.jobs():
            trial = job["metadata"]["labels"][labels.TRIAL]
            if trial in victims and cluster.phase(job) == "Running" and count.get(trial, 0) < times:
                count[trial] = count.get(trial, 0) + 1
                restart_out(job)
        cluster.advance()

    return step


def test_a_preempted_trial_comes_back_as_its_next_attempt_with_resume(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    victim = trials[0].name
    step = preempting(cluster, {victim})
    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert progress.succeeded == 10 and progress.failed == 0
    names = [j["metadata"]["name"] for j in cluster.jobs() if j["metadata"]["labels"][labels.TRIAL] == victim]
    assert sorted(names) == [victim, f"{victim}-a1"]
    resumed = next(j for j in cluster.jobs() if j["metadata"]["name"] == f"{victim}-a1")
    first = next(j for j in cluster.jobs() if j["metadata"]["name"] == victim)
    assert env_of(resumed)["STRATCTL_RESUME"] == "1" and env_of(first)["STRATCTL_RESUME"] == "0"
    assert env_of(resumed)["STRATCTL_CHECKPOINT_DIR"] == env_of(first)["STRATCTL_CHECKPOINT_DIR"]
    assert resumed["metadata"]["labels"][labels.ATTEMPT] == "1"
    assert resumed["metadata"]["annotations"][labels.PREEMPTIONS] == "1"
    assert float(resumed["metadata"]["annotations"][labels.GPU_SECONDS_LOST]) == 1800 * 2  # 30 min x 2 GPUs


def test_preempted_beyond_the_limit_the_trial_is_given_up(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file("retries: {max_preemptions: 1}\n"), cluster, clock)
    victim = trials[0].name
    step = preempting(cluster, {victim}, times=5)
    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert progress.succeeded == 9 and progress.failed == 1
    attempts = sorted(j["metadata"]["name"] for j in cluster.jobs() if j["metadata"]["labels"][labels.TRIAL] == victim)
    assert attempts == [victim, f"{victim}-a1"]  # resumed once, then given up
    last = next(j for j in cluster.jobs() if j["metadata"]["name"] == f"{victim}-a1")
    assert "max_preemptions=1" in last["metadata"]["annotations"][labels.GIVEN_UP]


def test_drained_trials_wait_suspended_then_resume(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock, max_inflight=3)
    submitter.ensure_record()
    record = cluster.record("loop")
    # what `stratctl drain` leaves: drained, trial 0's attempt 0 deleted and marked
    record["data"]["drained"] = "true"
    record["data"].update(suspended_patch({trials[0].name: {"attempt": 0, "gpu_seconds": 60}})["data"])
    cycles = []

    def step():
        cycles.append(1)
        if len(cycles) == 3:
            record["data"]["drained"] = "false"
        cluster.advance()

    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert progress.succeeded == 10
    made = [j for j in cluster.jobs() if j["metadata"]["labels"][labels.TRIAL] == trials[0].name]
    assert [j["metadata"]["name"] for j in made] == [f"{trials[0].name}-a1"]  # never attempt 0 again
    assert env_of(made[0])["STRATCTL_RESUME"] == "1"
    assert made[0]["metadata"]["annotations"][labels.GPU_SECONDS] == "60"
    assert json.loads(record["data"]["suspended"])  # resume's business to clear, not the loop's


def test_a_failed_trial_is_retried_up_to_max_failures_then_given_up(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file("retries: {max_failures: 1}\n"), cluster, clock)
    victim = trials[0].name
    step = scripted(cluster, {victim: [abort, abort]})
    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert (progress.succeeded, progress.failed, progress.created) == (9, 1, 10)
    first, retry = attempts_of(cluster, victim)
    assert (first["metadata"]["name"], retry["metadata"]["name"]) == (victim, f"{victim}-a1")
    assert env_of(retry)["STRATCTL_RESUME"] == "1" and env_of(retry)["STRATCTL_ATTEMPT"] == "1"
    assert env_of(retry)["STRATCTL_CHECKPOINT_DIR"] == env_of(first)["STRATCTL_CHECKPOINT_DIR"]
    notes = retry["metadata"]["annotations"]
    assert (notes[labels.FAILURES], notes[labels.PREEMPTIONS]) == ("1", "0")
    assert notes[labels.GIVEN_UP] == "failed 2 times, more than retries.max_failures=1"
    assert labels.GIVEN_UP not in first["metadata"]["annotations"]
    assert len(cluster.creates) == 11  # ten first attempts, one retry: nothing after the trial was given up


def test_a_trial_that_fails_once_succeeds_on_its_retry(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)  # max_failures: 2 by default
    victim = trials[3].name
    step = scripted(cluster, {victim: [abort]})
    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert (progress.succeeded, progress.failed) == (10, 0)
    assert [j["metadata"]["name"] for j in attempts_of(cluster, victim)] == [victim, f"{victim}-a1"]
    assert cluster.phase(attempts_of(cluster, victim)[1]) == "Completed"


def test_preemptions_and_failures_are_carried_apart(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file("retries: {max_failures: 1, max_preemptions: 1}\n"), cluster, clock)
    victim = trials[0].name
    step = scripted(cluster, {victim: [restart_out, abort, abort]})
    submitter.sleep = lambda s: (clock.sleep(s), step())
    progress = submitter.run()
    assert (progress.succeeded, progress.failed) == (9, 1)
    jobs = attempts_of(cluster, victim)
    assert [j["metadata"]["name"] for j in jobs] == [victim, f"{victim}-a1", f"{victim}-a2"]
    carried = [
        (j["metadata"]["annotations"].get(labels.PREEMPTIONS), j["metadata"]["annotations"].get(labels.FAILURES))
        for j in jobs
    ]
    assert carried == [(None, None), ("1", "0"), ("1", "1")]
    assert jobs[2]["metadata"]["annotations"][labels.GIVEN_UP] == "failed 2 times, more than retries.max_failures=1"


def test_a_retrying_trial_is_not_finished_while_its_next_attempt_cannot_be_created(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file("retries: {max_failures: 1}\n"), cluster, clock)
    submitter.ensure_record()
    name = trials[0].name
    cluster.create(submitter.renderer.render(trials[0], attempt=0)[0])
    [job] = cluster.jobs()
    abort(job)
    requeue = Requeue(
        cluster, submitter.renderer, submitter.study, submitter.trials, submitter.kind, submitter.reporter, clock=clock
    )
    # drained: held, neither failed nor finished
    cluster.record("loop")["data"]["drained"] = "true"
    assert requeue.step({name: TrialState.FAILED}, {name: job}, drained=True) == {name: TrialState.RETRYING}
    cluster.record("loop")["data"]["drained"] = "false"
    # the create fails: tried again next cycle
    cluster.fail[f"{name}-a1"] = ClusterError("connection refused")
    assert requeue.step({name: TrialState.FAILED}, {name: job}, drained=False) == {name: TrialState.RETRYING}
    del cluster.fail[f"{name}-a1"]
    assert requeue.step({name: TrialState.FAILED}, {name: job}, drained=False) == {name: TrialState.PENDING}
    assert [j["metadata"]["name"] for j in attempts_of(cluster, name)] == [name, f"{name}-a1"]


def test_a_suspended_trial_waits_while_the_record_says_drained_even_if_the_loop_has_not_read_it_yet(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.ensure_record()
    name = trials[0].name
    record = cluster.record("loop")
    # what `drain` leaves: the flag, then the mark; the job is gone
    record["data"]["drained"] = "true"
    record["data"].update(suspended_patch({name: {"attempt": 0}})["data"])
    requeue = Requeue(
        cluster, submitter.renderer, submitter.study, submitter.trials, submitter.kind, submitter.reporter, clock=clock
    )
    # the loop's own copy of the flag is older: not drained
    assert requeue.step({name: TrialState.WAITING}, {}, drained=False) == {name: TrialState.SUSPENDED}
    assert cluster.jobs() == []
    record["data"]["drained"] = "false"  # `resume`, or drained no more
    assert requeue.step({name: TrialState.WAITING}, {}, drained=True) == {name: TrialState.PENDING}
    assert [j["metadata"]["name"] for j in cluster.jobs()] == [f"{name}-a1"]
