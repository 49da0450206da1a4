"""A block's objects (blocks.py says what a block is), rendered from its trials' own first
attempts (pure): the ConfigMap of the trials' scripts (key = index: the trial's environment
and command line) and the Indexed Job whose pods run them. Trials share a block only when
their pods differ in nothing else (`mergeable`)."""

from __future__ import annotations

import copy
import json
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.blocks.blocks import IGNORED, INDEX, Listed, block_name
from stratctl.core.digest import digest
from stratctl.errors import StratctlError

if TYPE_CHECKING:
    from stratctl.core.space import Trial
    from stratctl.core.spec import Study

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


# the exit status of a trial the pruner stopped, in a block: its index fails at once (the
# pod failure policy's FailIndex), without the retries a failing trial has. 199 is no
# signal's status (128 + n, n <= 64) and no common program's.
PRUNED_EXIT = 199
PRUNED_SCRIPT = f"#!/bin/sh\n# this trial was stopped by the study's pruner\nexit {PRUNED_EXIT}\n"


class NotMergeable(StratctlError):
    """Trials whose pods differ in more than their command line and environment."""


# ------------------------------------------------------------------ rendering


def job_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch/v1 Job of one trial's rendered first attempt."""
    return next(d for d in docs if d.get("kind") == "Job")


def shell_word(word: str) -> str:
    """A command-line word for /bin/sh, Kubernetes' `$(VAR)` references kept as references
    (a container's command expands them; `$$` is a literal `$`)."""
    if "$" not in word:
        return shlex.quote(word)
    parts: list[str] = []
    for literal, escaped, name in re.findall(r"([^$]+|\$(?!\$|\()|)(\$\$)?(?:\$\(([A-Za-z_][A-Za-z0-9_]*)\))?", word):
        if literal:
            parts.append(shlex.quote(literal))
        if escaped:
            parts.append("'$'")
        if name:
            parts.append(f'"${{{name}}}"')
    return "".join(parts) or "''"


def _container(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def trial_script(part: Part, shared: set[int]) -> str:
    """The trial's command line and the environment it does not share with its block (the
    entries at the positions `shared`), as a script its pod runs. A one-process trial's
    rendezvous address is its own pod."""
    own = f"{part.job}-0.{part.job}"
    lines = ["#!/bin/sh", "# one trial of a stratctl block: its own environment, then its command"]
    for position, entry in enumerate(part.env):
        if position in shared:
            continue
        value = "0" if "valueFrom" in entry and _rank(entry) else str(entry.get("value", "")).replace(own, "localhost")
        lines.append(f"export {entry['name']}={shlex.quote(value)}")
    lines.append(RESUME)
    lines.append("exec " + " ".join(shell_word(str(w)) for w in part.command))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Part:
    """What a block keeps of one trial's rendered first attempt: who it is, its job's name
    (its rendezvous address names it), its checkpoint, its container's command line and
    environment (its script), its spec hash. Small: a study keeps every trial's part, not its manifests."""

    name: str
    index: int
    params: dict[str, Any]
    job: str
    checkpoint: str
    command: list[Any]
    env: list[Any]
    spec_hash: str = ""  # its first attempt's, as a Job of its own (what a changed study is judged by)


def part_of(trial: Trial, docs: list[dict[str, Any]]) -> Part:
    job = job_of(docs)
    container = _container(job)
    notes = job["metadata"].get("annotations") or {}
    words = list(container.get("command") or []) + list(container.get("args") or [])
    return Part(
        trial.name,
        trial.index,
        dict(trial.params),
        job["metadata"]["name"],
        notes.get(labels.CHECKPOINT, ""),
        words,
        list(container.get("env") or []),
        job["metadata"]["labels"].get(labels.SPEC_HASH, ""),
    )


def pod_key(job: dict[str, Any]) -> dict[str, Any]:
    """A trial's pod template without what is the trial's own (stratctl's per-trial keys,
    its command line, its environment's values): the trials of one block share it. Shallow:
    made for every trial of a study, to compare."""
    template = job["spec"]["template"]
    meta = template.get("metadata") or {}
    spec = {k: v for k, v in template["spec"].items() if k not in ("subdomain", "containers")}
    spec["containers"] = [
        {
            **{k: v for k, v in c.items() if k not in ("command", "args", "env")},
            "env": [(e["name"], e.get("valueFrom")) for e in c.get("env") or []],
        }
        for c in template["spec"].get("containers") or []
    ]
    return {
        "metadata": {
            "labels": {k: v for k, v in (meta.get("labels") or {}).items() if k not in PER_TRIAL_LABELS},
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k not in PER_TRIAL_NOTES},
        },
        "spec": spec,
    }


def mergeable(first: list[dict[str, Any]] | dict[str, Any], other: list[dict[str, Any]], where: str) -> None:
    """Raise NotMergeable, naming what differs, when `other`'s trial cannot share a block
    with `first`'s (their pods differ in more than command line and environment values).
    `first`: its manifests, or its `pod_key` (made once for many trials)."""
    a = first if isinstance(first, dict) else pod_key(job_of(first))
    b = pod_key(job_of(other))
    if a == b:
        return
    raise NotMergeable(
        f"{where}: its pod's {_difference(a, b)} differs from the first trial's: trials merged into one Indexed "
        "Job may differ only in their command line and environment (set merge: off, or move the value into the "
        "command or env)"
    )


def _difference(a: Any, b: Any, path: str = "") -> str:
    """Where two pod keys first differ, as a field path (`metadata.annotations["x"]`)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                plain = re.fullmatch(r"[A-Za-z_]\w*", str(key))
                return _difference(a.get(key), b.get(key), f"{path}.{key}".lstrip(".") if plain else f'{path}["{key}"]')
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _difference(x, y, f"{path}[{i}]")
    return path or "template"


def _shared(parts: list[Part]) -> set[int]:
    """The positions of the environment entries every trial of the block has the same (they
    stay in the pod; trials that share a block list the same names in the same order, as
    `pod_key` holds), but a rank read from the pod's completion index: in a block that is
    the trial's place in it, while a one-process trial is rank 0 of its own gang (its
    script says so)."""
    first = parts[0].env
    if any(len(part.env) != len(first) for part in parts):
        raise NotMergeable("trials of one block list different environment variables")
    return {j for j, e in enumerate(first) if not _rank(e) and all(part.env[j] == e for part in parts[1:])}


def _rank(entry: dict[str, Any]) -> bool:
    return INDEX in str(((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", ""))


def _template(first: dict[str, Any], name: str, queue: str, shared: list[dict[str, Any]]) -> dict[str, Any]:
    """The block's pod template: the first trial's, without what is each trial's own, its
    container running the script of its index."""
    template: dict[str, Any] = copy.deepcopy(first["spec"]["template"])
    meta = template.setdefault("metadata", {})
    meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k not in PER_TRIAL_LABELS}
    meta["labels"][labels.BLOCK] = name
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in PER_TRIAL_NOTES}
    if queue:
        meta["annotations"][QUEUE_NAME] = queue
    pod = template["spec"]
    pod.pop("subdomain", None)
    container = pod["containers"][0]
    container.pop("args", None)
    container["command"] = ["/bin/sh", f"{MOUNT}/$(JOB_COMPLETION_INDEX)"]
    container["env"] = [*shared, _downward("STRATCTL_INDEX_DISRUPTIONS", IGNORED)]
    mount = {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}
    container["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]
    pod["volumes"] = [*(pod.get("volumes") or []), {"name": VOLUME, "configMap": {"name": name}}]
    return template


def block_manifests(
    study: Study, n: int, first: list[dict[str, Any]], parts: list[Part], parallelism: int
) -> tuple[list[dict[str, Any]], list[Listed]]:
    """The ConfigMap of the trials' scripts and the Indexed Job of block `n`, for as many of
    these trials as one block carries (MAX_TRIALS, fewer when their list or their scripts
    would outgrow one object), and the trials it carries. `first`: the first trial's
    manifests as rendered (the block's pods are its pods). The spec hash leaves out
    `parallelism` (the loop changes it)."""
    name = block_name(study.name, n)
    job_doc = job_of(first)
    parts = parts[:MAX_TRIALS]
    shared = _shared(parts)
    scripts: dict[str, str] = {}
    listed: list[Listed] = []
    listed_bytes = scripts_bytes = 0
    for i, part in enumerate(parts):
        script = trial_script(part, shared)
        entry = Listed(part.name, part.index, part.params, part.checkpoint, part.spec_hash)
        listed_bytes += len(json.dumps(entry.note())) + 1
        scripts_bytes += len(script) + 8
        if i and (listed_bytes > MAX_LISTED or scripts_bytes > MAX_SCRIPTS):
            break
        scripts[str(i)] = script
        listed.append(entry)
    meta_labels = {k: v for k, v in (job_doc["metadata"].get("labels") or {}).items() if k not in PER_TRIAL_LABELS} | {
        labels.BLOCK: name,
        labels.ATTEMPT: "0",
    }
    notes = {k: v for k, v in (job_doc["metadata"].get("annotations") or {}).items() if k not in PER_TRIAL_NOTES}
    trials_note = json.dumps([t.note() for t in listed], separators=(",", ":"))
    configmap: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": study.namespace, "labels": dict(meta_labels)},
        "data": scripts,
    }
    job: dict[str, Any] = {
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
            "completions": len(listed),
            "parallelism": parallelism,
            "backoffLimitPerIndex": job_doc["spec"].get("backoffLimit", 0),
            "podFailurePolicy": {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                    {
                        "action": "FailIndex",
                        "onExitCodes": {
                            "containerName": _container(job_doc)["name"],
                            "operator": "In",
                            "values": [PRUNED_EXIT],
                        },
                    },
                ]
            },
            "template": _template(job_doc, name, _queue(first), [parts[0].env[j] for j in sorted(shared)]),
        },
    }
    hashed = digest([configmap, {**job, "spec": {**job["spec"], "parallelism": 0}}])
    for doc in (configmap, job):
        doc["metadata"]["labels"][labels.SPEC_HASH] = hashed
    return [configmap, job], listed


def _queue(docs: list[dict[str, Any]]) -> str:
    group = next((d for d in docs if d.get("kind") == "PodGroup"), None)
    return ((group or {}).get("spec") or {}).get("queue") or ""


def _downward(name: str, annotation: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}}
