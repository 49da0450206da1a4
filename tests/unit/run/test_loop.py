"""The one submit loop (run/loop.py) every backend runs, over a scripted body and over the
Slurm/YARN attempt loop's in-memory scheduler, in virtual time: the deadline, the waits
between failed cycles, giving up after the outage timeout, verdicts, Ctrl-C."""

from __future__ import annotations

import re

import pytest

from stratctl.backends.batch.loop import AttemptLoop
from stratctl.core.space import expand
from stratctl.errors import Invalid, StillThrottled, Unavailable, Unreachable
from stratctl.run.loop import Loop, outage_wait
from stratctl.run.options import SubmitOptions
from stratctl.run.outage import Outage
from stratctl.run.policy import StaticPolicy
from stratctl.run.progress import Progress, Silent
from stratctl.run.throttle import Throttle
from tests.unit.backends.fakes import MemoryScheduler
from tests.unit.fakes import FakeClock, MaxRng, one_cycle
from tests.unit.run.test_attempt_seam import STUDY
from tests.unit.studies import load


class Body:
    """A backend's body whose cycles do what `script` says: True (over), False, or an error."""

    def __init__(self, clock: FakeClock, script: list):
        self.clock, self.script = clock, script
        self.progress = Progress(study="s", total=1)
        self.cycles: list[float] = []  # virtual time of each cycle
        self.stops: list[bool] = []

    def step(self) -> bool:
        self.cycles.append(self.clock())
        outcome = self.script.pop(0) if self.script else False
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def pause(self) -> None:
        self.clock.sleep(2.0)

    def left_behind(self) -> str:
        return "nothing was created"

    def stopped(self, interrupted: bool) -> None:
        self.stops.append(interrupted)


def run(script: list, timeout: float | None = None, patience: float = 60.0) -> tuple[Body, Progress | BaseException]:
    clock = FakeClock()
    body = Body(clock, script)
    loop = Loop(
        body,
        Outage(patience, clock=clock),
        Silent(),
        poll_interval=2.0,
        timeout=timeout,
        clock=clock,
        sleep=clock.sleep,
    )
    start = clock()
    try:
        outcome: Progress | BaseException = loop.run()
    except Exception as exc:  # what the command would end with
        outcome = exc
    body.cycles = [t - start for t in body.cycles]
    return body, outcome


def test_a_body_runs_until_its_cycle_says_the_run_is_over_and_is_stopped_once():
    body, progress = run([False, False, True])
    assert body.cycles == [0.0, 2.0, 4.0] and body.stops == [False]
    assert isinstance(progress, Progress) and not progress.timed_out and not progress.interrupted


def test_the_deadline_stops_the_run_between_cycles_trials_left_running():
    body, progress = run([], timeout=5.0)
    assert body.cycles == [0.0, 2.0, 4.0] and progress.timed_out and body.stops == [False]


def test_failed_cycles_wait_longer_each_time_and_an_answer_resets_the_waits():
    body, progress = run([Unavailable("no answer")] * 3 + [False, Unavailable("no answer"), True])
    # 2 s (the poll interval is longer than the first waits), 2, 4; a cycle went through; 2 again
    assert body.cycles == [0.0, 2.0, 4.0, 8.0, 10.0, 12.0]
    assert [outage_wait(n, 2.0) for n in (1, 2, 3, 4)] == [2.0, 2.0, 4.0, 8.0]


def test_a_controller_silent_past_the_outage_timeout_ends_the_run_saying_how_to_carry_on():
    body, error = run([Unavailable("connection refused")] * 100, patience=60.0)
    assert isinstance(error, Unreachable) and body.stops == []
    assert str(error) == (
        "no answer from the API server for 1m1s, giving up (last error: connection refused). Run the same "
        "command again once it is back: trials already submitted are recognised, never duplicated"
    )
    assert body.cycles == [0.0, 2.0, 4.0, 8.0, 16.0, 31.0, 61.0]  # waits 2, 2, 4, 8, 15, 30: 61 s is past 60


def test_a_verdict_ends_the_run_at_once_and_a_throttled_give_up_says_what_it_left():
    body, error = run([Invalid('namespaces "x" not found')])
    assert isinstance(error, Invalid) and body.cycles == [0.0]
    body, error = run([StillThrottled("refused for 25s: gave up")])
    assert isinstance(error, StillThrottled) and str(error) == "refused for 25s: gave up; nothing was created"


def test_ctrl_c_stops_the_run_and_the_body_hears_it():
    body, progress = run([False, KeyboardInterrupt()])
    assert progress.interrupted and body.stops == [True]


def test_a_slurm_or_yarn_controller_silent_past_the_outage_timeout_ends_the_submit(tmp_path):
    """The attempt loop runs in the same loop: it no longer waits forever for a controller
    that never answers (`--outage-timeout`), and says which controller it was."""
    study = load(tmp_path, STUDY)
    mem = MemoryScheduler()
    clock = FakeClock()
    events: list[str] = []

    def silent(marks=True):
        raise Unavailable("squeue: slurm_load_jobs error: Unable to contact slurm controller")

    mem.attempts = silent
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    loop = AttemptLoop(
        study,
        expand(study),
        mem,
        throttle,
        SubmitOptions(poll_interval=1, workers=1, outage_timeout=120),
        policy=StaticPolicy(3),
        clock=clock,
        sleep=clock.sleep,
    )
    loop.reporter.event = events.append
    start = clock()
    with pytest.raises(Unreachable) as raised:
        loop.run()
    assert re.match(r"no answer from Memory controller for 2m\d+s, giving up \(last error: squeue: ", str(raised.value))
    assert 120 <= clock() - start < 160 and mem.creates == []
    assert len([e for e in events if "backing off and trying again" in e]) == 1  # said once, not every cycle


def test_every_backends_loop_says_a_new_target_once_as_it_changes(tmp_path):
    """The decision is the shared loop's (Deciding): the Slurm/YARN loop says the target as
    the Kubernetes loop does, once per change, not once per cycle."""
    from concurrent.futures import ThreadPoolExecutor

    study = load(tmp_path, STUDY)
    mem, clock, events = MemoryScheduler(), FakeClock(), []
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    policy = StaticPolicy(2)
    loop = AttemptLoop(
        study,
        expand(study),
        mem,
        throttle,
        SubmitOptions(poll_interval=1, workers=1),
        policy=policy,
        clock=clock,
        sleep=clock.sleep,
    )
    loop.reporter.event = events.append
    with ThreadPoolExecutor(1) as pool:
        one_cycle(loop, pool)
        one_cycle(loop, pool)
        policy.cap = 3
        one_cycle(loop, pool)
    targets = [e for e in events if e.startswith("target in flight")]
    assert targets == [
        "target in flight 2: static cap 2, 4 gang(s) fit in free GPUs",
        "target in flight 3: static cap 3, 4 gang(s) fit in free GPUs",
    ]
    assert loop.progress.target == 3 and len(mem.creates) == 3
