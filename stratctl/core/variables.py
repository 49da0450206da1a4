"""The variables a study's templates see that come from the study alone (its tasks, pod
fields, policies, the gang's minimum resources), in Kubernetes' words; `render` adds
those of each trial."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from stratctl.core.quantity import format_quantity, parse
from stratctl.core.spec import Study


def study_context(study: Study) -> dict[str, Any]:
    t = study.trial
    tasks = []
    for task in t.tasks:
        res = study.task_resources(task)
        env = {**t.env, **task.env}
        tasks.append(
            {
                "name": task.name,
                "replicas": task.replicas,
                "min_available": task.gang,
                "image": task.image or t.image,
                "command": task.command if task.command is not None else t.command,
                "args": task.args if task.args is not None else t.args,
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "resources": {k: v for k, v in (("requests", res.requests), ("limits", res.limits)) if v},
                "volume_mounts": [m.manifest() for m in (*t.volume_mounts, *task.volume_mounts)],
                "env_from": [e.manifest() for e in t.env_from],
                # where its pods run: the task's own values over the trial's (spec.Task)
                "node_selector": {**t.node_selector, **task.node_selector},
                "tolerations": [
                    tol.model_dump(exclude_none=True)
                    for tol in (t.tolerations if task.tolerations is None else task.tolerations)
                ],
                "policies": [_policy(p) for p in task.policies],
                "pod": _pod_fields(t, study.checkpoint.grace_seconds, task.affinity),
            }
        )
    policies = [_policy(p) for p in t.effective_policies]
    spec = study.model_dump(mode="json")
    spec["queue"] = study.home_queue  # a trial renders for the first queue; the loop places it (run/queues.py)
    return {
        "spec": spec,
        "study": study.name,
        "namespace": study.namespace,
        "tasks": tasks,
        "gang_size": study.gang_size,
        "policies": policies,
        "tolerations": [tol.model_dump(exclude_none=True) for tol in t.tolerations],
        "pod": _pod_fields(t, study.checkpoint.grace_seconds),
        "network_topology": t.network_topology.manifest() if t.network_topology else {},
        "min_resources": min_resources(study),
    }


def _policy(p: Any) -> dict[str, Any]:
    """A Volcano lifecycle policy in Kubernetes' words."""
    return {"event": p.event, "action": p.action} if p.event else {"exitCode": p.exit_code, "action": p.action}


def _pod_fields(t: Any, grace_seconds: int | None = None, affinity: Any = None) -> dict[str, Any]:
    """The trial's pod-level fields in Kubernetes' words, only those it sets (the
    templates render each one present); `affinity`: a task's, instead of the trial's."""
    affinity = affinity or t.affinity
    fields = {
        "volumes": [v.manifest() for v in t.volumes],
        "affinity": affinity.manifest() if affinity else {},
        "imagePullSecrets": [{"name": name} for name in t.image_pull_secrets],
        "securityContext": t.security_context.manifest() if t.security_context else {},
    }
    out = {k: v for k, v in fields.items() if v}
    if grace_seconds is not None:  # 0 is a value (kill at once), not an absence
        out["terminationGracePeriodSeconds"] = grace_seconds
    return out


def min_resources(study: Study) -> dict[str, str]:
    """What the gang needs at least: the requests (or limits) of its minAvailable pods."""
    total: dict[str, Decimal] = {}
    for task in study.trial.tasks:
        res = study.task_resources(task)
        for name, value in {**res.limits, **res.requests}.items():
            amount = parse(value)
            if amount is not None:
                total[name] = total.get(name, Decimal(0)) + amount * task.gang
    return {k: format_quantity(v, binary="memory" in k or "storage" in k) for k, v in total.items()}
