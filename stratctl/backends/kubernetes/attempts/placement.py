"""The submit loop's queue fallback: each new attempt of a study that lists several queues
goes to the first with room (`queues.choose`), and the loop says where.

Once per cycle `observe` takes the study's queues as the watch last saw them and the
study's gangs still pending in each (sent, not yet counted in `status.allocated`); then
`place` chooses for each attempt about to be created, counting those placed before it.
A trial placed in another queue than the first is said in the live panel, with why
("research full (16/16 GPUs)"), and so is a return to the first queue. The counts of
attempts sent to each queue are kept for the study record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stratctl.run.queues import (
    Amounts,
    Move,
    Placement,
    Room,
    choose,
    gang_demand,
    moves,
    place,
    queue_of_job,
    room_of,
)
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.core.render import Renderer
    from stratctl.core.space import Trial


class Placer:
    """Chooses a queue for each new attempt; `queues()` gives the Queue objects by name."""

    def __init__(
        self,
        names: tuple[str, ...],
        queues: Callable[[], dict[str, dict[str, Any]]],
        gang: Amounts,
        event: Callable[[str], None],
    ):
        self.names = names
        self.queues = queues
        self.gang = gang  # the study's gang, for a pending job that does not say its own (a batch/v1 Job)
        self.event = event
        self.rooms: list[Room] = []
        self.placed: dict[str, int] = {}  # queue -> attempts sent there by this loop
        self.where: dict[str, str] = {}  # trial -> the queue of its latest attempt, as last seen or chosen
        self._last: Placement | None = None

    def observe(self, jobs: dict[str, dict[str, Any]], states: dict[str, TrialState]) -> None:
        """The rooms for this cycle: each queue as watched, less the study's pending gangs in it."""
        transit: dict[str, list[Amounts]] = {name: [] for name in self.names}
        for trial, job in jobs.items():
            queue = queue_of_job(job)
            if queue:
                self.where[trial] = queue
            if queue in transit and states.get(trial) is TrialState.PENDING:
                transit[queue].append(gang_demand([job]) or self.gang)
        self.rooms = self._rooms(transit)

    def place(self, trial: str, manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The manifests of the trial's next attempt, sent to the queue chosen for it."""
        gang = gang_demand(manifests) or self.gang
        if not self.rooms:
            self.rooms = self._rooms({})
        placement = choose(self.rooms, gang)
        self.rooms = [r.taking(gang) if r.name == placement.queue else r for r in self.rooms]
        self._tell(trial, placement)
        self.placed[placement.queue] = self.placed.get(placement.queue, 0) + 1
        self.where[trial] = placement.queue
        return place(manifests, placement.queue)

    def to_move(self, jobs: dict[str, dict[str, Any]], waited: list[str]) -> list[Move]:
        """Of the trials whose gang has waited past the grace (`waited`, in the study's
        order), those to take out of a full queue into one with room (`--move-waiting`):
        only jobs that have not started (no pod running)."""
        waiting = [
            (trial, queue_of_job(jobs[trial]), gang_demand([jobs[trial]]) or self.gang)
            for trial in waited
            if trial in jobs and not_started(jobs[trial])
        ]
        chosen = moves([(t, q, g) for t, q, g in waiting if q is not None and q in self.names], self.rooms)
        for move in chosen:  # the room it goes to is kept for it until it is created again
            gang = next(g for t, _, g in waiting if t == move.trial)
            self.rooms = [
                r.taking(gang) if r.name == move.target else r.releasing(gang) if r.name == move.source else r
                for r in self.rooms
            ]
        return chosen

    def _rooms(self, transit: dict[str, list[Amounts]]) -> list[Room]:
        objects = self.queues()
        if not objects:  # no queue could be read: the first queue, as with one queue
            return [Room(name) for name in self.names]
        return [room_of(name, objects.get(name), transit.get(name, ())) for name in self.names]

    def _tell(self, trial: str, placement: Placement) -> None:
        last, self._last = self._last, placement
        if placement.queue != self.names[0]:
            self.event(f"trial {trial} → queue {placement.queue}: {placement.reason}")
        elif last is not None and last.queue != self.names[0]:
            room = next(r for r in self.rooms if r.name == placement.queue)
            self.event(f"trial {trial} → queue {placement.queue}: room again ({room.usage()})")

    def counts(self) -> dict[str, int]:
        """Trials whose latest attempt is in each queue (as last seen or chosen)."""
        counts = {name: 0 for name in self.names}
        for queue in self.where.values():
            counts[queue] = counts.get(queue, 0) + 1
        return counts


def not_started(job: dict[str, Any]) -> bool:
    """No pod of the job runs yet (a Volcano Job's `running`, a batch/v1 Job's `ready`)."""
    status = job.get("status") or {}
    return not status.get("running") and not status.get("ready") and not status.get("succeeded")


class Placing:
    """A renderer whose attempts are placed: what the loop's recovery steps render with, so
    a preempted or lost trial's next attempt goes to the first queue with room too."""

    def __init__(self, renderer: Renderer, placer: Placer) -> None:
        self._renderer = renderer
        self._placer = placer

    def render(self, trial: Trial, attempt: int = 0, resume: bool = False) -> list[dict[str, Any]]:
        return self._placer.place(trial.name, self._renderer.render(trial, attempt=attempt, resume=resume))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._renderer, name)
