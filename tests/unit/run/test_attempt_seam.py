"""The attempt seam (backends/base.py): the shared loop, `status`, `drain` and `resume`
run any scheduler that implements `Scheduler`, here an in-memory one that is not Slurm,
with the same guarantees: exactly once when an answer is lost, failures against
max_failures, preemptions counted once and never as failures, drain holds and resume
releases."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from stratctl.attempt import Attempt
from stratctl.core.space import expand
from stratctl.errors import Unavailable
from stratctl.run import attemptdrain
from stratctl.run.attemptloop import AttemptLoop
from stratctl.run.attemptstatus import snapshot
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import StaticPolicy
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState
from tests.unit.fakes import FakeClock, MaxRng
from tests.unit.studies import load

STUDY = """\
name: mem
backend: slurm
retries: {max_failures: 1}
space:
  seed: {type: int, low: 0, high: 2, grid: true}
strategy: {kind: grid}
trial:
  command: ["train"]
  resources: {limits: {nvidia.com/gpu: 2}}
"""


class MemoryScheduler:
    """A scheduler held in a dict: trial -> its latest Attempt. `lose` names trials whose
    next create goes through but answers with a timeout."""

    kind, title, create_command, limit_words = "memory", "Memory", "put", "quota"
    controller, calls_word = "Memory controller", "calls"
    where, queue = "memory:q", "q"

    def __init__(self, gpus=(4, 4)):
        self.jobs: dict[str, Attempt] = {}
        self.gpus = list(gpus)
        self.lose: set[str] = set()
        self.calls, self.sent, self.refused = 0, {}, {}
        self.flag = False
        self.results: dict[str, dict] = {}
        self.creates: list[tuple[str, int]] = []

    def _count(self, what):
        self.calls += 1
        self.sent[what] = self.sent.get(what, 0) + 1

    def attempts(self, marks=True):
        self._count("list")
        return dict(self.jobs)

    def free_gpus(self):
        return list(self.gpus)

    def result(self, trial):
        return self.results.get(trial)

    def prepare(self, trial, number):
        return (trial.name, number)

    def check(self, trial):
        pass

    def create(self, prepared):
        self._count("put")
        trial, number = prepared
        self.creates.append(prepared)
        self.jobs[trial] = Attempt(
            trial,
            number,
            TrialState.PENDING,
            job=f"{trial}-{number}",
            native_state="QUEUED",
            reason="Resources",
            waits_for_capacity=True,
        )
        if trial in self.lose:
            self.lose.discard(trial)
            raise Unavailable("put: no answer")

    def find(self, prepared):
        trial, number = prepared
        return trial in self.jobs and self.jobs[trial].attempt == number

    def set(self, trial, **changes):
        self.jobs[trial] = replace(self.jobs[trial], **changes)

    def hold(self, attempt):
        self.set(attempt.trial, state=TrialState.SUSPENDED)

    def stop(self, attempt):
        self.set(attempt.trial, state=TrialState.SUSPENDED, restarts=attempt.restarts + 1)

    def release(self, attempt):
        self.set(attempt.trial, state=TrialState.PENDING)

    def drained(self):
        return self.flag

    def set_drained(self, on):
        self.flag = on


def make(tmp_path, scheduler, events=None):
    study = load(tmp_path, STUDY)
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    loop = AttemptLoop(
        study,
        expand(study),
        scheduler,
        throttle,
        SubmitOptions(poll_interval=1, workers=1),
        policy=StaticPolicy(3),
        clock=clock,
        sleep=clock.sleep,
    )
    if events is not None:
        loop.reporter.event = events.append
    return study, loop


def test_any_scheduler_behind_the_seam_gets_exactly_once_retries_and_preemption(tmp_path):
    mem = MemoryScheduler()
    events: list[str] = []
    study, loop = make(tmp_path, mem, events)
    first = loop.order[0]
    mem.lose = {first}
    with ThreadPoolExecutor(1) as pool:
        loop.cycle(pool)
        assert sorted(mem.creates) == sorted((n, 0) for n in loop.order)  # the lost one was found, not sent again
        mem.set(first, state=TrialState.RUNNING, restarts=1)  # preempted and requeued by the scheduler
        second = loop.order[1]
        mem.set(second, state=TrialState.FAILED, exit_code=3)
        states = loop.cycle(pool)
    assert states[first] is TrialState.RUNNING
    assert [e for e in events if "preempted" in e] == [
        f"trial {first}: preempted, requeued by Memory (restart 1 of job {first}-0): it resumes from its "
        "checkpoint; not a failure"
    ]
    assert (second, 1) in mem.creates and states[second] is TrialState.PENDING  # max_failures 1: one more attempt
    mem.set(second, state=TrialState.FAILED)
    with ThreadPoolExecutor(1) as pool:
        states = loop.cycle(pool)
    assert states[second] is TrialState.FAILED and mem.creates.count((second, 2)) == 0  # failures ran out
    assert loop.progress.failed == 1 and loop.progress.created == 4
    # a rerun recognises everything and reports no old preemption again
    events2: list[str] = []
    _, again = make(tmp_path, mem, events2)
    with ThreadPoolExecutor(1) as pool:
        again.cycle(pool)
    assert again.progress.existing == 3 and again.progress.created == 0
    assert not [e for e in events2 if "preempted" in e]


def test_status_drain_and_resume_run_any_scheduler(tmp_path):
    mem = MemoryScheduler()
    study, loop = make(tmp_path, mem)
    with ThreadPoolExecutor(1) as pool:
        loop.cycle(pool)
    a, b, c = loop.order
    mem.set(a, state=TrialState.RUNNING, native_state="RUNNING")
    mem.set(
        c,
        state=TrialState.SUCCEEDED,
        native_state="DONE",
        exit_code=0,
        started=100.0,
        ended=400.0,
        earlier_seconds=60.0,
    )
    mem.set(a, started=300.0)
    mem.results[c] = {"loss": 0.5}
    snap = snapshot(study, mem, now=400)
    rows = {r.trial: r for r in snap.trials}
    assert snap.namespace == "memory:q"  # where the study runs, as status heads it
    assert (rows[a].state, rows[b].state, rows[c].state) == ("running", "pending", "succeeded")
    assert rows[b].pending == "Resources" and rows[c].result == {"loss": 0.5} and rows[a].queue == "q"
    # GPU time: 2 GPUs a trial; c ran 300 s, and 60 s in an earlier attempt (lost); a runs since 300
    assert (rows[c].gpu_seconds, rows[c].gpu_seconds_lost, rows[a].gpu_seconds) == (720.0, 120.0, 200.0)
    [row] = snap.studies
    assert row.gpu_hours == (720 + 200) / 3600 and row.gpu_hours_lost == 120 / 3600
    out = attemptdrain.drain(study, mem)
    assert out.suspended == [a, b] and mem.drained()
    assert mem.jobs[a].restarts == 1 and mem.jobs[a].state is TrialState.SUSPENDED
    events: list[str] = []
    loop.reporter.event = events.append
    with ThreadPoolExecutor(1) as pool:  # a loop admits nothing while drained, and counts drain's stop no preemption
        loop.cycle(pool)
    assert len(mem.creates) == 3 and not [e for e in events if "preempted" in e]
    back = attemptdrain.resume(study, mem)
    assert back.resumed == [a, b] and not mem.drained()
    assert {mem.jobs[t].state for t in (a, b)} == {TrialState.PENDING}


def test_detach_reads_no_capacity_and_submits_up_to_the_cap(tmp_path):
    """As on Kubernetes: `--detach` watches nothing, so a full cluster does not keep a static
    cap's trials back (with capacity read, a static cap queues at most two beyond what fits)."""
    study = load(tmp_path, STUDY)
    for detach, created in ((False, 2), (True, 3)):
        mem = MemoryScheduler(gpus=(0, 0))  # every GPU taken
        mem.free_gpus = lambda mem=mem: mem.sent.setdefault("capacity", 0) or []
        clock = FakeClock()
        throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
        options = SubmitOptions(poll_interval=1, workers=1, detach=detach, parallelism="static", max_inflight=3)
        loop = AttemptLoop(study, expand(study), mem, throttle, options, clock=clock, sleep=clock.sleep)
        with ThreadPoolExecutor(1) as pool:
            loop.cycle(pool)
        assert len(mem.creates) == created
        assert ("capacity" in mem.sent) is not detach


def test_a_silent_controller_is_said_once_and_its_return_too(tmp_path):
    mem = MemoryScheduler()
    events: list[str] = []
    study, loop = make(tmp_path, mem, events)
    answers = [Unavailable("list: no answer"), Unavailable("list: no answer")]
    listing = mem.attempts

    def attempts(marks=True):
        if answers:
            raise answers.pop(0)
        return listing(marks)

    mem.attempts = attempts
    with ThreadPoolExecutor(1) as pool:
        loop.cycle(pool)  # two retries inside the throttle, then an answer
    assert events[0] == (
        "Memory controller: list: no answer; backing off and trying again (nothing is submitted "
        "twice: each send whose answer was lost is looked up first)"
    )
    assert events[1:] == ["Memory controller: answering again"] and len(mem.creates) == 3


def test_why_attempts_wait_past_the_grace_is_shown_in_the_schedulers_words(tmp_path):
    mem = MemoryScheduler()
    study, loop = make(tmp_path, mem)
    with ThreadPoolExecutor(1) as pool:
        loop.cycle(pool)
        a, b, c = loop.order
        mem.set(a, reason="QOSMaxGRESPerUser", waits_for_capacity=False, waits_for_limits=True)
        mem.set(b, reason="QOSMaxGRESPerUser", waits_for_capacity=False, waits_for_limits=True)
        loop.cycle(pool)
        assert loop.progress.blocked == ""  # within the grace period: not said yet
        loop.clock.now += loop.options.pending_grace + 1
        loop.cycle(pool)
    assert loop.progress.blocked == "QOSMaxGRESPerUser (2), Resources (1)" and loop.progress.stuck == 3
