"""GPU accounting from the objects Kubernetes returns: what a pod holds, what each node has
free (allocatable `nvidia.com/gpu` minus the requests of its non-terminated pods, as
`kubectl describe node` sums them), how many whole gangs of a shape those free GPUs hold,
and the demand of pods and gangs that wait for them. Pure functions over dicts: the one
place where GPUs are counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from stratctl.core.quantity import GPU, gpus_of, whole_units
from stratctl.core.trialspec import TrialSpec
from stratctl.run.packing import gangs_fit


def pod_gpus(pod: dict[str, Any]) -> int:
    """GPUs a pod holds: the sum over containers, or the largest init container if larger."""
    spec = pod.get("spec") or {}
    main = sum(gpus_of(c.get("resources")) for c in spec.get("containers") or [])
    init = max((gpus_of(c.get("resources")) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def job_gpus(job: dict[str, Any]) -> int:
    """GPUs a trial attempt holds while running: every pod of every task (a Volcano Job's
    `tasks`, or a batch/v1 Job's `parallelism` pods of its one template)."""
    spec = job.get("spec") or {}
    templates = [(t.get("replicas") or 1, t.get("template") or {}) for t in spec.get("tasks") or []]
    if not templates and isinstance(spec.get("template"), dict):  # batch/v1 Job
        templates = [(spec.get("parallelism") or 1, spec["template"])]
    return sum(replicas * pod_gpus(template) for replicas, template in templates)


def schedulable(node: dict[str, Any]) -> bool:
    """Whether new pods may go to the node: Ready, and not cordoned."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True


KEEPS_OUT = ("NoSchedule", "NoExecute")  # taint effects that keep a pod without a toleration off a node


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of the tolerations tolerates the taint (Kubernetes' rule: same effect or
    none given; an empty key with `Exists` tolerates every taint; `Equal` compares values)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        operator = t.get("operator") or "Equal"
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if operator == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


@dataclass(frozen=True)
class Placement:
    """Where the pods of one task of a study may go, as far as the node objects say: its
    node selector and its tolerations (affinity is not read)."""

    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)

    def admits(self, node: dict[str, Any]) -> bool:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if any(labels.get(key) != value for key, value in self.node_selector.items()):
            return False
        taints = (node.get("spec") or {}).get("taints") or []
        return all(tolerates(self.tolerations, taint) for taint in taints if taint.get("effect") in KEEPS_OUT)


def placements(trial: TrialSpec) -> list[Placement] | None:
    """Where a study's pods may go, one Placement per task: the task's tolerations (else the
    trial's) and the trial's node selector with the task's over it. None (anywhere) when one
    of them is a template, whose value only a trial knows."""
    found = []
    for task in trial.tasks:
        chosen = task.tolerations if task.tolerations is not None else trial.tolerations
        tolerations = tuple(t.model_dump(exclude_none=True) for t in chosen)
        selector = {**trial.node_selector, **task.node_selector}
        if "{{" in repr((tolerations, selector)):
            return None
        found.append(Placement(tolerations, selector))
    return found


def placeable(nodes: Iterable[dict[str, Any]], placements: Iterable[Placement] | None) -> list[dict[str, Any]]:
    """The nodes the pods of at least one of the placements may go to (all of them for None):
    a node tainted for others, or of another pool, holds no GPU of the study's."""
    if placements is None:
        return list(nodes)
    kinds = list(placements)
    return [n for n in nodes if any(p.admits(n) for p in kinds)]


def free_gpus(nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Node name → GPUs not requested by any non-terminated pod bound to it."""
    free = {
        n["metadata"]["name"]: whole_units(((n.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
        for n in nodes
        if schedulable(n)
    }
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in free and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            free[node] -= pod_gpus(pod)
    return {name: max(0, gpus) for name, gpus in free.items()}


def pending_demand(pods: Iterable[dict[str, Any]]) -> list[int]:
    """GPUs asked for by pods that are waiting for a node (created, not yet bound)."""
    return [
        g
        for pod in pods
        if not (pod.get("spec") or {}).get("nodeName")
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        and (g := pod_gpus(pod)) > 0
    ]


GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # which PodGroup a pod belongs to (Volcano)


def group_key(pod: dict[str, Any]) -> tuple[str, str]:
    """(namespace, PodGroup) of a pod; the PodGroup is "" for a pod that names none."""
    meta = pod.get("metadata") or {}
    return meta.get("namespace", ""), (meta.get("annotations") or {}).get(GROUP_ANNOTATION) or ""


def queued_demand(groups: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]) -> list[int]:
    """GPUs per pod of the gangs Volcano has queued but whose pods do not exist yet.

    A gang admitted a moment ago by another launcher is a PodGroup (Pending, or Inqueue
    before the job controller creates its pods) long before it is a pending pod; its
    `minMember` pods with `minResources` GPUs between them will take GPUs as soon as they
    free up. Pods that exist are left out here: bound ones are in the free GPUs already,
    unbound ones in `pending_demand`.
    """
    return [per_pod for _, missing, per_pod in _queued_missing(groups, pods) for _ in range(missing)]


def _queued_missing(
    groups: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> Iterator[tuple[tuple[str, str], int, int]]:
    """(key, pods of its gang not created yet, GPUs per pod) of each gang Volcano
    has queued (Pending or Inqueue) with GPU pods still to create."""
    existing: dict[tuple[str, str], int] = {}
    for pod in pods:
        namespace, group = group_key(pod)
        if group:
            existing[namespace, group] = existing.get((namespace, group), 0) + 1
    for pg in groups:
        if ((pg.get("status") or {}).get("phase") or "Pending") not in ("Pending", "Inqueue"):
            continue
        key, spec = _pg_key(pg), pg.get("spec") or {}
        members = int(spec.get("minMember") or 0)
        gpus = whole_units((spec.get("minResources") or {}).get(GPU, 0))
        missing = members - existing.get(key, 0)
        if members > 0 and gpus > 0 and missing > 0:
            yield key, missing, -(-gpus // members)


def _pg_key(pg: dict[str, Any]) -> tuple[str, str]:
    meta = pg.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def demand_besides(
    pods: list[dict[str, Any]], groups: Iterable[dict[str, Any]], left_out: set[tuple[str, str]]
) -> list[int]:
    """The waiting pods' and queued gangs' GPU demand, the gangs in `left_out` aside."""
    others = [p for p in pods if group_key(p) not in left_out]
    return pending_demand(others) + queued_demand([g for g in groups if _pg_key(g) not in left_out], others)


def after_demand(free: dict[str, int], demand: list[int]) -> dict[str, int]:
    """Free GPUs left once the pods already waiting are placed (largest first, best fit).

    Other launchers' gangs that were admitted a moment ago are not on a node yet; without
    this, every launcher would count the same free GPUs and all of them would admit into
    them at once.
    """
    room = dict(free)
    for need in sorted(demand, reverse=True):
        fits = [n for n, r in room.items() if r >= need]
        if fits:
            best = min(fits, key=lambda n: room[n])
            room[best] -= need
        else:  # it will wait for GPUs to free up anywhere: count it against the largest hole
            largest = max(room, key=lambda n: room[n], default=None)
            if largest is not None:
                room[largest] = max(0, room[largest] - need)
    return room


def place_fitting(free: dict[str, int], demand: list[int]) -> dict[str, int]:
    """Free GPUs left once the pods of `demand` that fit now are placed (largest first, best
    fit); a pod that fits on no node takes nothing."""
    room = dict(free)
    for need in sorted(demand, reverse=True):
        fits = [n for n, r in room.items() if r >= need]
        if fits:
            room[min(fits, key=lambda n: room[n])] -= need
    return room


def fragmentation(free: dict[str, int], shape: list[int], fit: int | None = None) -> float:
    """Share of free GPUs that cannot serve one more gang of `shape` (0: none wasted);
    `fit`: the whole gangs they hold, when counted otherwise (inside network domains)."""
    total = sum(free.values())
    if total == 0:
        return 0.0
    usable = (gangs_fit(free, shape) if fit is None else fit) * sum(shape)
    return max(0.0, (total - min(total, usable)) / total)
