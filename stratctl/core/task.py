"""One attempt as a batch scheduler runs it (pure): what Slurm and YARN take from the
study's rendering of an attempt.

The study core renders every attempt the same way for every backend (the trial template,
its parameters and stratctl's STRATCTL_* environment). A batch scheduler that runs an
attempt as one job of N tasks needs only the task's command line, environment and
resources, and the attempt's identity: `task_of` reads them from the rendered manifests
(`tasks_of` every task's, for a backend that runs several roles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stratctl import labels
from stratctl.core.quantity import parse as parse_quantity


@dataclass(frozen=True)
class Task:
    """One attempt of one trial: its identity, and one kind of its tasks, `replicas` of it."""

    name: str  # the attempt's name, unique in the study
    role: str  # the task's name in the study (`trial.tasks[].name`): STRATCTL_TASK of its processes
    trial: str
    attempt: int
    spec_hash: str
    replicas: int
    command: list[str]  # the command line, words as given (the trial's command, then its args)
    env: list[tuple[str, str]]  # (name, value) of every literal variable, STRATCTL_* included
    gpus: int  # per task
    cpus: int | None  # per task, whole CPUs (rounded up); None when not asked
    memory: int | None  # per task, bytes; None when not asked


def _job_and_pods(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    job = next(d for d in docs if d.get("kind") == "Job")
    spec = job.get("spec") or {}
    if spec.get("tasks"):
        return job, [(t.get("replicas") or 1, (t.get("template") or {}).get("spec") or {}) for t in spec["tasks"]]
    return job, [(spec.get("parallelism") or 1, (spec.get("template") or {}).get("spec") or {})]


def tasks_of(docs: list[dict[str, Any]]) -> list[Task]:
    """Every task of the attempt the rendered manifests `docs` stand for, in task order (the
    study's `trial.tasks`): a backend that runs roles of their own command, replicas and
    resources (YARN) reads them all."""
    job, pods = _job_and_pods(docs)
    named = (job.get("spec") or {}).get("tasks") or [{}]
    return [_task(job, replicas, pod, named[i] if i < len(named) else {}) for i, (replicas, pod) in enumerate(pods)]


def task_of(docs: list[dict[str, Any]]) -> Task:
    """The attempt the rendered manifests `docs` stand for (one kind of task: the study's
    validation says so for every batch-scheduler backend that runs one)."""
    return tasks_of(docs)[0]


def _task(job: dict[str, Any], replicas: int, pod: dict[str, Any], named: dict[str, Any]) -> Task:
    container = (pod.get("containers") or [{}])[0]
    meta = job.get("metadata") or {}
    res = container.get("resources") or {}
    wanted = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    return Task(
        name=meta["name"],
        role=str(named.get("name") or container.get("name") or "worker"),
        trial=meta["labels"][labels.TRIAL],
        attempt=int(meta["labels"][labels.ATTEMPT]),
        spec_hash=meta["labels"].get(labels.SPEC_HASH, ""),
        replicas=replicas,
        command=[str(w) for w in (container.get("command") or []) + (container.get("args") or [])],
        env=[
            (e["name"], str(e.get("value", "")))
            for e in container.get("env") or []
            if "value" in e and e["name"].isidentifier()
        ],
        gpus=int(parse_quantity(wanted.get("nvidia.com/gpu", "0")) or 0),
        cpus=max(1, math.ceil(parse_quantity(wanted["cpu"]) or 1)) if "cpu" in wanted else None,
        memory=_bytes(wanted["memory"]) if "memory" in wanted else None,
    )


def _bytes(memory: Any) -> int:
    amount = parse_quantity(memory)
    if amount is None:
        raise ValueError(f"memory {memory!r} is not a Kubernetes quantity")
    return int(amount)
