"""Queue fallback: which of the study's queues a new trial goes to, decided purely.

A study may list queues in order (`queue: [research, research-overflow]`). A trial goes to
the first queue with room for its gang; when none has room it goes to the last, and waits
there. Room is read from the Queue (`spec.capability` less `status.allocated`) less the
study's own gangs sent there that Volcano has not counted yet (their jobs still pending),
for every resource the capability names and the gang asks for. A queue without a
capability always has room; a queue that is missing or not Open has none.

A trial is rendered for the first queue (its spec hash is that rendering's); `place`
writes the chosen queue into the manifests afterwards, so the hash does not depend on the
choice, and a rerun adopts a trial wherever an earlier run placed it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from stratctl import labels
from stratctl.core.quantity import GPU, format_quantity, parse

Amounts = dict[str, Decimal]


@dataclass(frozen=True)
class Room:
    """One queue as the choice sees it."""

    name: str
    capability: Amounts | None = None  # None: uncapped
    used: Amounts = field(default_factory=dict)  # allocated, plus the study's gangs in transit
    open: bool = True  # False: missing, Closed or Closing

    def fits(self, gang: Amounts) -> bool:
        if not self.open:
            return False
        if self.capability is None:
            return True
        return all(
            self.used.get(r, Decimal(0)) + need <= self.capability[r]
            for r, need in gang.items()
            if need > 0 and r in self.capability
        )

    def taking(self, gang: Amounts) -> Room:
        """The room once `gang` is sent here."""
        used = dict(self.used)
        for r, need in gang.items():
            used[r] = used.get(r, Decimal(0)) + need
        return Room(self.name, self.capability, used, self.open)

    def releasing(self, gang: Amounts) -> Room:
        """The room without `gang` (one of the study's gangs counted in it)."""
        used = dict(self.used)
        for r, need in gang.items():
            used[r] = max(Decimal(0), used.get(r, Decimal(0)) - need)
        return Room(self.name, self.capability, used, self.open)

    def why_full(self, gang: Amounts) -> str:
        """Why the gang does not fit, in a few words ("research full (16/16 GPUs)")."""
        if not self.open:
            return f"{self.name} not open"
        short = [
            r
            for r, need in gang.items()
            if need > 0
            and self.capability
            and r in self.capability
            and self.used.get(r, Decimal(0)) + need > self.capability[r]
        ]
        resource = GPU if GPU in short else (short[0] if short else GPU)
        return f"{self.name} full ({self.usage(resource)})"

    def usage(self, resource: str = GPU) -> str:
        cap = (self.capability or {}).get(resource)
        used = self.used.get(resource, Decimal(0))
        unit = " GPUs" if resource == GPU else f" {resource}"
        if cap is None:
            return f"{_shown(used)}{unit}, uncapped"
        over = f", {_shown(used - cap)} more waiting" if used > cap else ""  # gangs asking beyond the capability
        return f"{_shown(min(used, cap))}/{_shown(cap)}{unit}{over}"


@dataclass(frozen=True)
class Placement:
    queue: str
    reason: str  # why not an earlier queue ("" for the first queue)
    fallback: bool = False  # no queue had room: it waits in the last one


def choose(rooms: list[Room], gang: Amounts) -> Placement:
    """The first queue with room for the gang, else the last (the gang waits there)."""
    full: list[str] = []
    for room in rooms:
        if room.fits(gang):
            return Placement(room.name, ", ".join(full))
        full.append(room.why_full(gang))
    return Placement(rooms[-1].name, ", ".join(full) + "; waits in the last queue", fallback=True)


def place_all(rooms: list[Room], gangs: list[Amounts]) -> list[Placement]:
    """`choose` for several new trials in a row, each counting those placed before it."""
    rooms = list(rooms)
    placements = []
    for gang in gangs:
        placement = choose(rooms, gang)
        rooms = [r.taking(gang) if r.name == placement.queue else r for r in rooms]
        placements.append(placement)
    return placements


@dataclass(frozen=True)
class Move:
    trial: str
    source: str  # the queue it waits in
    target: str  # the queue with room for it now
    reason: str  # why it leaves ("research full (16/16 GPUs)")


def moves(waiting: list[tuple[str, str, Amounts]], rooms: list[Room]) -> list[Move]:
    """Gangs that have not started (trial, queue, gang), waiting in a queue without room
    for them, that another of the study's queues has room for now, the earlier queues
    first; each move counts those before it. A gang its own queue has room for (once it is
    not counted there) is about to start: it stays."""
    rooms = list(rooms)
    out = []
    for trial, queue, gang in waiting:
        own = next((r for r in rooms if r.name == queue), None)
        if own is None:
            continue
        without = own.releasing(gang)
        if without.fits(gang):
            continue
        target = next((r for r in rooms if r.name != queue and r.fits(gang)), None)
        if target is None:
            continue
        rooms = [without if r.name == queue else r.taking(gang) if r.name == target.name else r for r in rooms]
        out.append(Move(trial, queue, target.name, without.why_full(gang)))
    return out


def room_of(name: str, queue: dict[str, Any] | None, transit: Iterable[Amounts] = ()) -> Room:
    """A Room from a Queue object (None: missing) and the study's gangs in transit to it."""
    if queue is None:
        return Room(name, open=False)
    state = (queue.get("status") or {}).get("state") or "Open"
    raw = (queue.get("spec") or {}).get("capability") or {}
    capability = {r: v for r, v in ((r, parse(v)) for r, v in raw.items()) if v is not None} or None
    used = amounts((queue.get("status") or {}).get("allocated") or {})
    for gang in transit:
        for r, need in gang.items():
            used[r] = used.get(r, Decimal(0)) + need
    return Room(name, capability, used, state == "Open")


def gang_demand(manifests: list[dict[str, Any]]) -> Amounts:
    """What one attempt's gang needs to start: its PodGroup's minResources when it has one,
    else the requests (or limits) of each Volcano task's minAvailable pods."""
    for doc in manifests:
        if doc.get("kind") == "PodGroup" and (doc.get("spec") or {}).get("minResources"):
            return amounts(doc["spec"]["minResources"])
    total: Amounts = {}
    for doc in manifests:
        if doc.get("kind") != "Job" or not str(doc.get("apiVersion", "")).startswith("batch.volcano.sh/"):
            continue
        for task in (doc.get("spec") or {}).get("tasks") or []:
            pods = task.get("minAvailable", task.get("replicas", 1))
            for container in ((task.get("template") or {}).get("spec") or {}).get("containers") or []:
                res = container.get("resources") or {}
                for r, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
                    amount = parse(v)
                    if amount is not None:
                        total[r] = total.get(r, Decimal(0)) + amount * pods
    return total


def place(manifests: list[dict[str, Any]], queue: str) -> list[dict[str, Any]]:
    """The manifests sent to `queue`: every object naming a queue names this one, and each
    says so in an annotation (a batch/v1 Job has no queue of its own). The spec-hash label
    is left as rendered, so it does not depend on the queue."""
    placed = []
    for doc in manifests:
        meta = doc.get("metadata") or {}
        doc = {**doc, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), labels.QUEUE: queue}}}
        if isinstance(doc.get("spec"), dict) and "queue" in doc["spec"]:
            doc["spec"] = {**doc["spec"], "queue": queue}
        placed.append(doc)
    return placed


def queue_of_job(job: dict[str, Any]) -> str | None:
    """The queue a trial's job went to: stratctl's annotation, else the Volcano Job's own."""
    meta = job.get("metadata") or {}
    return (meta.get("annotations") or {}).get(labels.QUEUE) or ((job.get("spec") or {}).get("queue")) or None


def amounts(raw: dict[str, Any]) -> Amounts:
    """Quantities by resource, parsed (those that do not parse left out)."""
    return {r: v for r, v in ((r, parse(v)) for r, v in raw.items()) if v is not None}


def _shown(value: Decimal) -> str:
    return format_quantity(value)
