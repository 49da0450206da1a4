"""Queue fallback on a batch scheduler that moves an application between queues (YARN):
an attempt whose trial has not started, waiting in one of the study's queues past the bound, moves to the next
queue of the study's list, in place (the same application: exactly once is untouched).

`due` decides purely which attempts move where, from how long each has waited in the
queue it is in; `QueueMoves` is the loop's capability (run/cycle.py) that asks it once a
cycle and makes the moves through the scheduler (`Moving.move`). The bound is the loop's
`pending_grace`, the same as Kubernetes' `--move-waiting`. An attempt moves only while the
next queue has room for its GPUs (its headroom, read once a cycle with moves due, less
what the moves before it took): into a queue as full as its own it would only wait there
instead, so it keeps its place. Slurm needs none of it: a
study's partitions go to Slurm whole (backends/slurm/script.py's `partitions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from stratctl.attempt import Attempt
from stratctl.backends.batch.scheduler import Moving
from stratctl.errors import ClusterError
from stratctl.run.cycle import Capability
from stratctl.run.policy import Decision
from stratctl.trialstate import TrialState


@dataclass(frozen=True)
class Move:
    trial: str
    source: str
    target: str
    waited: float  # seconds it waited in `source`


def leaf(queue: str) -> str:
    """A queue's own name (`root.research` → `research`): the RM may report either."""
    return queue.rsplit(".", 1)[-1]


def due(waiting: Mapping[str, tuple[str, float]], queues: Sequence[str], bound: float) -> list[Move]:
    """Of the attempts waiting to start (trial → (its queue, seconds it has waited there)),
    those past `bound` in a queue of the study's list that is not the last: each to the
    next queue of the list. One in a queue not listed (moved by someone else) stays."""
    names = [leaf(q) for q in queues]
    moves = []
    for trial, (queue, waited) in waiting.items():
        here = leaf(queue)
        if waited > bound and here in names and names.index(here) + 1 < len(names):
            moves.append(Move(trial, here, queues[names.index(here) + 1], waited))
    return moves


def unstarted(attempt: Attempt) -> bool:
    """Its trial has not started: the application waits for its AM (ACCEPTED) or its AM for
    the gang's containers (a queue full of GPUs starts the AM, which asks no GPU, and the
    gang waits); not held back by drain (SUSPENDED) or by its block."""
    return attempt.state is TrialState.PENDING and not attempt.queued


class QueueMoves(Capability):
    """Each cycle, after the decision: the attempts past the bound in a queue of the study's
    list move to the next (`due`), each said as an event."""

    name = "queue fallback"
    needs = "queue"

    def __init__(
        self,
        scheduler: Moving,
        seen: Callable[[], Mapping[str, Attempt]],
        since: Callable[[], Mapping[str, float]],
        bound: float,
        clock: Callable[[], float],
        say: Callable[[str], None],
        gpus: Callable[[str], int] = lambda trial: 0,
    ):
        self.scheduler, self.seen, self.since, self.bound = scheduler, seen, since, bound
        self.clock, self.say, self.gpus = clock, say, gpus
        self.arrived: dict[str, tuple[str, float]] = {}  # trial -> (the job moved, when it arrived)
        self.kept: set[str] = set()  # trials kept where they wait, the next queue without room: said once

    def decided(self, decision: Decision) -> None:
        now, seen, since = self.clock(), self.seen(), self.since()
        waiting = {}
        for trial, attempt in seen.items():
            if trial not in since or not unstarted(attempt) or not attempt.queue:
                continue
            moved = self.arrived.get(trial)
            start = max(since[trial], moved[1]) if moved and moved[0] == attempt.job else since[trial]
            waiting[trial] = (attempt.queue, now - start)
        rooms: dict[str, int | None] = {}  # GPUs each target may still take, read once a cycle
        for move in due(waiting, self.scheduler.queues, self.bound):
            attempt = seen[move.trial]
            if move.target not in rooms:
                rooms[move.target] = self._room(move.target)
            room, need = rooms[move.target], self.gpus(move.trial)
            if room is not None and need > room:  # it would wait there too: it keeps its place here
                if move.trial not in self.kept:
                    self.kept.add(move.trial)
                    self.say(
                        f"trial {move.trial}: waits in queue {move.source}: queue {move.target} has room for "
                        f"{room} GPU{'s' if room != 1 else ''}, it needs {need}"
                    )
                continue
            try:
                self.scheduler.move(attempt, move.target)
            except ClusterError as exc:  # it started meanwhile, or the target refused it: it waits where it is
                self.say(f"trial {move.trial}: not moved to queue {move.target} ({exc})")
                self.arrived[move.trial] = (attempt.job, now)  # asked again only after another bound
                continue
            self.arrived[move.trial] = (attempt.job, now)
            self.kept.discard(move.trial)
            if room is not None:
                rooms[move.target] = room - need
            self.say(
                f"trial {move.trial} moved: queue {move.source} → {move.target}, "
                f"it had waited {move.waited:.0f}s without starting"
            )

    def _room(self, queue: str) -> int | None:
        """GPUs the queue may still take (None: the scheduler does not say, or did not answer)."""
        try:
            return self.scheduler.room(queue)
        except ClusterError:
            return None
