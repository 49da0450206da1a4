"""A block's objects (blocks.py says what a block is), rendered from its trials' own first
attempts (pure): the ConfigMap of the trials' scripts (key = index: the trial's environment
and command line) and the Indexed Job whose pods run them. Trials share a block only when
their pods differ in nothing else (`mergeable`)."""

from __future__ import annotations

import copy
import json
import re
import shlex
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.blocks import IGNORED, INDEX, Listed, block_name
from stratctl.core.digest import digest
from stratctl.errors import StratctlError

if TYPE_CHECKING:
    from stratctl.core.space import Trial

QUEUE_NAME = "scheduling.volcano.sh/queue-name"  # the queue of the PodGroup Volcano makes for a Job
MOUNT = "/etc/stratctl/block"  # where a block's pods find their trials' scripts
VOLUME = "stratctl-block"
# what one block carries at most: trials, and bytes of its trials' list (an annotation: the
# API server allows 256 KiB of annotations an object) and of their scripts (a ConfigMap: 1 MiB)
MAX_TRIALS = 1000
MAX_LISTED = 200_000
MAX_SCRIPTS = 900_000
# stratctl's own per-trial keys on a trial's pod template: a block's pods carry none of them
PER_TRIAL_LABELS = (labels.TRIAL, labels.ATTEMPT, labels.SPEC_HASH, labels.SHARD)
PER_TRIAL_NOTES = (labels.PARAMS, labels.TRIAL_INDEX, labels.CHECKPOINT, "scheduling.k8s.io/group-name")
# STRATCTL_RESUME in a block: an index that runs again (its pod disrupted, or its block
# suspended by `drain` and resumed) resumes when its checkpoint directory holds anything
RESUME = (
    'if [ "${STRATCTL_INDEX_DISRUPTIONS:-0}" != "0" ] || '
    '{ [ -n "$STRATCTL_CHECKPOINT_DIR" ] && [ -n "$(ls -A "$STRATCTL_CHECKPOINT_DIR" 2>/dev/null)" ]; }; then '
    "export STRATCTL_RESUME=1; fi"
)


class NotMergeable(StratctlError):
    """Trials whose pods differ in more than their command line and environment."""


# ------------------------------------------------------------------ rendering


def job_of(docs: list[dict]) -> dict:
    """The batch/v1 Job of one trial's rendered first attempt."""
    return next(d for d in docs if d.get("kind") == "Job")


def shell_word(word: str) -> str:
    """A command-line word for /bin/sh, Kubernetes' `$(VAR)` references kept as references
    (a container's command expands them; `$$` is a literal `$`)."""
    parts: list[str] = []
    for literal, escaped, name in re.findall(r"([^$]+|\$(?!\$|\()|)(\$\$)?(?:\$\(([A-Za-z_][A-Za-z0-9_]*)\))?", word):
        if literal:
            parts.append(shlex.quote(literal))
        if escaped:
            parts.append("'$'")
        if name:
            parts.append(f'"${{{name}}}"')
    return "".join(parts) or "''"


def _container(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


def trial_script(container: dict, shared: list[dict], own_address: str) -> str:
    """The trial's command line and the environment it does not share with its block, as a
    script its pod runs. A one-process trial's rendezvous address is its own pod."""
    lines = ["#!/bin/sh", "# one trial of a stratctl block: its own environment, then its command"]
    for entry in container.get("env") or []:
        if entry in shared:
            continue
        value = "0" if _rank(entry) else str(entry.get("value", ""))
        if own_address:
            value = value.replace(own_address, "localhost")
        lines.append(f"export {entry['name']}={shlex.quote(value)}")
    lines.append(RESUME)
    words = list(container.get("command") or []) + list(container.get("args") or [])
    lines.append("exec " + " ".join(shell_word(str(w)) for w in words))
    return "\n".join(lines) + "\n"


def template_key(job: dict) -> dict:
    """A trial's pod template without what is the trial's own (stratctl's per-trial keys,
    its command line and environment values): the trials of one block share it."""
    template = copy.deepcopy(job["spec"]["template"])
    meta = template.setdefault("metadata", {})
    for key in PER_TRIAL_LABELS:
        (meta.get("labels") or {}).pop(key, None)
    for key in PER_TRIAL_NOTES:
        (meta.get("annotations") or {}).pop(key, None)
    spec = template["spec"]
    spec.pop("subdomain", None)
    for container in spec.get("containers") or []:
        container.pop("command", None)
        container.pop("args", None)
        names = [
            {"name": e["name"], **({"valueFrom": e["valueFrom"]} if "valueFrom" in e else {})}
            for e in container.get("env") or []
        ]
        container["env"] = sorted(names, key=lambda e: e["name"])
    return template


def mergeable(first: list[dict], other: list[dict], where: str) -> None:
    """Raise NotMergeable, naming what differs, when `other`'s trial cannot share a block
    with `first`'s (their pods differ in more than command line and environment values)."""
    a, b = template_key(job_of(first)), template_key(job_of(other))
    if a == b:
        return
    for part in ("metadata", "spec"):
        for key in sorted(set(a.get(part) or {}) | set(b.get(part) or {})):
            if (a.get(part) or {}).get(key) != (b.get(part) or {}).get(key):
                raise NotMergeable(
                    f"{where}: its pod's {part}.{key} differs from the first trial's: trials merged into "
                    "one Indexed Job may differ only in their command line and environment "
                    "(set merge: off, or move the value into the command or env)"
                )
    raise NotMergeable(f"{where}: its pod differs from the first trial's")


def _shared(rendered: list[tuple[Trial, list[dict]]]) -> list[dict]:
    """The environment entries every trial of the block has the same (they stay in the pod),
    but a rank read from the pod's completion index: in a block that is the trial's place
    in it, while a one-process trial is rank 0 of its own gang (its script says so)."""
    envs = [_container(job_of(docs)).get("env") or [] for _, docs in rendered]
    return [e for e in envs[0] if all(e in other for other in envs[1:]) and not _rank(e)]


def _rank(entry: dict) -> bool:
    return INDEX in str(((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", ""))


def block_manifests(
    study, n: int, rendered: list[tuple[Trial, list[dict]]], parallelism: int
) -> tuple[list[dict], list[Listed]]:
    """The ConfigMap of the trials' scripts and the Indexed Job of block `n` of these
    trials' first attempts (as rendered one per trial), and the trials it carries; its
    spec hash leaves out `parallelism` (the loop changes it)."""
    name = block_name(study.name, n)
    first = job_of(rendered[0][1])
    shared = _shared(rendered)
    scripts, listed = {}, []
    for i, (trial, docs) in enumerate(rendered):
        job: dict[str, Any] = job_of(docs)
        own = f"{job['metadata']['name']}-0.{job['metadata']['name']}"
        scripts[str(i)] = trial_script(_container(job), shared, own)
        notes = job["metadata"].get("annotations") or {}
        listed.append(Listed(trial.name, trial.index, dict(trial.params), notes.get(labels.CHECKPOINT, "")))
    meta_labels = {k: v for k, v in (first["metadata"].get("labels") or {}).items() if k not in PER_TRIAL_LABELS} | {
        labels.BLOCK: name,
        labels.ATTEMPT: "0",
    }
    notes = {k: v for k, v in (first["metadata"].get("annotations") or {}).items() if k not in PER_TRIAL_NOTES}
    template = template_key(first)
    template["metadata"]["labels"] = {**template["metadata"].get("labels", {}), labels.BLOCK: name}
    queue = _queue(rendered[0][1])
    template["metadata"].setdefault("annotations", {})
    if queue:
        template["metadata"]["annotations"][QUEUE_NAME] = queue
    pod = template["spec"]
    container = pod["containers"][0]
    container["command"] = ["/bin/sh", f"{MOUNT}/$(JOB_COMPLETION_INDEX)"]
    container["env"] = [*shared, _downward("STRATCTL_INDEX_DISRUPTIONS", IGNORED)]
    mount = {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}
    container["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]
    pod["volumes"] = [*(pod.get("volumes") or []), {"name": VOLUME, "configMap": {"name": name}}]
    trials_note = json.dumps([[t.name, t.index, t.params, t.checkpoint] for t in listed], separators=(",", ":"))
    configmap: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": study.namespace, "labels": dict(meta_labels)},
        "data": scripts,
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": study.namespace,
            "labels": dict(meta_labels),
            "annotations": {**notes, labels.BLOCK_TRIALS: trials_note},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": len(rendered),
            "parallelism": parallelism,
            "backoffLimitPerIndex": first["spec"].get("backoffLimit", 0),
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
            },
            "template": template,
        },
    }
    hashed = digest([configmap, {**job, "spec": {**job["spec"], "parallelism": 0}}])
    for doc in (configmap, job):
        doc["metadata"]["labels"][labels.SPEC_HASH] = hashed
    return [configmap, job], listed


def _queue(docs: list[dict]) -> str:
    group = next((d for d in docs if d.get("kind") == "PodGroup"), None)
    return ((group or {}).get("spec") or {}).get("queue") or ""


def _downward(name: str, annotation: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}}


def fits(rendered: list[tuple[Trial, list[dict]]]) -> int:
    """How many of these trials (in order) one block carries: MAX_TRIALS, fewer when their
    list or their scripts would outgrow what one object may hold."""
    listed = scripts = 0
    for i, (trial, docs) in enumerate(rendered[:MAX_TRIALS]):
        listed += len(json.dumps([trial.name, trial.index, dict(trial.params), ""])) + 40
        scripts += len(json.dumps(_container(job_of(docs)))) + 200
        if listed > MAX_LISTED or scripts > MAX_SCRIPTS:
            return max(1, i)
    return min(len(rendered), MAX_TRIALS)
