"""Intermediate values: what a running trial reports (`stratctl report`), and what the
submit loop's pruner reads of it.

Trials report with `stratctl.trial.report()`, lines of their output that the loop reads
(reportlog.py). This is the other way, for a program that cannot print to the trial's
output (a sidecar, a script on a workstation): `stratctl report --pod NAME`.

**Writing**: each report is merged into a small history file of that pod
(`$STRATCTL_REPORT_FILE`, default `stratctl-report-<namespace>-<pod>.json` in the temporary
directory: one per pod, so reports for several pods from one machine never mix), and the
latest `KEPT` steps are written to the trial's own pod as the annotation
`stratctl.io/report` — one PATCH through the API server with the pod's service
account, at most every `interval` seconds (reports in between ride on the next write;
`flush` writes now). No sidecar, no server: the pod is found by its name (`STRATCTL_POD`,
set from the downward API in studies with a pruner, else `HOSTNAME`) in the namespace of
its service account.

**Reading** (the submit loop): the loop already watches the cluster's pods; `steps_of`
reads a trial's steps from its pods' annotations (the first pod that reports a step
wins, so a gang whose workers all report is read once).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from stratctl import labels
from stratctl.errors import UsageError

KEPT = 200  # steps kept in the annotation (the latest): a pruner judges recent rungs
INTERVAL = 5.0  # seconds between two writes to the API server


def parse_values(pairs: Iterable[str]) -> dict[str, float]:
    """`loss=0.41 acc=0.9` → {"loss": 0.41, "acc": 0.9}; a clear UsageError otherwise."""
    values: dict[str, float] = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or not name:
            raise UsageError(f"{pair!r}: give values as METRIC=NUMBER (e.g. loss=0.41)")
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{pair!r}: {text!r} is not a number") from None
        if not math.isfinite(value):
            raise UsageError(f"{pair!r}: the value must be a finite number")
        values[name] = value
    if not values:
        raise UsageError("nothing to report: give at least one METRIC=NUMBER")
    return values


def merged(history: Mapping[str, Any], step: int, values: Mapping[str, float]) -> dict[str, Any]:
    """The history with this step's values added (a step reported twice keeps both
    reports' metrics, the later winning), trimmed to the latest KEPT steps."""
    steps = {int(k): dict(v) for k, v in (history.get("steps") or {}).items()}
    steps[step] = {**steps.get(step, {}), **values}
    latest = sorted(steps)[-KEPT:]
    return {"steps": {str(k): steps[k] for k in latest}, "sent": history.get("sent")}


def annotation(history: Mapping[str, Any]) -> str:
    return json.dumps(history.get("steps") or {}, separators=(",", ":"), sort_keys=False)


def due(history: Mapping[str, Any], now: float, interval: float, flush: bool) -> bool:
    sent = history.get("sent")
    return flush or not isinstance(sent, int | float) or now - sent >= interval


def steps_of(pods: Iterable[dict[str, Any]], metric: str) -> dict[str, dict[int, float]]:
    """Job name → its steps' values of `metric`, from the report annotations of its pods (a
    block's pod: its trial's view's name, `<block>-<index>`)."""
    from stratctl.backends.kubernetes.objects.state import job_of_pod

    out: dict[str, dict[int, float]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(labels.REPORT)
        job = job_of_pod(pod)
        if not text or not job:
            continue
        try:
            steps = json.loads(text)
        except ValueError:
            continue
        if not isinstance(steps, dict):
            continue
        mine = out.setdefault(job, {})
        for key, values in steps.items():
            value = values.get(metric) if isinstance(values, dict) else None
            if (
                key.lstrip("-").isdigit()
                and isinstance(value, int | float)
                and not isinstance(value, bool)
                and math.isfinite(value)
            ):
                mine.setdefault(int(key), float(value))
    return out


def report(
    step: int,
    values: Mapping[str, float],
    *,
    pod: str | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    flush: bool = False,
    interval: float = INTERVAL,
    path: str | None = None,
    clock: Callable[[], float] = time.time,
    patch: Callable[[str, str | None, dict[str, Any]], None] | None = None,
) -> bool:
    """Record one step's values; write them to the pod when due. True when written now."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise UsageError(f"step must be a whole number of 0 or more (got {step!r})")
    pod = pod or os.environ.get(labels.ENV_POD) or os.environ.get("HOSTNAME")
    if not pod:
        raise UsageError("which pod? Not in a trial's container (no STRATCTL_POD or HOSTNAME): give --pod")
    file = Path(path or os.environ.get("STRATCTL_REPORT_FILE") or history_file(namespace, pod))
    try:
        history = json.loads(file.read_text())
    except (OSError, ValueError):
        history = {}
    history = merged(history if isinstance(history, dict) else {}, step, values)
    now = clock()
    written = due(history, now, interval, flush)
    if written:
        (patch or _patch(kubeconfig, context))(
            pod, namespace, {"metadata": {"annotations": {labels.REPORT: annotation(history)}}}
        )
        history["sent"] = now
    file.write_text(json.dumps(history, separators=(",", ":")))
    return written


def history_file(namespace: str | None, pod: str) -> Path:
    """The default history file of `pod`'s reports: one per pod and namespace."""
    return Path(tempfile.gettempdir()) / f"stratctl-report-{namespace or '-'}-{pod}.json"


def _patch(kubeconfig: str | None, context: str | None) -> Callable[[str, str | None, dict[str, Any]], None]:
    def patch(pod: str, namespace: str | None, body: dict[str, Any]) -> None:
        from stratctl.backends.kubernetes.api.cluster import POD
        from stratctl.backends.kubernetes.api.connect import Connection, one_shot

        cluster = one_shot(Connection(kubeconfig, context, namespace), pool_size=1)
        try:
            cluster.patch(POD, pod, body, cluster.namespace)
        finally:
            cluster.close()

    return patch
