"""One set of recovery rules (run/recovery.py), the same cases run against every backend:
Kubernetes (the submit loop over the in-memory cluster), Slurm (the attempt loop over its
faked commands) and YARN (the attempt loop over a faked ResourceManager behind the real
REST client).

- a trial preempted more often than `retries.max_preemptions` is given up: failed, with
  the same reason on every backend, in the loop's events and in `status`;
- up to the limit each preemption resumes from the checkpoint and none is a failure;
- a trial that failed more often than `retries.max_failures` is given up, its
  preemptions not counted as failures;
- a trial given up stays given up: a later run of the loop submits nothing for it.

Where the backends truly differ: Kubernetes (a Volcano Job restarted out) and YARN (the
gang AM ends the attempt) resume a preemption in the trial's next attempt; Slurm requeues
the same job, so giving up cancels that job."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from stratctl import labels
from stratctl.backends.batch.loop import AttemptLoop
from stratctl.backends.batch.status import snapshot
from stratctl.backends.kubernetes.objects.summary import build, latest_slim
from stratctl.backends.slurm.commands import Slurm
from stratctl.backends.slurm.scheduler import SlurmScheduler
from stratctl.backends.slurm.script import parse_comment
from stratctl.backends.yarn.app import parse_tags
from stratctl.backends.yarn.rest import ResourceManager
from stratctl.backends.yarn.scheduler import YarnScheduler
from stratctl.core.space import expand
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import StaticPolicy
from stratctl.run.recovery import Kind, Limits, TrialView, next_action
from stratctl.run.rows import TrialRow
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState
from tests.unit.backends.fakes import FakeRM, FakeSlurm, slurm_nodes, yarn_nodes
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock, MaxRng, one_cycle
from tests.unit.loop import make
from tests.unit.rendering import Renderer
from tests.unit.studies import load

# one trial, one GPU; `retries` filled in by each case
BODY = """\
retries: {retries}
space:
  seed: {{type: choice, values: [7]}}
strategy: {{kind: grid}}
trial:
  command: ["train"]
  resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""
KUBERNETES_STUDY = """\
name: rules
namespace: stratctl-e2e
queue: default
retries: {retries}
space:
  seed: {{type: choice, values: [7]}}
strategy: {{kind: grid}}
trial:
  image: busybox
  command: ["train"]
  resources: {{requests: {{nvidia.com/gpu: 1}}}}
  tasks: [{{name: worker, replicas: 1}}]
"""


def attempt_loop(study, sched) -> tuple[AttemptLoop, list[str]]:
    clock = FakeClock()
    loop = AttemptLoop(
        study,
        expand(study),
        sched,
        Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng()),
        SubmitOptions(poll_interval=1, workers=1),
        policy=StaticPolicy(2),
        clock=clock,
        sleep=clock.sleep,
    )
    events: list[str] = []
    loop.reporter.event = events.append
    return loop, events


class KubernetesBackend:
    """The Kubernetes submit loop over FakeCluster: a preempted Volcano Job is restarted out
    (its eviction used up maxRetry), a failed one aborted; the next attempt resumes."""

    preemption = "next attempt"

    def __init__(self, tmp_path, retries: str):
        path = tmp_path / "study.yaml"
        path.write_text(KUBERNETES_STUDY.format(retries=retries))
        self.path = str(path)
        self.cluster, self.clock = FakeCluster(), FakeClock()
        self.new_loop()
        self.trial = self.trials[0].name

    def new_loop(self):
        self.loop, self.trials = make(self.path, self.cluster, self.clock)
        self.events: list[str] = []
        self.loop.reporter.event = self.events.append

    def _latest(self) -> dict:
        jobs = [j for j in self.cluster.jobs() if j["metadata"]["labels"][labels.TRIAL] == self.trial]
        return max(jobs, key=lambda j: int(j["metadata"]["labels"][labels.ATTEMPT]))

    def attempts(self) -> list[int]:
        return sorted(int(j["metadata"]["labels"][labels.ATTEMPT]) for j in self.cluster.jobs())

    def run(self):
        self._latest()["status"] = {
            "state": {"phase": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
            "conditions": [{"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"}],
        }

    def preempt(self):
        """What Volcano does to a running job whose pod is evicted with maxRetry used up."""
        self._latest()["status"] = {
            "state": {"phase": "Failed", "lastTransitionTime": "2025-05-01T10:31:01Z"},
            "conditions": [
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
                {"status": "Restarting", "lastTransitionTime": "2025-05-01T10:31:00Z"},
                {"status": "Failed", "lastTransitionTime": "2025-05-01T10:31:01Z"},
            ],
            "retryCount": 1,
        }

    def fail(self):
        """What Volcano does to a running job whose worker exits non-zero (PodFailed -> AbortJob)."""
        self._latest()["status"] = {
            "state": {"phase": "Aborted", "lastTransitionTime": "2025-05-01T10:20:02Z"},
            "conditions": [
                {"status": "Running", "lastTransitionTime": "2025-05-01T10:01:00Z"},
                {"status": "Aborting", "lastTransitionTime": "2025-05-01T10:20:01Z"},
                {"status": "Aborted", "lastTransitionTime": "2025-05-01T10:20:02Z"},
            ],
        }

    def succeed(self):
        self._latest()["status"] = {"state": {"phase": "Completed", "lastTransitionTime": "2025-05-01T10:40:00Z"}}

    def phase(self) -> str:
        return {"Pending": "pending", "Running": "running"}.get(self.cluster.phase(self._latest()), "ended")

    def row(self) -> TrialRow:
        _, rows = build(self.clock(), [self.cluster.record("rules")], latest_slim(self.cluster.jobs()))
        return next(r for r in rows if r.trial == self.trial)


class SlurmBackend:
    """The attempt loop over SlurmScheduler and FakeSlurm: a preempted job is requeued by
    Slurm itself (PreemptMode=REQUEUE), the same job, its restart count up."""

    preemption = "requeue"

    def __init__(self, tmp_path, retries: str):
        self.study = load(tmp_path, "name: rules\nbackend: slurm\n" + BODY.format(retries=retries))
        self.fake = FakeSlurm(nodes=slurm_nodes([4]))
        self.sched = SlurmScheduler(self.study, Renderer(self.study), Slurm(run=self.fake), workdir=str(tmp_path))
        self.new_loop()
        self.trial = self.loop.order[0]

    def new_loop(self):
        self.loop, self.events = attempt_loop(self.study, self.sched)

    def _latest(self) -> dict:
        return max(self.fake.jobs, key=lambda j: j["job_id"])

    def attempts(self) -> list[int]:
        return sorted(parse_comment(j["comment"])[2] for j in self.fake.jobs)

    def run(self):
        """It starts (again): its script writes its job id and restart count, as the job script does."""
        job = self._latest()
        job.update(job_state="RUNNING", state_reason="None", start_time=1000)
        _, trial, number, _ = parse_comment(job["comment"])
        (self.sched.output / trial / f"attempt-{number}.job").write_text(f"{job['job_id']} {job['restart_cnt']}\n")

    def preempt(self):
        job = self._latest()
        job.update(job_state="PENDING", state_reason="BeginTime", restart_cnt=job["restart_cnt"] + 1)

    def fail(self):
        self._latest().update(job_state="FAILED", exit_code=256, end_time=4000)  # the wait status of exit 1

    def succeed(self):
        self._latest().update(job_state="COMPLETED", exit_code=0, end_time=4000)

    def phase(self) -> str:
        return {"PENDING": "pending", "RUNNING": "running"}.get(self._latest()["job_state"], "ended")

    def row(self) -> TrialRow:
        return next(r for r in snapshot(self.study, self.sched, now=5000).trials if r.trial == self.trial)


class YarnBackend:
    """The attempt loop over YarnScheduler, the real REST client and FakeRM: the gang AM
    ends a preempted attempt (`stratctl: preempted`), the next attempt resumes."""

    preemption = "next attempt"

    def __init__(self, tmp_path, retries: str):
        self.study = load(
            tmp_path,
            'name: rules\nbackend: yarn\nyarn: {resource_managers: ["http://rm:8088"], queue: research, '
            "classpath: [/etc/hadoop]}\n" + BODY.format(retries=retries),
        )
        self.fake = FakeRM()
        self.fake.nodes = yarn_nodes([4])
        jar = tmp_path / "am.jar"
        jar.write_bytes(b"jar")
        self.sched = YarnScheduler(
            self.study, rm=ResourceManager(["http://rm:8088"], pool=self.fake), workdir=str(tmp_path), jar=jar
        )
        self.new_loop()
        self.trial = self.loop.order[0]

    def new_loop(self):
        self.loop, self.events = attempt_loop(self.study, self.sched)

    def _latest(self) -> str:
        return self.fake.of(self.trial)[-1]["id"]

    def attempts(self) -> list[int]:
        return sorted(int(parse_tags(b["application-tags"]["tag"])["n"]) for b in self.fake.submitted)

    def run(self):
        self.fake.apps[self._latest()].update(state="RUNNING", progress=50.0, launchTime=1_000_000, diagnostics="")

    def preempt(self):
        self.fake.end(
            self._latest(), "FAILED", "FAILED", "stratctl: preempted: container_1_0001_01_000002 was preempted"
        )

    def fail(self):
        self.fake.end(self._latest(), "FAILED", "FAILED", "container_1_0001_01_000002 exited with code 1")

    def succeed(self):
        self.fake.end(self._latest(), "FINISHED", "SUCCEEDED")

    def phase(self) -> str:
        return {"ACCEPTED": "pending", "RUNNING": "running"}.get(self.fake.apps[self._latest()]["state"], "ended")

    def row(self) -> TrialRow:
        return next(r for r in snapshot(self.study, self.sched, now=5000).trials if r.trial == self.trial)


@pytest.fixture(params=[KubernetesBackend, SlurmBackend, YarnBackend], ids=["kubernetes", "slurm", "yarn"])
def backend(request, tmp_path):
    def make_backend(retries: str):
        return request.param(tmp_path, retries)

    return make_backend


def live(b, *events: str):
    """The whole submit loop, until it ends: each time the trial's latest attempt runs, the
    next of `events` happens to it (preempt, fail); once they are done it succeeds."""
    script = list(events)
    steps = []

    def step(seconds):
        steps.append(seconds)
        assert len(steps) < 60, "the loop never ended"
        phase = b.phase()
        if phase == "pending":
            b.run()
        elif phase == "running":
            getattr(b, script.pop(0) if script else "succeed")()

    b.loop.sleep = step
    progress = b.loop.run()
    assert not script, f"the loop ended before {script}"
    return progress


def expected_attempts(b, preempted: int, failed: int) -> list[int]:
    """The attempts created: one more after each failure, and after each preemption
    resumed where a preemption ends the attempt; Slurm requeues the same job."""
    resumed = preempted if b.preemption == "next attempt" else 0
    return list(range(1 + resumed + failed))


def test_preempted_more_often_than_max_preemptions_the_trial_is_given_up(backend):
    b = backend("{max_preemptions: 1}")
    live(b, "preempt", "preempt")
    reason = "preempted 2 times, more than retries.max_preemptions=1"
    assert f"trial {b.trial}: given up, {reason}" in b.events
    row = b.row()
    assert (row.state, row.preemptions, row.failures) == ("failed", 2, 0)
    assert reason in row.reason
    # resumed once, then given up: no attempt after it, and the last one no longer runs
    assert b.attempts() == expected_attempts(b, preempted=1, failed=0) and b.phase() == "ended"
    assert b.loop.progress.failed == 1
    if isinstance(b, SlurmBackend):
        assert b._latest()["job_state"] == "CANCELLED"  # the job Slurm requeued is cancelled
        # the first preemption resumes from the checkpoint; the second is not said to
        assert [e for e in b.events if "it resumes from its checkpoint" in e] == [
            f"trial {b.trial}: preempted, requeued by Slurm (restart 1 of job 1): it resumes from its checkpoint; "
            "not a failure"
        ]


def test_max_preemptions_0_gives_up_at_the_first_preemption_and_says_once(backend):
    b = backend("{max_preemptions: 0}")
    live(b, "preempt")
    assert f"trial {b.trial}: given up, preempted once, more than retries.max_preemptions=0" in b.events
    row = b.row()
    assert (row.state, row.preemptions) == ("failed", 1) and b.attempts() == [0]


def test_up_to_the_limit_each_preemption_resumes_and_none_is_a_failure(backend):
    b = backend("{max_preemptions: 2, max_failures: 0}")
    live(b, "preempt", "preempt")
    row = b.row()
    assert (row.state, row.preemptions, row.failures, row.reason) == ("succeeded", 2, 0, "")
    assert b.attempts() == expected_attempts(b, preempted=2, failed=0)
    assert not any("given up" in e for e in b.events) and b.loop.progress.succeeded == 1


def test_failed_more_often_than_max_failures_the_trial_is_given_up_its_preemptions_apart(backend):
    b = backend("{max_failures: 1, max_preemptions: 5}")
    live(b, "preempt", "fail", "fail")
    reason = "failed 2 times, more than retries.max_failures=1"
    row = b.row()
    assert (row.state, row.preemptions, row.failures) == ("failed", 1, 2)
    assert reason in row.reason
    assert b.attempts() == expected_attempts(b, preempted=1, failed=1)
    assert b.loop.progress.failed == 1


def test_a_trial_given_up_stays_given_up_for_a_later_run(backend):
    b = backend("{max_preemptions: 0}")
    live(b, "preempt")
    before = b.attempts()
    b.new_loop()  # another `stratctl submit` of the same study
    progress = live(b)
    assert b.attempts() == before and b.row().state == "failed"
    assert progress.failed == 1 and progress.created == 0


# -- the rules themselves, where Slurm differs: the job is requeued in place ----------------


@pytest.mark.parametrize(
    ("view", "action"),
    [
        (TrialView("t", 0, TrialState.PENDING, preemptions=2, requeued=True), Kind.GIVE_UP),
        (TrialView("t", 0, TrialState.RUNNING, preemptions=2, requeued=True), Kind.GIVE_UP),
        (TrialView("t", 0, TrialState.RUNNING, preemptions=1, requeued=True), None),  # at the limit: runs on
        (TrialView("t", 0, TrialState.RUNNING, preemptions=2), None),  # not requeued in place: Kubernetes' as before
        # suspended by drain: the suspension's rule, its preemptions not judged until it runs again
        (TrialView("t", 0, TrialState.SUSPENDED, preemptions=2, requeued=True), Kind.RESUBMIT),
        (TrialView("t", 0, TrialState.RUNNING, preemptions=3, requeued=True, given_up=True), None),
    ],
)
def test_an_attempt_requeued_in_place_is_given_up_only_past_the_limit(view, action):
    got = next_action(view, Limits(max_preemptions=1), drained=False)
    assert (got.kind if got else None) is action
    if action is Kind.GIVE_UP:
        assert got.reason == "preempted 2 times, more than retries.max_preemptions=1" and not got.resume


def test_drains_requeues_on_slurm_are_not_preemptions(tmp_path):
    """`drain` stops a running Slurm job with requeuehold, which Slurm counts as a restart:
    not a preemption, so it never brings a trial nearer to max_preemptions."""
    from stratctl.backends.batch import drain as attemptdrain

    b = SlurmBackend(tmp_path, "{max_preemptions: 0}")
    with ThreadPoolExecutor(1) as pool:
        one_cycle(b.loop, pool)
        b.run()
        assert attemptdrain.drain(b.study, b.sched).suspended == [b.trial]
        assert b._latest()["restart_cnt"] == 1
        one_cycle(b.loop, pool)
        assert b.sched.attempts()[b.trial].preemptions == 0 and b.row().state == "suspended"
        attemptdrain.resume(b.study, b.sched)
        one_cycle(b.loop, pool)
        b.run()
        one_cycle(b.loop, pool)
        assert b.row().state == "running" and not any("given up" in e for e in b.events)
        b.preempt()  # a real preemption after it: the first, more than 0
        one_cycle(b.loop, pool)
    assert f"trial {b.trial}: given up, preempted once, more than retries.max_preemptions=0" in b.events
    assert b.row().preemptions == 1 and b._latest()["job_state"] == "CANCELLED"
