"""Precedence: gangs of higher priority than the study's, waiting for GPUs, and what may run
before they start (EASY backfilling by the pods' expected ends). Pure functions over the
mirrored nodes, pods and PodGroups.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stratctl import labels
from stratctl.backends.kubernetes.objects.gpus import (
    _pg_key,
    _queued_missing,
    after_demand,
    demand_besides,
    free_gpus,
    group_key,
    pod_gpus,
)
from stratctl.core.quantity import GPU, whole_units
from stratctl.run.packing import gangs_fit


@dataclass(frozen=True)
class Precedence:
    """A gang of higher priority than the study's, waiting for GPUs it could be given."""

    gang: str  # namespace/name of its PodGroup
    gpus: int
    priority_class: str
    priority: int = 0  # the class's value

    def __str__(self) -> str:
        return f"{self.gang} ({self.gpus} GPUs, {self.priority_class})"

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of its PodGroup, as pods and groups are keyed here."""
        namespace, _, name = self.gang.partition("/")
        return namespace, name


def priority_values(classes: Iterable[dict[str, Any]]) -> tuple[dict[str, int], int]:
    """PriorityClass name → value, and the value of pods that name none (the global default)."""
    values, default = {}, 0
    for pc in classes:
        values[(pc.get("metadata") or {}).get("name", "")] = int(pc.get("value") or 0)
        if pc.get("globalDefault"):
            default = int(pc.get("value") or 0)
    return values, default


def higher_priority_waiting(
    groups: Iterable[dict[str, Any]],
    nodes: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    own_priority: int,
    values: dict[str, int],
    default: int,
    queue: str | Collection[str] | None = None,
) -> list[Precedence]:
    """Gangs that outrank the study and wait (PodGroup Pending or Inqueue) for GPUs they
    would get if lower-priority work stepped aside, largest first; with `queue`, only those
    in that queue (or any of those queues: a study's trials may go to several).

    Volcano places a big gang only once enough GPUs are free at the same moment, and
    enqueues smaller gangs into every GPU that frees meanwhile, so a launcher that keeps
    refilling freed GPUs starves a production job of higher priority indefinitely. A gang
    that could not fit even with every lower-priority pod gone (larger than the cluster,
    or blocked by work of its own rank) is left out: waiting for it would stall the study
    for nothing.
    """
    nodes, pods = list(nodes), list(pods)
    queues = {queue} if isinstance(queue, str) else set(queue or ())
    waiting = []
    for pg in groups:
        spec, meta = pg.get("spec") or {}, pg.get("metadata") or {}
        if ((pg.get("status") or {}).get("phase") or "Pending") not in ("Pending", "Inqueue"):
            continue
        cls = spec.get("priorityClassName")
        rank = values.get(cls, default) if cls else default
        gpus = whole_units((spec.get("minResources") or {}).get(GPU, 0))
        if rank <= own_priority or gpus <= 0 or (queues and (spec.get("queue") or "default") not in queues):
            continue
        own = (meta.get("namespace", ""), meta.get("name", ""))
        # GPUs that stay taken whatever lower-priority work does: pods of at least its rank
        kept = [p for p in pods if int((p.get("spec") or {}).get("priority") or 0) >= rank and group_key(p) != own]
        if gpus <= sum(free_gpus(nodes, kept).values()):
            waiting.append(Precedence(f"{own[0]}/{own[1]}", gpus, cls or "default priority", rank))
    return sorted(waiting, key=lambda w: -w.gpus)


def expected_end(pod: dict[str, Any]) -> float:
    """When a running pod is expected to end (seconds since the epoch): its start plus the
    `expected-seconds` annotation stratctl stamps on trial pods; infinity for pods that do
    not say (another workload, a study without a stated duration)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    try:
        seconds = float((meta.get("annotations") or {})[labels.EXPECTED_SECONDS])
        started = datetime.fromisoformat(status["startTime"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return math.inf
    return started + seconds


def shadow_time(
    nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]], ahead: Precedence, now: float
) -> float | None:
    """Seconds from `now` until the waiting higher-priority gang can start, if nothing new
    takes its GPUs: the moment the free GPUs plus those released by lower-priority pods, in
    the order they are expected to end, reach what it asks for (the "shadow time" of EASY
    backfilling). None when that depends on a pod with no expected end. GPUs are counted
    cluster-wide, which is exact for gangs of one-GPU pods and optimistic for larger pods."""
    pods = list(pods)
    free = sum(free_gpus(nodes, pods).values())
    releases = sorted(
        (expected_end(p), pod_gpus(p))
        for p in pods
        if (p.get("spec") or {}).get("nodeName")
        and pod_gpus(p) > 0
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and int((p.get("spec") or {}).get("priority") or 0) < ahead.priority
    )
    at = now
    for end, gpus in releases:
        if free >= ahead.gpus:
            break
        free, at = free + gpus, end
    if free < ahead.gpus or math.isinf(at):
        return None
    return max(0.0, at - now)


def blocked_above(
    groups: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    free: int,
    own_priority: int,
    values: dict[str, int],
    default: int,
) -> set[tuple[str, str]]:
    """Gangs that outrank the study and cannot start in the `free` GPUs there are now.

    Volcano places such a gang only once enough GPUs are free at the same moment, and places
    smaller gangs into the GPUs that free up meanwhile: its waiting pods take nothing yet.
    Whether the study leaves it those GPUs anyway is the yielding decision, not the free-GPU
    count's. A gang's rank is its PodGroup's class or, for pods whose PodGroup is not
    visible (another namespace), the pods' own priority."""
    pods, groups = list(pods), list(groups)
    need: dict[tuple[str, str], int] = {}
    rank: dict[tuple[str, str], int] = {}
    for pod in pods:
        key = group_key(pod)
        if (
            key[1]
            and not (pod.get("spec") or {}).get("nodeName")
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        ):
            need[key] = need.get(key, 0) + pod_gpus(pod)
            priority = int((pod.get("spec") or {}).get("priority") or 0)
            rank[key] = max(rank.get(key, priority), priority)
    for key, missing, per_pod in _queued_missing(groups, pods):
        need[key] = need.get(key, 0) + missing * per_pod
    for pg in groups:  # a queued gang's PodGroup class ranks it, when the PodGroup is visible
        if ((pg.get("status") or {}).get("phase") or "Pending") in ("Pending", "Inqueue"):
            cls = (pg.get("spec") or {}).get("priorityClassName")
            rank[_pg_key(pg)] = values.get(cls, default) if cls else default
    return {key for key, gpus in need.items() if rank.get(key, default) > own_priority and gpus > free}


def backfill_gangs(
    nodes: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    groups: Iterable[dict[str, Any]],
    ahead: Iterable[Precedence],
    shape: list[int],
) -> int:
    """Whole gangs of `shape` the free GPUs hold until the gangs waiting ahead can start.
    Those gangs cannot start yet, so their pods waiting for a node take nothing from the
    free GPUs meanwhile; everyone else's waiting pods and queued gangs still do."""
    blocked = {w.key for w in ahead}
    pods = list(pods)
    free = after_demand(free_gpus(nodes, pods), demand_besides(pods, groups, blocked))
    return gangs_fit(free, shape)
