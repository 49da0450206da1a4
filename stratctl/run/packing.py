"""Which waiting trials to admit when the study's trials differ in shape (gang size or
GPUs per pod): a pure function of the free GPUs per node and the waiting trials.

The rule, every cycle:

- **fit first, largest first (best-fit decreasing).** The waiting trials are placed into
  the free GPUs (per node, after the pods already waiting for a node) largest shape
  first, each pod on the node with the least room that still takes it, as a bin-packing
  scheduler places them. The trials that fit are admitted first. When a block large
  enough for a big trial is free, the big trial takes it; the small ones fill the holes
  left. When the free GPUs are fragmented (no node holds a big trial's pod), the big
  trials do not fit and the small ones that do are admitted: **small first while GPUs
  are fragmented**, large when a block frees. No gang is created that would sit
  half-placed or wait in Volcano's queue while GPUs it could not use stay idle.
- **queued ahead.** Beyond those that fit, the policy may keep a few gangs queued
  (`queue_ahead`) so freed GPUs are taken without a round trip. While the GPUs are
  fragmented these are the largest waiting trials: the holes are filled by the trials
  that fit them already, and a queued large gang takes a whole node the moment one
  frees, before small gangs (anyone's) break it up again; otherwise in study order.
- **aging: large trials are not starved.** A trial is *passed over* when a trial after it
  in the study's order is admitted while it waits. Once one has been passed over for
  `aging` seconds (the oldest such first), it is *reserved*: it is admitted first (queued
  if it does not fit yet), and no other trial of the study is admitted until it fits
  with them, so the GPUs the study's own trials release add up to its block. Its wait is
  therefore bounded by `aging` plus the time the study's running trials take to free a
  block, whatever the mix of shapes.

- **network topology.** For a study whose gangs must stay under one switch (hard network
  topology), each gang is placed inside one allowed HyperNode (`domains`, the node sets
  the signals read from the cluster's HyperNodes), the fullest one that still takes it.

`pack` decides; the submit loop (controller) keeps the passed-over times and acts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from stratctl.trialstate import TrialState


@dataclass(frozen=True)
class Candidate:
    name: str
    shape: tuple[int, ...]  # GPUs of each pod of the trial's gang


@dataclass(frozen=True)
class Packing:
    order: list[str]  # the waiting trials to admit, in this order (at most fit + ahead of them)
    fit: int  # how many of the first in `order` fit the free GPUs now, together
    reserved: str | None = None  # a passed-over trial holding the study's other admissions
    fragmented: bool = False  # the largest waiting shape fits nowhere although GPUs are free


def gangs_fit(free: Mapping[str, int], shape: Sequence[int], limit: int = 10_000) -> int:
    """How many whole gangs of `shape` (GPUs per pod) the free GPUs could place.

    Places pods largest first, each on the node with the least room that still takes it
    (best fit), which is what a bin-packing scheduler does; stops at the first gang that
    does not fit whole. Every backend counts whole gangs this way: Kubernetes over its
    nodes' free GPUs (capacity.py, topology.py), Slurm and YARN over theirs (backends/batch/trials.py).
    """
    pods = sorted((g for g in shape if g > 0), reverse=True)
    if not pods:
        return limit  # a gang that needs no GPU is never blocked by GPUs
    room = sorted(v for v in free.values() if v > 0)
    gangs = 0
    while gangs < limit:
        trial = list(room)
        for need in pods:
            fits = [i for i, r in enumerate(trial) if r >= need]
            if not fits:
                return gangs
            best = min(fits, key=lambda i: trial[i])
            trial[best] -= need
        room = sorted(r for r in trial if r > 0)
        gangs += 1
    return gangs


def place(
    room: dict[str, int], shape: Sequence[int], domains: Sequence[frozenset[str]] | None = None
) -> dict[str, int] | None:
    """The room left once a gang of `shape` is placed (largest pod first, best fit), or
    None when it does not fit whole; with `domains`, inside one of them (the one with the
    least free GPUs that takes it)."""
    if domains is not None:
        best = None
        for domain in domains:
            inside = {n: r for n, r in room.items() if n in domain}
            after = _place(inside, shape)
            if after is not None and (best is None or sum(inside.values()) < best[0]):
                best = (sum(inside.values()), after)
        return None if best is None else {**room, **best[1]}
    return _place(room, shape)


def _place(room: dict[str, int], shape: Sequence[int]) -> dict[str, int] | None:
    left = dict(room)
    for need in sorted((g for g in shape if g > 0), reverse=True):
        fits = [n for n, r in left.items() if r >= need]
        if not fits:
            return None
        best = min(fits, key=lambda n: (left[n], n))
        left[best] -= need
    return left


def _size(shape: tuple[int, ...]) -> tuple[int, int, int]:
    return sum(shape), max(shape, default=0), len(shape)


def pack(
    waiting: Sequence[Candidate],
    free: dict[str, int],
    passed: dict[str, float],
    now: float,
    aging: float,
    ahead: int,
    domains: Sequence[frozenset[str]] | None = None,
) -> Packing:
    """The admission order for `waiting` (in study order); `passed`: trial → when it was
    first passed over; `domains`: the node sets a gang must stay inside (hard topology)."""
    if not waiting:
        return Packing([], 0)
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for c in waiting:
        by_shape.setdefault(c.shape, []).append(c.name)
    shapes = sorted(by_shape, key=_size, reverse=True)
    fragmented = sum(free.values()) > 0 and place(free, shapes[0], domains) is None
    room = dict(free)
    fitted: list[str] = []
    position = {c.name: i for i, c in enumerate(waiting)}
    aged = [n for n, since in passed.items() if n in position and now - since >= aging]
    reserved = min(aged, key=lambda n: (passed[n], position[n])) if aged else None
    if reserved is not None:
        shape = waiting[position[reserved]].shape
        after = place(room, shape, domains)
        if after is None:  # it waits for a block: nothing else of the study goes ahead of it
            return Packing([reserved], 0, reserved, fragmented)
        fitted.append(reserved)
        room = after
    for shape in shapes:
        for name in by_shape[shape]:
            if name == reserved:
                continue
            after = place(room, shape, domains)
            if after is None:
                break  # the other trials of this shape do not fit either
            fitted.append(name)
            room = after
    taken = set(fitted)
    rest = [c for c in waiting if c.name not in taken]
    if fragmented:  # the next block that frees goes to the largest
        rest.sort(key=lambda c: (tuple(-x for x in _size(c.shape)), position[c.name]))
    return Packing(fitted + [c.name for c in rest[:ahead]], len(fitted), reserved, fragmented)


def passed_over(waiting: Sequence[str], admitted: set[str], passed: dict[str, float], now: float) -> dict[str, float]:
    """The passed-over times after a cycle: a waiting trial not admitted, placed before an
    admitted one in study order, is passed over from now (kept if it was already); trials
    no longer waiting are forgotten."""
    present = set(waiting)
    still = {n: since for n, since in passed.items() if n in present and n not in admitted}
    if not admitted:
        return still
    last = max(i for i, n in enumerate(waiting) if n in admitted)
    for name in waiting[:last]:
        if name not in admitted:
            still.setdefault(name, now)
    return still


class Packer:
    """Packing from one cycle to the next: the trials passed over and since when, and the
    trial reserved once it has been passed over for the aging limit (it keeps the study's
    other trials back until it runs). `say` is told when a trial is reserved or released."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], aging: float, say: Callable[[str], None]):
        self.shapes, self.aging, self.say = shapes, aging, say
        self.passed: dict[str, float] = {}
        self.reserved: str | None = None

    def pack(
        self,
        states: Mapping[str, TrialState],
        waiting: Callable[[], list[str]],
        free: dict[str, int],
        now: float,
        queue_ahead: int,
        domains: list[frozenset[str]] | None = None,
    ) -> Packing:
        """Which waiting trials to admit (`pack`): `states` are the trials' states, `waiting`
        lists those waiting to be created in the study's order."""
        reserved = self.reserved
        if reserved is not None and states.get(reserved) is TrialState.PENDING:
            return Packing([], 0, reserved)  # created, not started yet: nothing goes ahead of it
        if reserved is not None and states.get(reserved) is not TrialState.WAITING:
            self.say(f"trial {reserved} started: admitting trials of every shape again")
            self.reserved = reserved = None
        candidates = [Candidate(n, self.shapes[n]) for n in waiting()]
        packing = pack(candidates, free, self.passed, now, self.aging, queue_ahead, domains)
        if packing.reserved is not None and packing.reserved != reserved:
            gpus = sum(self.shapes[packing.reserved])
            waited = now - self.passed[packing.reserved]
            self.say(
                f"trial {packing.reserved} ({gpus} GPUs) passed over by smaller trials for "
                f"{waited:.0f}s: admitting it first, the study's other trials wait until it runs"
            )
            self.reserved = packing.reserved
        return packing

    def admitted(self, waiting: Sequence[str], admitted: set[str], now: float) -> None:
        """After a cycle's creates: who was passed over (`passed_over`)."""
        self.passed = passed_over(waiting, admitted, self.passed, now)
