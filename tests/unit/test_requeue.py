"""The submit loop resumes preempted and drained trials as their next attempt (virtual time)."""

from __future__ import annotations

import json

from stratctl import labels
from stratctl.record import suspended_patch
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.test_controller import make, study_file  # noqa: F401 - the fixture


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


def test_a_preempted_trial_comes_back_as_its_next_attempt_with_resume(study_file):  # noqa: F811
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


def test_preempted_beyond_the_limit_the_trial_is_given_up(study_file):  # noqa: F811
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


def test_drained_trials_wait_suspended_then_resume(study_file):  # noqa: F811
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
