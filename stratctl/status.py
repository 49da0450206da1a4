"""Status: what every study and trial of a namespace is doing, read from the cluster alone.

`collect(cluster, namespace, study, now)` lists the study records, the trials' jobs,
their PodGroups (why a gang is pending) and their finished pods (results), page by page,
keeping only a small row per object: raw objects never accumulate, so 10,000 trials
stay fast and small. Rows are plain data; `table(rows, now)` and `studies_table(rows)`
turn them into pictures, `as_dict` into JSON/YAML.

A trial's result is the JSON object its container wrote as termination message
(/dev/termination-log); `sort_trials(rows, "-accuracy")` puts the best first.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.table import Table

from stratctl import labels
from stratctl.cluster import PODGROUP, POD, VOLCANO_JOB, resource_path
from stratctl.drain import records
from stratctl.record import parse_record, suspended_of
from stratctl.recovery import carried, effective_state, usage, view_of
from stratctl.state import TrialState, attempt_of, podgroup_name, timestamp

PAGE = 500
ORDER = [s.value for s in (TrialState.WAITING, TrialState.PENDING, TrialState.RUNNING, TrialState.PREEMPTED,
                           TrialState.SUSPENDED, TrialState.SUCCEEDED, TrialState.FAILED)]


@dataclass
class TrialRow:
    study: str
    trial: str
    state: str
    attempt: int
    params: dict = field(default_factory=dict)
    created: float | None = None  # of the latest attempt
    job: str = ""
    phase: str = ""  # Volcano's phase of the latest attempt
    pending: str = ""  # why the gang is not running
    result: dict | None = None
    preemptions: int = 0
    gpu_seconds: float = 0.0
    gpu_seconds_lost: float = 0.0
    checkpoint: str = ""
    podgroup: str = ""  # of the latest attempt (Volcano names it <job>-<uid>)


@dataclass
class StudyRow:
    study: str
    critical: bool
    drained: bool
    trials: int
    states: dict[str, int]
    in_flight: int
    target: int | None
    decision: str
    attempts: int
    preemptions: int
    gpu_hours: float
    gpu_hours_lost: float


@dataclass
class Snapshot:
    namespace: str
    taken_at: float
    studies: list[StudyRow]
    trials: list[TrialRow]

    def as_dict(self) -> dict:
        return {
            "namespace": self.namespace,
            "takenAt": self.taken_at,
            "studies": [asdict(s) for s in self.studies],
            "trials": [asdict(t) for t in self.trials],
        }


# ------------------------------------------------------------------ reading the cluster


def _pages(cluster, kind, namespace: str, label_selector: str, field_selector: str | None = None):
    """Each page's items as the server sent them; only one page is held at a time."""
    path = resource_path(*kind, namespace)
    token = None
    while True:
        query = {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": PAGE, "continue": token}
        page = cluster.request("GET", path, query, what=f"list {kind[1]}")
        yield page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def _slim_job(job: dict, now: float) -> tuple[str, int, dict]:
    """What status keeps of a job: enough to classify, account and show it."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    notes = meta.get("annotations") or {}
    slim = {
        "apiVersion": job.get("apiVersion"),
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "labels": meta.get("labels") or {},
            "annotations": {k: v for k, v in notes.items() if k.startswith(labels.PREFIX)},
        },
        "status": {k: status.get(k) for k in ("state", "conditions", "retryCount") if k in status},
    }
    spent = usage(job, now)
    slim["usage"] = (spent.gpu_seconds, spent.gpu_seconds_lost)
    return (meta.get("labels") or {}).get(labels.TRIAL, ""), attempt_of(job), slim


def _pending_reason(podgroup: dict) -> str:
    status = podgroup.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            return condition.get("message") or condition.get("reason") or "unschedulable"
    phase = status.get("phase") or "Pending"
    if phase == "Inqueue":
        return "admitted to the queue, gang not yet placed"
    if phase == "Pending":
        return "waiting for the queue to admit the gang"
    return ""


def _result(pod: dict) -> dict | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        message = ((container.get("state") or {}).get("terminated") or {}).get("message")
        if not message:
            continue
        try:
            value = json.loads(message)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def collect(cluster, namespace: str, study: str | None = None, now: float | None = None,
            reasons_for_all: bool = True) -> Snapshot:
    """One consistent-enough picture of the namespace's studies (or one study).

    With `reasons_for_all` false the PodGroups are not listed (the list costs as much as
    the jobs'); `explain_pending` then fetches the reasons of the few rows shown.
    """
    now = time.time() if now is None else now
    cms = records(cluster, namespace, study)
    selector = f"{labels.STUDY}={study}" if study else labels.STUDY
    jobs: dict[tuple[str, str], tuple[int, dict]] = {}  # (study, trial) -> latest (attempt, slim job)
    reasons: dict[str, str] = {}  # job name -> why pending
    results: dict[str, dict] = {}  # job name -> result

    def read_jobs():
        for items in _pages(cluster, VOLCANO_JOB, namespace, selector):
            for job in items:
                trial, attempt, slim = _slim_job(job, now)
                key = ((slim["metadata"]["labels"]).get(labels.STUDY, ""), trial)
                if key not in jobs or attempt > jobs[key][0]:
                    jobs[key] = (attempt, slim)

    def read_podgroups():
        for items in _pages(cluster, PODGROUP, namespace, selector):
            for pg in items:
                owner = next((o.get("name") for o in (pg.get("metadata") or {}).get("ownerReferences") or []
                              if o.get("kind") == "Job"), None)
                reason = _pending_reason(pg)
                if owner and reason:
                    reasons[owner] = reason

    def read_results():
        finished = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
        for items in _pages(cluster, POD, namespace, selector, finished):
            for pod in items:
                job = ((pod.get("metadata") or {}).get("labels") or {}).get("volcano.sh/job-name")
                value = _result(pod)
                if job and value is not None and job not in results:
                    results[job] = value

    readers = [read_jobs, read_results] + ([read_podgroups] if reasons_for_all else [])
    with ThreadPoolExecutor(len(readers)) as pool:
        for future in [pool.submit(reader) for reader in readers]:
            future.result()
    return build(namespace, now, cms, jobs, reasons, results)


def build(namespace, now, cms, jobs, reasons, results) -> Snapshot:
    """Rows from what `collect` read (pure)."""
    studies, trials = [], []
    by_study: dict[str, list[tuple[str, int, dict]]] = {}
    for (study_name, trial), (attempt, job) in jobs.items():
        by_study.setdefault(study_name, []).append((trial, attempt, job))
    for cm in cms:
        record = parse_record(cm)
        marks = suspended_of(cm)
        rows: list[TrialRow] = []
        seen = set()
        for trial, attempt, job in sorted(by_study.get(record.study, []), key=lambda x: x[0]):
            seen.add(trial)
            mark = marks.get(trial)
            view = view_of(trial, job, mark["attempt"] if mark else None)
            before = carried(job)
            used, lost = job["usage"]
            notes = job["metadata"]["annotations"]
            try:
                params = json.loads(notes.get(labels.PARAMS) or "{}")
            except ValueError:
                params = {}
            state = effective_state(view)
            rows.append(TrialRow(
                study=record.study, trial=trial, state=state.value, attempt=attempt, params=params,
                created=timestamp(job["metadata"].get("creationTimestamp")), job=job["metadata"]["name"],
                phase=((job["status"].get("state") or {}).get("phase") or "Pending"),
                pending=reasons.get(job["metadata"]["name"], "") if state is TrialState.PENDING else "",
                result=results.get(job["metadata"]["name"]), preemptions=view.preemptions,
                gpu_seconds=before.gpu_seconds + used, gpu_seconds_lost=before.gpu_seconds_lost + lost,
                checkpoint=notes.get(labels.CHECKPOINT, ""), podgroup=podgroup_name(job),
            ))
        for trial, mark in sorted(marks.items()):
            if trial in seen:
                continue
            seen.add(trial)
            rows.append(TrialRow(
                study=record.study, trial=trial, state=TrialState.SUSPENDED.value, attempt=mark["attempt"],
                preemptions=int(mark.get("preemptions") or 0), gpu_seconds=float(mark.get("gpu_seconds") or 0),
                gpu_seconds_lost=float(mark.get("gpu_seconds_lost") or 0),
            ))
        for trial, outcome in sorted(record.finished.items()):
            if trial not in seen:
                seen.add(trial)
                rows.append(TrialRow(study=record.study, trial=trial, state=outcome, attempt=-1))
        counts = {s: 0 for s in ORDER}
        for row in rows:
            counts[row.state] = counts.get(row.state, 0) + 1
        counts[TrialState.WAITING.value] = max(0, record.trials - len(rows))
        studies.append(StudyRow(
            study=record.study, critical=record.critical, drained=record.drained, trials=record.trials,
            states=counts, in_flight=counts["pending"] + counts["running"], target=record.target,
            decision=record.reason, attempts=sum(r.attempt + 1 for r in rows if r.attempt >= 0),
            preemptions=sum(r.preemptions for r in rows),
            gpu_hours=sum(r.gpu_seconds for r in rows) / 3600, gpu_hours_lost=sum(r.gpu_seconds_lost for r in rows) / 3600,
        ))
        trials.extend(rows)
    return Snapshot(namespace, now, studies, trials)


def explain_pending(cluster, namespace: str, rows: list[TrialRow]) -> None:
    """Fill in why the given pending trials wait, one PodGroup read each (concurrently)."""
    from stratctl.errors import ClusterError

    todo = [r for r in rows if r.state == TrialState.PENDING.value and not r.pending and r.podgroup]

    def one(row: TrialRow) -> None:
        try:
            row.pending = _pending_reason(cluster.get(PODGROUP, row.podgroup, namespace))
        except ClusterError:
            row.pending = "no PodGroup yet: the Volcano job controller has not caught up"

    if todo:
        with ThreadPoolExecutor(min(8, len(todo))) as pool:
            list(pool.map(one, todo))


# ------------------------------------------------------------------ ordering and pictures


def sort_trials(rows: list[TrialRow], metric: str | None) -> list[TrialRow]:
    """Best first by a result metric: `loss` lowest first, `-accuracy` highest first.

    Trials without the metric (not finished, or not reporting it) come last, in name order.
    """
    if not metric:
        return sorted(rows, key=lambda r: (r.study, r.trial))
    descending = metric.startswith("-")
    name = metric.lstrip("-+")

    def key(row: TrialRow):
        value = (row.result or {}).get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return (1, 0.0, row.study, row.trial)
        return (0, -value if descending else value, row.study, row.trial)

    return sorted(rows, key=key)


STYLE = {"running": "green", "pending": "yellow", "preempted": "magenta", "suspended": "cyan",
         "succeeded": "bold green", "failed": "red", "waiting": "dim"}


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _brief(value: Any, width: int = 60) -> str:
    text = json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 1] + "…"


def studies_table(rows: list[StudyRow]) -> Table:
    table = Table(title="studies", title_justify="left", header_style="bold")
    for column in ("study", "trials", "in flight", "attempts", "preemptions", "GPU-h used", "GPU-h lost", "decision"):
        table.add_column(column, justify="right" if column.startswith(("in", "att", "pre", "GPU")) else "left")
    for s in rows:
        states = ", ".join(f"[{STYLE.get(k, '')}]{v} {k}[/]" for k, v in s.states.items() if v)
        flags = (" [red]critical[/]" if s.critical else "") + (" [cyan]drained[/]" if s.drained else "")
        target = "-" if s.target is None else str(s.target)
        table.add_row(f"{s.study}{flags}", f"{s.trials}: {states}", f"{s.in_flight}/{target}", str(s.attempts),
                      str(s.preemptions), f"{s.gpu_hours:.2f}", f"{s.gpu_hours_lost:.2f}", s.decision or "-")
    return table


def table(rows: list[TrialRow], now: float, limit: int | None = None) -> Table:
    """The trials, one line each, in the order given."""
    shown = rows if not limit else rows[:limit]
    out = Table(header_style="bold", caption=f"{len(rows) - len(shown)} more trials not shown (--limit)"
                if len(shown) < len(rows) else None)
    for column in ("trial", "state", "attempt", "age", "params", "result / why pending"):
        out.add_column(column, justify="right" if column in ("attempt", "age") else "left",
                       overflow="fold" if column.startswith("result") else "ellipsis")
    for r in shown:
        state = f"[{STYLE.get(r.state, '')}]{r.state}[/]"
        if r.preemptions:
            state += f" ({r.preemptions}× preempted)"
        detail = _brief(r.result) if r.result is not None else r.pending
        out.add_row(r.trial, state, "-" if r.attempt < 0 else str(r.attempt),
                    age(now - r.created) if r.created else "-", _brief(r.params, 40), detail or "")
    return out
