"""What every trial and study amounts to: rows built from jobs and study records (pure).

`build` turns the latest attempt of each trial (slimmed by `slim_job`) and the studies'
records into a `TrialRow` per trial and a `StudyRow` per study: trials by state, in
flight against target, attempts, preemptions, failures, GPU-hours used and lost. `status` builds
them from what it lists; the submit loop builds its study's row from the jobs it already
holds and stores it in the study record (`summary_data`), so `status` can show a running
study without listing its 10,000 jobs. Either passes the start of each batch/v1 Job's
first pod (`state.run_starts`), the only record of when such a trial started running.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from stratctl import labels
from stratctl.backends.kubernetes.objects.gpus import job_gpus
from stratctl.backends.kubernetes.objects.jobview import PARKED, carried, usage, view_of
from stratctl.backends.kubernetes.objects.record import (
    StudyRecord,
    api_quota_of,
    parse_record,
    space_order,
    suspended_of,
)
from stratctl.backends.kubernetes.objects.state import (
    attempt_of,
    classify,
    ended_at,
    is_batch,
    phase_of,
    podgroup_name,
    timestamp,
    transition,
)
from stratctl.run.queues import queue_of_job
from stratctl.run.recovery import Limits, effective_state
from stratctl.run.rows import ORDER, StudyRow, TrialRow, ended_count
from stratctl.trialstate import TrialState

SLIM_STATUS = ("state", "conditions", "retryCount", "ready", "active")  # what classify and usage read


def slim_job(job: dict[str, Any]) -> tuple[str, int, dict[str, Any]]:
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
        "status": {k: status.get(k) for k in SLIM_STATUS if k in status},
        "gpus": job_gpus(job),
        "queue": queue_of_job(job) or "",
    }
    return (meta.get("labels") or {}).get(labels.TRIAL, ""), attempt_of(job), slim


@dataclass(frozen=True)
class _Told:
    """What objects other than a trial's job tell of it (see `build`)."""

    now: float
    reasons: dict[str, str]
    results: dict[str, dict[str, Any]]
    starts: dict[str, float]
    exits: dict[str, tuple[int, str]]


def build(
    now: float,
    cms: list[dict[str, Any]],
    jobs: dict[tuple[str, str], tuple[int, dict[str, Any]]],
    reasons: dict[str, str] | None = None,
    results: dict[str, dict[str, Any]] | None = None,
    starts: dict[str, float] | None = None,
    exits: dict[str, tuple[int, str]] | None = None,
) -> tuple[list[StudyRow], list[TrialRow]]:
    """Rows from study records and the latest slim job of each (study, trial) (pure).

    `reasons` (job name → why its gang waits), `results` (job name → result) and `starts`
    (job uid → when its first pod started, which batch/v1 Jobs do not record) fill in
    what only other objects tell; `exits` (job name → exit code and reason of a container
    that exited non-zero) says why a failed trial failed.
    """
    told = _Told(now, reasons or {}, results or {}, starts or {}, exits or {})
    studies, trials = [], []
    by_study: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}
    for (study_name, trial), (attempt, job) in jobs.items():
        by_study.setdefault(study_name, []).append((trial, attempt, job))
    for cm in cms:
        record = parse_record(cm)
        rows = _trial_rows(record, suspended_of(cm), by_study.get(record.study, []), told)
        studies.append(study_row(record, rows, now))
        trials.extend(rows)
    return studies, trials


def _trial_rows(
    record: StudyRecord, marks: dict[str, dict[str, Any]], jobs: list[tuple[str, int, dict[str, Any]]], told: _Told
) -> list[TrialRow]:
    """A study's trial rows: one per trial with a job, then the suspended trials without
    one, the pruned trials of a search (from what the record was told: their jobs are
    gone, or a block's index ends as it was stopped), and the trials the record lists as
    finished."""
    limits = None if record.max_failures is None else Limits(max_failures=record.max_failures)
    order = space_order(record.source)
    pruned = {trial for trial, entry in record.told.items() if entry.get("state") == TrialState.PRUNED.value}
    rows = [
        _job_row(record.study, trial, attempt, job, marks.get(trial), limits, order, told)
        for trial, attempt, job in sorted(jobs, key=lambda x: x[0])
        if trial not in pruned  # a pruned trial's job may outlive the stop (its block's index, say)
    ]
    seen = {row.trial for row in rows}
    rows += [
        _suspended_row(record.study, trial, mark, order) for trial, mark in sorted(marks.items()) if trial not in seen
    ]
    seen |= set(marks)
    rows += [
        _pruned_row(record.study, trial, entry, order)
        for trial, entry in sorted(record.told.items())
        if trial not in seen and entry.get("state") == TrialState.PRUNED.value
    ]
    seen |= {row.trial for row in rows}
    rows += [
        TrialRow(study=record.study, trial=trial, state=outcome, attempt=-1)
        for trial, outcome in sorted(record.finished.items())
        if trial not in seen
    ]
    return rows


def in_order(params: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """Parameters as the study file lists them, like `plan`."""
    return {**{k: params[k] for k in order if k in params}, **params} if order else params


def _job_row(
    study: str,
    trial: str,
    attempt: int,
    job: dict[str, Any],
    mark: dict[str, Any] | None,
    limits: Limits | None,
    order: list[str],
    told: _Told,
) -> TrialRow:
    """The row of a trial from its latest job."""
    view = view_of(trial, job, mark["attempt"] if mark else None, mark=mark)
    before = carried(job)
    start = told.starts.get(job["metadata"]["uid"])
    spent = usage(job, told.now, classify(job), start)
    notes = job["metadata"]["annotations"]
    try:
        params = json.loads(notes.get(labels.PARAMS) or "{}")
    except ValueError:
        params = {}
    if isinstance(params, dict):
        params = in_order(params, order)
    state = effective_state(view, limits)
    if state is TrialState.PENDING and notes.get(labels.BLOCK_SUSPENDED):  # held in its drained block
        state = TrialState.SUSPENDED
    name = job["metadata"]["name"]
    block = (job["metadata"].get("labels") or {}).get(labels.IN_BLOCK)  # a trial of a block: its Job's name shown
    code, why = told.exits.get(name, (None, ""))
    failed = state is TrialState.FAILED
    return TrialRow(
        study=study,
        trial=trial,
        state=state.value,
        attempt=attempt,
        params=params,
        created=timestamp(job["metadata"].get("creationTimestamp")),
        job=block or name,
        phase=phase_of(job),
        pending=(told.reasons.get(name) or notes.get(labels.WAITS, ""))
        if state in (TrialState.PENDING, TrialState.SUSPENDED)
        else "",
        queued=state is TrialState.PENDING and labels.WAITS in notes,
        result=told.results.get(name),
        preemptions=view.preemptions,
        failures=view.failures,
        gpu_seconds=before.gpu_seconds + spent.gpu_seconds,
        gpu_seconds_lost=before.gpu_seconds_lost + spent.gpu_seconds_lost,
        checkpoint=notes.get(labels.CHECKPOINT, ""),
        # a block's PodGroup is the one Volcano makes for its Job: `podgroup-<the Job's uid>`
        podgroup=f"podgroup-{job['metadata'].get('uid', '').split('/')[0]}" if block else podgroup_name(job),
        requeued=notes.get(labels.REQUEUED_BECAUSE, ""),
        index=int(notes[labels.TRIAL_INDEX]) if (notes.get(labels.TRIAL_INDEX) or "").isdigit() else None,
        started=run_start(job, start),
        finished=ended_at(job),
        exit_code=code if failed else None,
        reason="; ".join(filter(None, [why, notes.get(labels.GIVEN_UP, "")])) if failed else "",
        queue=job.get("queue") or queue_of_job(job) or "",
    )


def _suspended_row(study: str, trial: str, mark: dict[str, Any], order: list[str]) -> TrialRow:
    """The row of a suspended trial whose job is gone, from its mark in the study record
    (its parameters and index too, which `drain` keeps there); preempted when the mark
    says so (a stuck attempt the loop ended while its study was held: requeue.py)."""
    params = mark.get("params")
    index = mark.get("index")
    return TrialRow(
        study=study,
        trial=trial,
        state=PARKED if mark.get("state") == PARKED else TrialState.SUSPENDED.value,
        attempt=mark["attempt"],
        params=in_order(params, order) if isinstance(params, dict) else {},
        index=index if isinstance(index, int) and not isinstance(index, bool) else None,
        preemptions=int(mark.get("preemptions") or 0),
        failures=int(mark.get("failures") or 0),
        gpu_seconds=float(mark.get("gpu_seconds") or 0),
        gpu_seconds_lost=float(mark.get("gpu_seconds_lost") or 0),
    )


def _pruned_row(study: str, trial: str, entry: dict[str, Any], order: list[str]) -> TrialRow:
    """The row of a trial a search pruned, from what the study record was told of it."""
    raw = entry.get("params")
    params = raw if isinstance(raw, dict) else {}
    return TrialRow(
        study=study,
        trial=trial,
        state=TrialState.PRUNED.value,
        attempt=0,
        params=in_order(params, order),
        result=entry.get("result") if isinstance(entry.get("result"), dict) else None,
        gpu_seconds=float(entry.get("gpu_seconds") or 0),
        index=entry.get("index") if isinstance(entry.get("index"), int) else None,
        finished=float(entry["at"]) if isinstance(entry.get("at"), int | float) else None,
    )


def study_row(record: StudyRecord, rows: list[TrialRow], now: float) -> StudyRow:
    """A study's figures, counted from its trial rows (so they never disagree with them)."""
    counts = {s: 0 for s in ORDER}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    # trials with no row are waiting too (status lists them only for one study: roster.py)
    counts[TrialState.WAITING.value] += max(0, record.trials - len(rows))
    ended = [
        r.finished
        for r in rows
        if r.state in (TrialState.SUCCEEDED.value, TrialState.PRUNED.value, TrialState.FAILED.value)
    ]
    all_ended = len(ended) == len(rows) and len(rows) >= record.trials > 0 and None not in ended
    return StudyRow(
        study=record.study,
        critical=record.critical,
        drained=record.drained,
        trials=record.trials,
        states=counts,
        in_flight=counts["pending"] + counts["running"] - sum(1 for r in rows if r.queued),
        target=record.target,
        decision=record.reason,
        attempts=sum(r.attempt + 1 for r in rows if r.attempt >= 0 and r.state != TrialState.WAITING.value),
        preemptions=sum(r.preemptions for r in rows),
        failures=sum(r.failures for r in rows),
        gpu_hours=sum(r.gpu_seconds for r in rows) / 3600,
        gpu_hours_lost=sum(r.gpu_seconds_lost for r in rows) / 3600,
        api=api_quota_of(record, now),
        started=min((r.created for r in rows if r.created is not None), default=None),
        finished=max(e for e in ended if e is not None) if all_ended else None,
        breaker=record.breaker,
        gpu_hours_saved=saved_by_pruning(rows) / 3600,
    )


def saved_by_pruning(rows: list[TrialRow]) -> float:
    """GPU-seconds pruning saved: for each pruned trial, what a trial that ran to the end
    used on average (the study's succeeded trials) less what it used; 0 before any ended."""
    whole = [r.gpu_seconds for r in rows if r.state == TrialState.SUCCEEDED.value and r.gpu_seconds > 0]
    if not whole:
        return 0.0
    mean = sum(whole) / len(whole)
    return sum(max(0.0, mean - r.gpu_seconds) for r in rows if r.state == TrialState.PRUNED.value)


def run_start(job: dict[str, Any], pod_start: float | None) -> float | None:
    """When the attempt's gang last started running: Volcano's transition to Running, or
    the first pod's start for a batch/v1 Job (which records none)."""
    return pod_start if is_batch(job) else timestamp(transition(job, "Running"))


def latest_slim(jobs: Iterable[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, dict[str, Any]]]:
    """(study, trial) → (attempt, slim job) of the highest attempt among `jobs`."""
    latest: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for job in jobs:
        trial, attempt, slim = slim_job(job)
        key = (slim["metadata"]["labels"].get(labels.STUDY, ""), trial)
        if key not in latest or attempt > latest[key][0]:
            latest[key] = (attempt, slim)
    return latest


# -- the summary a submit loop keeps in its study record ---------------------------------

SUMMARY_KEY = "summary"


def summary_data(row: StudyRow, at: float) -> dict[str, str]:
    """The record keys that carry a study row computed at wall time `at`."""
    return {SUMMARY_KEY: json.dumps({**asdict(row), "as_of": at}, sort_keys=True)}


def summary_of(configmap: dict[str, Any], now: float, fresh: float) -> StudyRow | None:
    """The study row a submit loop stored, if it is at most `fresh` seconds old, or final
    (every trial finished: nothing changes any more), else None."""
    try:
        data = json.loads((configmap.get("data") or {}).get(SUMMARY_KEY) or "null")
        row = StudyRow(**data) if isinstance(data, dict) else None
    except (TypeError, ValueError):
        return None
    if row is None or row.as_of is None:
        return None
    record = parse_record(configmap)
    final = ended_count(row.states) >= row.trials > 0
    if not final and now - row.as_of > fresh:
        return None
    # flags other terminals set since the loop wrote it
    row.drained, row.critical, row.target, row.decision = record.drained, record.critical, record.target, record.reason
    row.api = api_quota_of(record, now)
    row.breaker = record.breaker
    return row
