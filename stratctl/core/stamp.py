"""What stratctl stamps on every manifest it renders, whatever the template wrote.

Each object and each pod gets the study's and trial's labels and annotations, and each
container the STRATCTL_* env vars a trial reads (its name, attempt, checkpoint, whether it
resumes, its parameters). On Kubernetes the pods also get the rendezvous contract, stamped
before this by the step the backend hands the Renderer (core/contract.py). User templates
cannot forget any of it: stratctl adds it in Python after rendering.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.core import tree

if TYPE_CHECKING:
    from stratctl.core.spec import Study

# The values a stamp takes (see Renderer._stamp_values), by name.
STAMPED = ("expected_text", "trial", "attempt_text", "index_text", "checkpoint", "resume_text", "params_json")

# the parameters as the trial reads them (STRATCTL_PARAMS): readable, not hashed
params_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def seconds_text(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def stamp(
    docs: list[dict[str, Any]],
    v: dict[str, str],
    study: Study,
    study_labels: dict[str, str],
    stamps_expected: bool,
) -> None:
    """Add stratctl's labels (the study's `study_labels`, then the trial's), annotations and
    env vars (values `v`, named as in STAMPED); the expected duration only when the study
    states it (`stamps_expected`)."""
    stamp_labels = {**study_labels, labels.TRIAL: v["trial"], labels.ATTEMPT: v["attempt_text"]}
    stamp_annotations = {
        labels.PARAMS: v["params_json"],
        labels.TRIAL_INDEX: v["index_text"],
        labels.CHECKPOINT: v["checkpoint"],
    }
    if stamps_expected:  # read by launchers sharing the cluster to plan backfill
        stamp_annotations[labels.EXPECTED_SECONDS] = v["expected_text"]
    env: list[dict[str, Any]] = [
        {"name": labels.ENV_STUDY, "value": study.name},
        {"name": labels.ENV_TRIAL, "value": v["trial"]},
        {"name": labels.ENV_ATTEMPT, "value": v["attempt_text"]},
        {"name": labels.ENV_CHECKPOINT, "value": v["checkpoint"]},
        {"name": labels.ENV_RESUME, "value": v["resume_text"]},
        {"name": labels.ENV_PARAMS, "value": v["params_json"]},
    ]
    if study.pruner is not None:  # where `stratctl report` writes the trial's intermediate values
        env.append({"name": labels.ENV_POD, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    ours = {e["name"] for e in env}
    pods = tree.pods(docs)
    for meta_ in [d.setdefault("metadata", {}) for d in docs] + [p.setdefault("metadata", {}) for p in pods]:
        meta_["labels"] = {**(meta_.get("labels") or {}), **stamp_labels}
        meta_["annotations"] = {**(meta_.get("annotations") or {}), **stamp_annotations}
    for pod in pods:
        spec = pod.get("spec") or {}
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            user = [e for e in (container.get("env") or []) if e.get("name") not in ours]
            container["env"] = [dict(e) for e in env] + user
