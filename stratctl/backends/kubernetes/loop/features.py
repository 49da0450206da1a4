"""What only the Kubernetes backend adds to the shared cycle (run/cycle.py), each a
`Capability` the cycle asks at its place: the salvage of jobs the Volcano job controller
lost, the closed-loop search, the etcd breaker's drain, queue fallback (`--move-waiting`),
packing trials of different shapes into the free GPUs, and `cleanup: delete`.

Each reads the Kubernetes loop's view of the cycle (`LoopView`, view.py, which the
controller's `Submitter` is: the trials' latest jobs, every job of the study, the record, the
watched pods and PodGroups) when it is asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, PODGROUP
from stratctl.backends.kubernetes.loop.salvage import Salvage
from stratctl.backends.kubernetes.loop.searching import Searching
from stratctl.backends.kubernetes.loop.shedding import Shedding
from stratctl.backends.kubernetes.objects.record import MOVED_KEY
from stratctl.errors import NotFound
from stratctl.run.cycle import Capability, States
from stratctl.run.packing import Packer, Packing
from stratctl.run.policy import AdaptiveConfig, Decision, Observed

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.loop.view import LoopView


class Salvaging(Capability):
    """A trial whose Volcano Job lost its pods (or PodGroup) comes back as its next attempt
    (salvage.py)."""

    name = "salvage"
    needs = "workload"

    def __init__(self, loop: LoopView, salvage: Salvage):
        self.loop, self.salvage = loop, salvage

    def recover(self, states: States) -> States:
        loop = self.loop
        return self.salvage.step(states, loop.latest, loop.every_job, loop.record.held, *loop.mirrored())


class Search(Capability):
    """The closed-loop search (searching.py): rebuilt from the cluster before the first
    cycle, told the trials that ended, its pruner and storage mirror run, new trials asked
    for as the policy admits them."""

    name = "closed-loop search"
    needs = "closed_loop"

    def __init__(self, loop: LoopView, searching: Searching):
        self.loop, self.searching = loop, searching

    def begin(self) -> None:
        if not self.searching.search.started:
            jobs = self.loop.listed()
            self.searching.rebuild(self.loop.merged.expand(jobs) if self.loop.merged is not None else jobs)

    def recover(self, states: States) -> States:
        loop, searching = self.loop, self.searching
        pods = loop.mirrored()[0]  # the loop's watch of pods holds most results already
        searching.tell(states, loop.latest, pods)
        if loop.study.pruner is not None:
            searching.prune(states, loop.latest, pods)
        if loop.storage is not None:
            searching.mirror(loop.storage)
        return states

    def unasked(self, decision: Decision) -> int:
        # while backfilling, only trials known to end in time go in: none of the unasked
        return self.searching.search.remaining if decision.backfill is None else 0

    def ask(self, n: int) -> list[str]:
        return self.searching.ask(n)


class BreakerDrain(Capability):
    """The etcd breaker's drain (shedding.py): it may suspend the study's trials, or let
    them resume; the policy sees the study drained while the breaker holds it."""

    name = "breaker drain"
    needs = "throttle.on_breaker"

    def __init__(self, loop: LoopView, shedding: Shedding):
        self.loop, self.shedding = loop, shedding

    def pressure(self, observed: Observed, states: States) -> Observed:
        keeper = self.loop.keeper
        observed = self.shedding.step(observed, keeper.cm)
        keeper.change(breaker=self.shedding.reason, breaker_at=self.shedding.at)
        self.loop.progress.breaker = self.shedding.panel()
        return observed


class Packed(Capability):
    """Trials of different shapes, admitted by packing them into the free GPUs
    (run/packing.py): those that fit first, a passed-over trial's turn kept by aging."""

    name = "packing"
    needs = "throttle.aging"

    def __init__(self, loop: LoopView, packer: Packer):
        self.loop, self.packer = loop, packer
        self.packing: Packing | None = None

    def pressure(self, observed: Observed, states: States) -> Observed:
        loop = self.loop
        capacity = loop.reading.capacity
        if capacity is None or capacity.free_after is None:
            return observed
        config = getattr(loop.policy, "config", loop.policy)
        ahead = getattr(config, "queue_ahead", AdaptiveConfig.queue_ahead)
        self.packing = self.packer.pack(
            states, lambda: loop.waiting(states), capacity.free_after, loop.clock(), ahead, capacity.domains
        )
        loop.progress.gangs_fit = self.packing.fit
        return replace(observed, gangs_fit=self.packing.fit)

    def order(self, waiting: list[str], decision: Decision) -> list[str]:
        if self.packing is None:
            return waiting
        present = set(waiting)
        return [n for n in self.packing.order if n in present]

    def admitted(self, listed: Sequence[str], submitted: set[str]) -> None:
        self.packer.admitted(listed, submitted, self.loop.clock())


class QueueMoves(Capability):
    """`--move-waiting`: delete the job of a trial whose gang has waited past the grace in a
    full queue without starting, when another of the study's queues has room; the trial
    waits again and its next create goes to the queue with room (the same name and spec
    hash: still exactly once)."""

    name = "--move-waiting"
    needs = "--move-waiting"

    def __init__(self, loop: LoopView):
        self.loop = loop
        self.moved: set[str] = set()  # uids of jobs deleted to move their trial to another queue

    def decided(self, decision: Decision) -> None:
        loop = self.loop
        now, grace = loop.clock(), loop.options.pending_grace
        latest, since = loop.latest, loop.reading.pending_since
        waited = [
            n
            for n in loop.order
            if n in since
            and now - since[n] > grace
            and n in latest
            and latest[n]["metadata"].get("uid") not in self.moved
        ]
        assert loop.placer is not None  # queue moves are made only with several queues
        for move in loop.placer.to_move(latest, waited):
            job = latest[move.trial]
            name = job["metadata"]["name"]
            try:
                loop.cluster.delete(loop.kind, name, loop.namespace)
                if loop.kind == BATCH_JOB:
                    loop.cluster.delete(PODGROUP, name, loop.namespace)
            except NotFound:
                pass
            self.moved.add(job["metadata"].get("uid"))
            loop.keeper.change(MOVED_KEY, moved=loop.record.moved + 1)
            loop.reporter.event(
                f"trial {move.trial} moved: queue {move.source} → {move.target}, it had not started and {move.reason}"
            )


class Cleanup(Capability):
    """`cleanup: delete`: finished jobs are deleted, their outcomes kept in the record first."""

    name = "cleanup"
    needs = "cleanup"

    def __init__(self, loop: LoopView):
        self.loop = loop

    def settle(self, states: States) -> None:
        loop = self.loop
        done = {n: s.value for n, s in states.items() if s.finished and n in loop.latest}
        if not done:
            return
        loop.keeper.change(finished={**loop.record.finished, **done})
        loop.keeper.save("finished")
        for name in done:
            job = loop.latest[name]
            loop.cluster.delete(loop.kind, job["metadata"]["name"], loop.namespace)
            if loop.kind == BATCH_JOB:
                loop.cluster.delete(PODGROUP, job["metadata"]["name"], loop.namespace)
