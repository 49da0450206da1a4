"""Pressure signals: what the cluster can absorb right now, kept current by watches.

Nodes and pods are mirrored with one list and then a watch each (not a full list every
cycle), so observing a 1,000-node cluster costs the API server almost nothing. From the
mirrors come free GPUs per node (allocatable `nvidia.com/gpu` minus the requests of the
node's non-terminated pods, as `kubectl describe node` sums them) and how many more gangs
of the study's shape those free GPUs could hold once the pods already waiting for a node
are placed: fragmentation-aware, so 8 free GPUs spread one per node hold no gang of two
4-GPU pods, and demand-aware, so launchers sharing a cluster do not all count the same
free GPUs.

The pod mirror also feeds `disruptions`: the pods Volcano marked DisruptionTarget, kept
past their deletion, which tell the loop which ended trials were preempted; and the start
times of pods, which tell when a batch/v1 Job's gang started running (`pod_starts`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from stratctl.engine.precedence import (
    Precedence, backfill_gangs, blocked_above, higher_priority_waiting, priority_values, shadow_time,
)
from stratctl.errors import ClusterError
from stratctl.kube.cluster import NODE, POD, PODGROUP, PRIORITY_CLASS, Cluster
from stratctl.kube.disruptions import Disruptions
from stratctl.kube.gpus import after_demand, demand_besides, fragmentation, free_gpus, gangs_fit
from stratctl.kube.mirror import Mirror
from stratctl.kube.state import run_starts

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


class ClusterSignals:
    """GPU capacity from mirrored nodes and pods, and API health from the client's own requests."""

    def __init__(self, cluster: Cluster, shape: list[int], namespace: str | None = None,
                 priority_class: str | None = None, yield_to_higher: bool = True, queue: str | tuple[str, ...] | None = None):
        self.cluster = cluster
        self.shape = shape
        self.priority_class = priority_class
        self.yield_to_higher = yield_to_higher
        self.queue = queue
        self._priorities: tuple[dict[str, int], int] | None = None
        self.nodes = Mirror(cluster, NODE)
        self.disruptions = Disruptions()
        self.pods = Mirror(cluster, POD, label_selector=None, transform=self.disruptions.observe,
                           on_delete=self.disruptions.deleted)
        # gangs queued in the study's namespace (where submit may read PodGroups); other
        # namespaces' queued gangs show up once their pods exist
        self.groups = Mirror(cluster, PODGROUP, all_namespaces=False, namespace=namespace) if namespace else None

    def start(self) -> ClusterSignals:
        self.nodes.start()
        self.pods.start()
        if self.groups is not None:
            self.groups.start()
        self._priorities = self._read_priorities()
        return self

    def _read_priorities(self) -> tuple[dict[str, int], int] | None:
        """Priority classes, read once: they are few and rarely change. Without the right to
        list them the study cannot tell who outranks it, and never yields."""
        try:
            classes, _ = self.cluster.list(PRIORITY_CLASS, all_namespaces=True)
        except ClusterError as exc:
            log.warning("cannot list priority classes (%s): not yielding to higher-priority gangs, and counting "
                        "their waiting pods against the free GPUs", exc)
            return None
        return priority_values(classes)

    def stop(self) -> None:
        self.nodes.stop()
        self.pods.stop()
        if self.groups is not None:
            self.groups.stop()

    def capacity(self, now: float | None = None) -> Capacity:
        """`now`: the wall clock (seconds since the epoch), for the shadow time."""
        nodes, pods = self.nodes.items(), self.pods.items()
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
        if precedence is not None and now is not None:
            shadow = shadow_time(nodes, pods, precedence, now)
            backfill_fit = backfill_gangs(nodes, pods, groups, ahead, self.shape)
        return Capacity(sum(after.values()), gangs_fit(after, self.shape), fragmentation(after, self.shape), len(nodes),
                        precedence, shadow, backfill_fit)

    def pod_starts(self) -> dict[str, float]:
        """Job uid → when the first of its pods started, from the pods there and those
        deleted lately (a preempted gang's pods are gone by the time its job has failed)."""
        return run_starts(self.pods.items() + self.disruptions.deleted_pods())

    def pods_complete_since(self) -> float | None:
        """Wall time from which the pod mirror has seen every change (its last list)."""
        return self.pods.listed_at

    def latency_p90(self) -> float | None:
        return self.cluster.metrics.latency_quantile(0.9)

