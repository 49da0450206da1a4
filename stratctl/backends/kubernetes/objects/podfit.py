"""The pods of a trial and whether the cluster's nodes can hold them: read from a trial's
rendered manifests (`pods_of`), grouped by shape (`shape_key`), and measured against the
Ready nodes' allocatable, one pod at a time and one whole gang on the empty cluster
(`fit`). Pure: manifests and nodes in, located problems out; `preflight` reports them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from stratctl.backends.kubernetes.objects.gpus import schedulable
from stratctl.core import accelerators
from stratctl.core.quantity import GPU, format_quantity, parse
from stratctl.core.spec import Study
from stratctl.errors import Problem


@dataclass(frozen=True)
class Pod:
    """One pod template of a trial: `replicas` of it, of which `gang` must start together."""

    task: str
    requests: dict[str, str]  # resource -> quantity as written
    node_selector: dict[str, str]
    replicas: int
    gang: int


def _requests(spec: dict[str, Any]) -> dict[str, str]:
    """What one pod requests: the sum of its containers (a resource's limit where it has no
    request, as Kubernetes defaults it), or its largest init container where larger."""

    def raw(kind: str) -> tuple[Any, ...]:
        return tuple(
            tuple(
                {
                    **((c.get("resources") or {}).get("limits") or {}),
                    **((c.get("resources") or {}).get("requests") or {}),
                }.items()
            )
            for c in spec.get(kind) or []
        )

    return dict(_summed(raw("containers"), raw("initContainers")))


@lru_cache(maxsize=512)
def _summed(containers: tuple[Any, ...], inits: tuple[Any, ...]) -> tuple[tuple[str, str], ...]:
    """`_requests` of the containers' merged limits and requests, as (resource, quantity)
    pairs: the same few resource lists recur across a study's trials, parsed once each."""

    def of(merged: tuple[Any, ...]) -> dict[str, Decimal]:
        return {k: q for k, v in merged if (q := parse(v)) is not None}

    total: dict[str, Decimal] = {}
    for merged in containers:
        for k, q in of(merged).items():
            total[k] = total.get(k, Decimal(0)) + q
    for merged in inits:
        for k, q in of(merged).items():
            total[k] = max(total.get(k, Decimal(0)), q)
    return tuple((k, shown(q, k)) for k, q in total.items() if q > 0)


def shown(q: Decimal, resource: str = "") -> str:
    """A quantity as a person writes it: `16Gi` of memory, `500m` of cpu, `8` GPUs."""
    binary = resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")
    return format_quantity(q, binary=binary)


def pods_of(manifests: list[dict[str, Any]]) -> list[Pod]:
    """The pod templates of one trial's manifests (a Volcano Job's tasks, or a batch/v1 Job
    with its PodGroup)."""
    pods: list[Pod] = []
    group = next((m for m in manifests if m.get("kind") == "PodGroup"), None)
    for m in manifests:
        spec = m.get("spec") or {}
        if m.get("kind") != "Job":
            continue
        if "tasks" in spec:
            for task in spec.get("tasks") or []:
                pod = (task.get("template") or {}).get("spec") or {}
                replicas = int(task.get("replicas") or 1)
                gang = task.get("minAvailable")
                pods.append(
                    Pod(
                        task.get("name", ""),
                        _requests(pod),
                        dict(pod.get("nodeSelector") or {}),
                        replicas,
                        replicas if gang is None else int(gang),
                    )
                )
        elif isinstance(spec.get("template"), dict):
            pod = spec["template"].get("spec") or {}
            replicas = int(spec.get("parallelism") or 1)
            gang = ((group or {}).get("spec") or {}).get("minMember")
            pods.append(
                Pod(
                    "",
                    _requests(pod),
                    dict(pod.get("nodeSelector") or {}),
                    replicas,
                    replicas if gang is None else int(gang),
                )
            )
    return pods


# -- whether the nodes can hold them ------------------------------------------------------


def shape_key(pods: list[Pod]) -> tuple[Any, ...]:
    """What makes two trials' pods fit alike: tasks, requests, node selectors, replicas, gang."""
    return tuple(
        (p.task, tuple(sorted(p.requests.items())), tuple(sorted(p.node_selector.items())), p.replicas, p.gang)
        for p in pods
    )


def distinct(trials: Iterable[list[Pod]]) -> list[list[Pod]]:
    """The different shapes among the trials (resources may be templated per trial)."""
    seen: dict[tuple[Any, ...], list[Pod]] = {}
    for pods in trials:
        seen.setdefault(shape_key(pods), pods)
    return list(seen.values())


def _allocatable(node: dict[str, Any]) -> dict[str, Decimal]:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {k: q for k, v in raw.items() if (q := parse(v)) is not None}


def _fits(requests: dict[str, str], room: dict[str, Decimal]) -> bool:
    return all(room.get(k, Decimal(0)) >= _amount(v) for k, v in requests.items())


def _amount(value: str) -> Decimal:
    """A request's quantity, as written (the study's validation refused any other)."""
    amount = parse(value)
    if amount is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return amount


def _task_path(study: Study, task: str) -> tuple[Any, ...]:
    """Where a task's resources are written in the study file."""
    for i, t in enumerate(study.trial.tasks):
        if t.name == task or (not task and len(study.trial.tasks) == 1):
            return ("trial", "tasks", i, "resources") if t.resources is not None else ("trial", "resources")
    return ("trial", "resources")


def _selector_path(study: Study, task: str) -> tuple[Any, ...]:
    """Where the node selector of a task's pods is written: the task's own, else the trial's."""
    for i, t in enumerate(study.trial.tasks):
        if t.name == task and t.node_selector:
            return ("trial", "tasks", i, "node_selector")
    return ("trial", "node_selector")


def fit(study: Study, nodes: list[dict[str, Any]], shapes: list[list[Pod]]) -> list[Problem]:
    """Why the Ready `nodes` cannot hold the trials of `shapes`: a pod no node can hold, once
    per task (or once for a node selector no node matches), else a gang that does not fit
    the empty cluster."""
    ready = [n for n in nodes if schedulable(n)]
    if not ready:
        return []  # nothing to measure against (an autoscaled cluster may start from none)
    problems: dict[tuple[Any, ...], Problem] = {}
    for pods in shapes:
        for pod in pods:
            if (pod.task,) in problems:
                continue
            problem = _pod_problem(study, pod, ready)
            if problem is not None:  # once per task, or once for a node selector no node matches
                key = ("node_selector",) if "node_selector: no Ready node" in problem.message else (pod.task,)
                problems.setdefault(key, problem)
        if not problems:
            gang = _gang_problem(study, pods, ready)
            if gang is not None:
                problems[("gang",)] = gang
    return list(problems.values())


def _pod_problem(study: Study, pod: Pod, ready: list[dict[str, Any]]) -> Problem | None:
    who = f"a {pod.task} pod" if pod.task else "a pod"
    chosen = [
        n
        for n in ready
        if all(((n.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in pod.node_selector.items())
    ]
    if not chosen:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(pod.node_selector.items()))
        where = _selector_path(study, pod.task)
        return study.problem(
            where, f"{'.'.join(map(str, where))}: no Ready node has the labels {labels} ({len(ready)} Ready nodes)"
        )
    if any(_fits(pod.requests, _allocatable(n)) for n in chosen):
        return None
    base = _task_path(study, pod.task)
    for resource, amount in sorted(pod.requests.items(), key=lambda kv: (kv[0] != GPU, kv[0])):
        rooms = [(_allocatable(n).get(resource, Decimal(0)), (n.get("metadata") or {}).get("name", "")) for n in chosen]
        largest, name = max(rooms, key=lambda room: room[0])  # the first node of the most
        if largest < _amount(amount):
            field = ".".join(str(p) for p in base) + f".requests.{resource}"
            most = f"the most any has is {shown(largest, resource)}, on {name}" if largest > 0 else "none has any"
            # a name the nodes offer spelt otherwise (example.com/fpgas for example.com/fpga)
            near = _offered_near(resource, chosen) if largest == 0 else ""
            return study.problem(
                base + ("requests", resource),
                f"{field}: {who} asks for {amount} {resource}, and no node can hold it: "
                f"{most} ({len(chosen)} Ready nodes){near}",
            )
    asks = ", ".join(f"{v} {k}" for k, v in sorted(pod.requests.items()))
    field = ".".join(str(p) for p in base)
    return study.problem(base, f"{field}: no single node can hold {who} asking for {asks} ({len(chosen)} Ready nodes)")


def _offered_near(resource: str, nodes: list[dict[str, Any]]) -> str:
    """`; did you mean X?` when the nodes offer a resource `resource` looks like a slip for."""
    offered = {k for n in nodes for k, v in _allocatable(n).items() if v > 0}
    near = accelerators.misspelt(resource) if accelerators.misspelt(resource) in offered else None
    near = near or accelerators.nearest(resource, offered)
    return f"; did you mean {near}, which they offer?" if near else ""


def _gang_problem(study: Study, pods: list[Pod], ready: list[dict[str, Any]]) -> Problem | None:
    """Whether one whole gang can be placed on the empty cluster: largest pods first, each on
    the node with the least room for it (best fit), as a bin-packing scheduler would."""
    members = [p for p in pods for _ in range(p.gang)]
    rooms = [(_allocatable(n), (n.get("metadata") or {}).get("labels") or {}) for n in ready]
    order = sorted(members, key=lambda p: tuple(-_amount(p.requests.get(k, "0")) for k in (GPU, "cpu", "memory")))
    for pod in order:
        fitting = [
            r
            for r, labels in rooms
            if _fits(pod.requests, r) and all(labels.get(k) == v for k, v in pod.node_selector.items())
        ]
        if not fitting:
            total = sum((_amount(p.requests.get(GPU, "0")) for p in members), Decimal(0))
            gpus = sum((_allocatable(n).get(GPU, Decimal(0)) for n in ready), Decimal(0))
            need = f", {shown(total)} {GPU} in all" if total else ""
            where = ("trial", "min_available") if study.trial.min_available else ("trial", "tasks")
            return study.problem(
                where,
                f"{'.'.join(where)}: a gang of {len(members)} pods{need} does not fit the "
                f"cluster even when it is empty ({len(ready)} Ready nodes, "
                f"{shown(gpus)} {GPU} allocatable in all)",
            )
        room = min(fitting, key=lambda r: r.get(GPU, Decimal(0)))
        for k, v in pod.requests.items():
            room[k] = room.get(k, Decimal(0)) - _amount(v)
    return None
