"""The shared attempt loop and `status` over any scheduler behind the seam
(backends/batch/scheduler.py), here the in-memory one of tests/unit/backends/fakes.py: GPU time in
`status`, `--detach`, a silent controller, why attempts wait. What every scheduler must do
for them (exactly once, failures, preemptions, drain and resume) is the contract suite's,
tests/unit/backends/test_scheduler_contract.py, run against each backend's fake."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from stratctl.backends.batch.loop import AttemptLoop
from stratctl.backends.batch.status import snapshot
from stratctl.core.space import expand
from stratctl.errors import Unavailable
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import StaticPolicy
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState
from tests.unit.backends.fakes import MemoryScheduler
from tests.unit.fakes import FakeClock, MaxRng, one_cycle
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


def test_status_counts_gpu_time_of_any_scheduler(tmp_path):
    mem = MemoryScheduler()
    study, loop = make(tmp_path, mem)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(loop, pool)
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
            one_cycle(loop, pool)
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
        one_cycle(loop, pool)  # two retries inside the throttle, then an answer
    assert events[0] == (
        "Memory controller: list: no answer; backing off and trying again (nothing is submitted "
        "twice: each send whose answer was lost is looked up first)"
    )
    # the shared loop's decision, said once as on every backend, then the controller's return
    assert events[1:] == [
        "target in flight 3: static cap 3, 4 gang(s) fit in free GPUs",
        "Memory controller: answering again",
    ]
    assert len(mem.creates) == 3


def test_why_attempts_wait_past_the_grace_is_shown_in_the_schedulers_words(tmp_path):
    mem = MemoryScheduler()
    study, loop = make(tmp_path, mem)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(loop, pool)
        a, b, c = loop.order
        mem.set(a, reason="QOSMaxGRESPerUser", waits_for_capacity=False, waits_for_limits=True)
        mem.set(b, reason="QOSMaxGRESPerUser", waits_for_capacity=False, waits_for_limits=True)
        one_cycle(loop, pool)
        assert loop.progress.blocked == ""  # within the grace period: not said yet
        loop.clock.now += loop.options.pending_grace + 1
        one_cycle(loop, pool)
    assert loop.progress.blocked == "QOSMaxGRESPerUser (2), Resources (1)" and loop.progress.stuck == 3
