"""Merged submissions in the shared cycle (core/merging.py says when): the first attempts
of the trials due go to the scheduler as one block (a Slurm job array), whose own throttle
keeps the study's trials in flight to the adaptive target, cycle after cycle.

- A block is sent when the decision admits at least one more trial and no earlier block
  still holds trials back: it carries every first attempt due (up to the scheduler's
  largest block), its throttle the room the decision leaves. Trials a block holds back
  are queued, not in flight: the policy sees them waiting, the scheduler keeps their turn.
- Each cycle the open block's throttle follows the target (less the study's trials in
  flight outside it), changed only when it moves: one write per change, not per trial.
- Next attempts (a failed trial's retry) are single jobs, admitted as without merging.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from stratctl.attempt import Attempt
from stratctl.core.space import Trial
from stratctl.errors import ClusterError
from stratctl.run.cycle import Capability
from stratctl.run.policy import Decision
from stratctl.run.throttle import Throttle


class Blocking(Protocol):
    """What a scheduler with blocks does besides the attempt seam (backends/batch/scheduler.py)."""

    def block_size(self, largest: int) -> int: ...
    def prepare_block(self, trials: list[Trial], throttle: int) -> Any: ...
    def create(self, prepared: Any) -> None: ...
    def find(self, prepared: Any) -> bool: ...
    def throttle(self, block: Attempt, tasks: int) -> None: ...


class Blocks(Capability):
    name = "merged submissions"
    needs = "merge"

    def __init__(
        self,
        scheduler: Blocking,
        throttle: Throttle,
        seen: Callable[[], dict[str, Attempt]],
        size: int,
        say: Callable[[str], None],
    ):
        self.scheduler, self.requests, self.seen, self.size, self.say = scheduler, throttle, seen, size, say
        self.room = 1  # trials the decision lets into flight now: a new block's throttle
        self.set: dict[str, int] = {}  # block -> the throttle last set
        self.unsent: tuple[Any, list[str]] | None = None  # a block whose send failed, and its trials
        self.retried = False  # it was sent before: looked up first

    def _open(self) -> dict[str, Attempt]:
        """Blocks still holding trials back -> one of their attempts (it names the block)."""
        return {a.block: a for a in self.seen().values() if a.queued}

    def order(self, waiting: list[str], decision: Decision) -> list[str]:
        """First attempts first, as one block (none while a block still holds trials back),
        then next attempts."""
        seen = self.seen()
        first = [n for n in waiting if n not in seen]
        again = [n for n in waiting if n in seen]
        if self._open() or not first:
            return again
        size = self.requests.call(lambda: self.scheduler.block_size(self.size))
        return first[:size] + again

    def admits(self, admit: int, waiting: list[str]) -> int:
        if admit <= 0:  # no room, or holding: no block either
            return 0
        seen = self.seen()
        first = sum(1 for n in waiting if n not in seen)
        return first + min(admit, len(waiting) - first)

    def decided(self, decision: Decision) -> None:
        """The open block's throttle follows the target, less the trials in flight outside it."""
        attempts = list(self.seen().values())
        flying = [a for a in attempts if a.state.in_flight and not a.queued]
        self.room = max(1, decision.target - len(flying))
        for block, attempt in self._open().items():
            outside = sum(1 for a in flying if a.block != block)
            tasks = max(1, decision.target - outside)
            if self.set.get(block) == tasks:
                continue
            try:
                self.requests.call(partial(self.scheduler.throttle, attempt, tasks), mutating=True)
            except ClusterError as exc:
                self.say(f"{block}: throttle not changed this cycle ({exc}); trying again")
                continue
            self.set[block] = tasks
            self.say(f"{block}: at most {tasks} of its trials at once")

    def send(self, trials: list[Trial]) -> tuple[Any, list[str]]:
        """One block of these trials' first attempts, sent exactly once (a send whose answer
        was lost is looked up before it is sent again), its throttle the room decided; the
        block and the trials it carries. A block whose send failed (the controller did not
        answer) is the one sent next, under its own name: it may have gone through."""
        if self.unsent is None:
            self.unsent = self.scheduler.prepare_block(trials, self.room), [t.name for t in trials]
        prepared, names = self.unsent
        sent: list[bool] = [True] if self.retried else []

        def once() -> None:
            if sent and self.scheduler.find(prepared):
                return
            sent.append(True)
            self.scheduler.create(prepared)

        self.retried = True
        self.requests.call(once, mutating=True)
        self.unsent, self.retried = None, False
        self.set[prepared.trial.removeprefix("@")] = self.room
        return prepared, names
