"""Pressure signals: what the cluster can absorb right now, kept current by watches.

Nodes and pods are mirrored with one list and then a watch each (not a full list every
cycle), so observing a 1,000-node cluster costs the API server almost nothing. From the
mirrors come free GPUs per node (allocatable `nvidia.com/gpu` minus the requests of the
node's non-terminated pods, as `kubectl describe node` sums them) and how many more gangs
of the study's shape those free GPUs could hold once the pods already waiting for a node
are placed: fragmentation-aware, so 8 free GPUs spread one per node hold no gang of two
4-GPU pods, and demand-aware, so launchers sharing a cluster do not all count the same
free GPUs. For a study whose gangs must stay inside one HyperNode (hard network topology),
only gangs that fit inside one allowed HyperNode count (`kube.topology`): free GPUs spread
one per leaf switch hold none, and `Capacity.spread` says so.

The pod mirror also feeds `disruptions`: the pods Volcano marked DisruptionTarget, kept
past their deletion, which tell the loop which ended trials were preempted; and the start
times of pods, which tell when a batch/v1 Job's gang started running (`pod_starts`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from stratctl.backends.kubernetes.api.cluster import HYPERNODE, NODE, POD, PODGROUP, PRIORITY_CLASS, Cluster
from stratctl.backends.kubernetes.objects.gpus import (
    Placement,
    _pg_key,
    after_demand,
    demand_besides,
    fragmentation,
    free_gpus,
    group_key,
    place_fitting,
    placeable,
)
from stratctl.backends.kubernetes.objects.precedence import (
    Precedence,
    backfill_gangs,
    blocked_above,
    higher_priority_waiting,
    priority_values,
    shadow_time,
)
from stratctl.backends.kubernetes.objects.state import run_starts
from stratctl.backends.kubernetes.objects.topology import domains, gangs_fit_within, spread
from stratctl.backends.kubernetes.watch.disruptions import Disruptions
from stratctl.backends.kubernetes.watch.mirror import Mirror
from stratctl.core.topology import NetworkTopology
from stratctl.errors import ClusterError
from stratctl.labels import STUDY
from stratctl.run.packing import gangs_fit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Capacity:
    free_gpus: int
    gangs_fit: int
    fragmentation: float
    nodes: int
    precedence: Precedence | None = None  # the largest higher-priority gang waiting, if any
    shadow: float | None = None  # seconds until it can start by the expected ends of the pods below it
    backfill_fit: int | None = None  # whole gangs the free GPUs hold now, that gang's own demand aside
    free_after: dict[str, int] | None = None  # node → free GPUs once the pods already waiting are placed
    spread: str | None = None  # why free GPUs hold no gang of a hard-topology study (no HyperNode holds one)
    domains: list[frozenset[str]] | None = None  # node sets a hard-topology gang must stay inside


class ClusterSignals:
    """GPU capacity from mirrored nodes and pods, and API health from the client's own requests."""

    def __init__(
        self,
        cluster: Cluster,
        shape: list[int],
        namespace: str | None = None,
        priority_class: str | None = None,
        yield_to_higher: bool = True,
        queue: str | tuple[str, ...] | None = None,
        topology: NetworkTopology | None = None,
        placements: list[Placement] | None = None,
    ):
        self.cluster = cluster
        # where the study's pods may go: other nodes' GPUs are not the study's (None: anywhere)
        self.placements = placements
        self.shape = shape
        self.priority_class = priority_class
        self.yield_to_higher = yield_to_higher
        self.queue = queue
        self.own_study: str | None = None  # set when the study's trials differ in shape (controller)
        self._priorities: tuple[dict[str, int], int] | None = None
        self.nodes = Mirror(cluster, NODE)
        self.disruptions = Disruptions()
        self.pods = Mirror(
            cluster, POD, label_selector=None, transform=self.disruptions.observe, on_delete=self.disruptions.deleted
        )
        # gangs queued in the study's namespace (where submit may read PodGroups); other
        # namespaces' queued gangs show up once their pods exist
        self.groups = Mirror(cluster, PODGROUP, all_namespaces=False, namespace=namespace) if namespace else None
        # a soft topology only prefers one HyperNode: room is counted as without one
        self.tier = topology.highest_tier if topology is not None and topology.hard else None
        self.hypernodes = Mirror(cluster, HYPERNODE) if self.tier is not None else None

    def start(self) -> ClusterSignals:
        self.nodes.start()
        self.pods.start()
        if self.groups is not None:
            self.groups.start()
        self._priorities = self._read_priorities()
        self.hypernodes = self._watch_hypernodes()
        return self

    def _watch_hypernodes(self) -> Mirror | None:
        """Without the right to list HyperNodes (or without Volcano's topology API) room is
        counted as if the study had no network topology."""
        if self.hypernodes is None:
            return None
        try:
            return self.hypernodes.start()
        except ClusterError as exc:
            log.warning(
                "cannot list HyperNodes (%s): counting room for gangs without the study's network topology", exc
            )
            return None

    def _read_priorities(self) -> tuple[dict[str, int], int] | None:
        """Priority classes, read once: they are few and rarely change. Without the right to
        list them the study cannot tell who outranks it, and never yields."""
        try:
            classes, _ = self.cluster.list(PRIORITY_CLASS, all_namespaces=True)
        except ClusterError as exc:
            log.warning(
                "cannot list priority classes (%s): not yielding to higher-priority gangs, and counting "
                "their waiting pods against the free GPUs",
                exc,
            )
            return None
        return priority_values(classes)

    def stop(self) -> None:
        self.nodes.stop()
        self.pods.stop()
        if self.groups is not None:
            self.groups.stop()
        if self.hypernodes is not None:
            self.hypernodes.stop()

    def capacity(self, now: float | None = None) -> Capacity:
        """`now`: the wall clock (seconds since the epoch), for the shadow time."""
        nodes, pods = placeable(self.nodes.items(), self.placements), self.pods.items()
        groups = self.groups.items() if self.groups is not None else []
        free = free_gpus(nodes, pods)
        precedence = shadow = backfill_fit = None
        ahead: list[Precedence] = []
        left_out: set[tuple[str, str]] = set()
        if self._priorities is not None:
            values, default = self._priorities
            own = values.get(self.priority_class, default) if self.priority_class else default
            if self.yield_to_higher:
                ahead = higher_priority_waiting(groups, nodes, pods, own, values, default, self.queue)
                precedence = ahead[0] if ahead else None
            # higher-priority gangs that cannot start now take none of the free GPUs, unless
            # the study yields to them (then the policy holds while they gather)
            waited_for = {w.key for w in ahead}
            left_out = blocked_above(groups, pods, sum(free.values()), own, values, default) - waited_for
        after = after_demand(free, demand_besides(pods, groups, left_out))
        free_after = after
        if self.own_study is not None:  # trials of different shapes: packing sees its own gangs as they are
            free_after = self._for_packing(free, pods, groups, left_out)
        if precedence is not None and now is not None:
            shadow = shadow_time(nodes, pods, precedence, now)
            backfill_fit = backfill_gangs(nodes, pods, groups, ahead, self.shape)
        fit, why = self._fit(nodes, after)
        return Capacity(
            sum(after.values()),
            fit,
            fragmentation(after, self.shape, fit),
            len(nodes),
            precedence,
            shadow,
            backfill_fit,
            free_after=free_after,
            spread=why,
            domains=self._domains(nodes),
        )

    def _domains(self, nodes: list[dict[str, Any]]) -> list[frozenset[str]] | None:
        """The node sets a hard-topology gang must stay inside (None: anywhere)."""
        if self.hypernodes is None or self.tier is None:
            return None
        return [d.nodes for d in domains(self.hypernodes.items(), nodes, self.tier)]

    def _for_packing(
        self,
        free: dict[str, int],
        pods: list[dict[str, Any]],
        groups: list[dict[str, Any]],
        left_out: set[tuple[str, str]],
    ) -> dict[str, int]:
        """Free GPUs for packing a study's trials of different shapes: everyone else's waiting
        demand as for any study, then the study's own waiting gangs only where they fit now.
        Its own large gangs queued for the next whole node (run/packing.py) fit nowhere
        yet; counted against the largest holes, they would keep its small trials out of the
        very holes packing is for."""
        own = {
            group_key(p) for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(STUDY) == self.own_study
        }
        own |= {
            _pg_key(g) for g in groups if ((g.get("metadata") or {}).get("labels") or {}).get(STUDY) == self.own_study
        }
        own = {key for key in own if key[1]}
        room = after_demand(free, demand_besides(pods, groups, left_out | own))
        mine = [p for p in pods if group_key(p) in own]
        return place_fitting(room, demand_besides(mine, [g for g in groups if _pg_key(g) in own], set()))

    def _fit(self, nodes: list[dict[str, Any]], free: dict[str, int]) -> tuple[int, str | None]:
        """Whole gangs the free GPUs hold (inside one allowed HyperNode for a hard topology),
        and why there are none although there would be without the topology."""
        if self.hypernodes is None or self.tier is None:
            return gangs_fit(free, self.shape), None
        fit = gangs_fit_within(free, self.shape, domains(self.hypernodes.items(), nodes, self.tier))
        return fit, spread(free, self.shape, fit, self.tier)

    def pod_starts(self) -> dict[str, float]:
        """Job uid → when the first of its pods started, from the pods there and those
        deleted lately (a preempted gang's pods are gone by the time its job has failed)."""
        return run_starts(self.pods.items() + self.disruptions.deleted_pods())

    def pods_complete_since(self) -> float | None:
        """Wall time from which the pod mirror has seen every change (its last list)."""
        return self.pods.listed_at

    def latency_p90(self) -> float | None:
        return self.cluster.metrics.latency_quantile(0.9)
