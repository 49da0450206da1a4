"""The submit loop every backend runs: cycles until every trial has ended, the loop is
detached or timed out, or the user interrupts it.

A backend hands the loop its `Body`: one cycle, `step` (observe, recover, decide, admit:
True when the run is over), the pause between two cycles, what the run leaves behind when it gives
up, and how it stops. The loop owns what every backend shares:

- the deadline of `--timeout` (the trials are left running: `progress.timed_out`);
- a controller that stops answering is a pause, not a verdict: a cycle that fails on a
  transient error (`Unavailable`, `Throttled`) is tried again after a growing wait
  (`outage_wait`), and the loop gives up (`Unreachable`, exit 3) once the controller has
  been silent for the outage timeout. The outage is told by every request when the
  backend's transport keeps its account (Kubernetes), else here, by whole cycles;
- a verdict (RBAC, a missing namespace, `StillThrottled`) ends the run at once, with one
  line that says what it left and how to carry on: run the same command again, trials
  already submitted are recognised, never duplicated;
- Ctrl-C stops the run (`progress.interrupted`); the trials keep running;
- the study's mark (run/driver.py), when the backend took one: renewed at the start of
  every cycle; a loop asked to hand the study over (`submit --take-over` elsewhere) does so
  there and ends (`progress.handed_over`), and a loop that ends lets the mark go.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from stratctl.errors import ClusterError, StillThrottled, Unreachable, transient
from stratctl.run.driver import Driver
from stratctl.run.outage import Outage
from stratctl.run.policy import Decision, Observed, Policy
from stratctl.run.progress import Progress, Reporter

# seconds between cycles while the controller does not answer: the n-th failed cycle in a
# row waits the n-th (the poll interval, when longer); each request was retried already
OUTAGE_BACKOFF = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
AGAIN = "Run the same command again once it is back: trials already submitted are recognised, never duplicated"


def outage_wait(failed: int, poll_interval: float) -> float:
    """The wait after the `failed`-th failed cycle in a row (1, 2, ...)."""
    return max(poll_interval, OUTAGE_BACKOFF[min(failed, len(OUTAGE_BACKOFF)) - 1])


class Body(Protocol):
    """What one backend does inside the shared loop."""

    progress: Progress

    def step(self) -> bool:
        """One cycle: observe, recover, decide, admit. True when the run is over."""
        ...

    def pause(self) -> None:
        """Until the next cycle."""
        ...

    def left_behind(self) -> str:
        """What a run that gives up leaves, said to the user."""
        ...

    def stopped(self, interrupted: bool) -> None:
        """The run ends (an interrupt included): what the backend records of it."""
        ...


class Loop:
    """Runs a `Body` to the end of its run."""

    def __init__(
        self,
        body: Body,
        outage: Outage,
        reporter: Reporter,
        poll_interval: float,
        timeout: float | None = None,
        told: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        driver: Driver | None = None,
    ):
        self.body, self.outage, self.reporter = body, outage, reporter
        self.driver = driver  # the study's mark (run/driver.py), taken before `run`
        self.poll_interval, self.timeout = poll_interval, timeout
        self.told = told  # whether the loop tells the outage (the backend's requests do not)
        self.clock, self.sleep = clock, sleep

    def _timed_out(self, deadline: float | None) -> bool:
        progress = self.body.progress
        progress.timed_out = deadline is not None and self.clock() >= deadline
        return progress.timed_out

    def _failed(self, exc: ClusterError, started: float, failed: int) -> None:
        """A cycle that failed: raise a verdict, else wait before the next try."""
        if not transient(exc):
            raise exc  # a verdict (RBAC, a missing namespace), or the outage outlasted the timeout
        if self.told:
            error = self.outage.failed(exc, started)
            if not transient(error):
                raise error from None
        self.reporter.update(self.body.progress)
        self.sleep(outage_wait(failed, self.poll_interval))

    def _cycles(self) -> None:
        failed = 0  # cycles failed in a row
        deadline = None if self.timeout is None else self.clock() + self.timeout
        while not self._timed_out(deadline):
            started = self.clock()
            try:
                if self.driver is not None:
                    holder = self.driver.renew()
                    if holder is not None:  # handed over, or lost while it could not renew: not this loop's now
                        self.body.progress.handed_over = holder
                        return
                over = self.body.step()
            except ClusterError as exc:
                failed += 1
                self._failed(exc, started, failed)
                continue
            failed = 0
            if self.told:
                self.outage.answered()
            if over:
                return
            self.body.pause()

    def run(self) -> Progress:
        progress = self.body.progress
        try:
            self._cycles()
        except KeyboardInterrupt:
            progress.interrupted = True
        except Unreachable as exc:
            self.reporter.update(progress)
            raise Unreachable(f"{exc}. {AGAIN}", status=exc.status, reason=exc.reason) from None
        except StillThrottled as exc:
            self.reporter.update(progress)
            raise StillThrottled(f"{exc}; {self.body.left_behind()}", status=exc.status, reason=exc.reason) from None
        self.body.stopped(progress.interrupted)
        if self.driver is not None and not progress.handed_over:
            try:
                self.driver.release()
            except ClusterError:
                pass  # the mark expires on its own
        self.reporter.update(progress)
        return progress


class Deciding:
    """The policy asked once a cycle, by every backend's loop: a new target (or a hold) is
    said once, as it changes (`target in flight 8: …`), and the progress shows it."""

    def __init__(self, say: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.say, self.clock = say, clock
        self.last: Decision | None = None

    def decide(self, policy: Policy, observed: Observed, progress: Progress) -> tuple[Decision, bool]:
        """The decision, and whether its target or hold changed since the last one."""
        decision = policy.decide(observed, self.clock())
        last = self.last
        changed = last is None or (decision.target, decision.hold) != (last.target, last.hold)
        if changed:
            self.say(f"target in flight {decision.target}{' (holding)' if decision.hold else ''}: {decision.reason}")
        self.last = decision
        progress.target, progress.hold, progress.reason = decision.target, decision.hold, decision.reason
        progress.wanted = decision.admit(observed)
        return decision, changed
