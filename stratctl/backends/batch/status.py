"""`stratctl status STUDY_FILE` of a study on a batch scheduler (backends/batch/scheduler.py): its
trials as the scheduler and their output directories show them, in the same rows as a
Kubernetes study's (backends/kubernetes/objects/summary.py), so every output format of `status` works unchanged."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from stratctl.attempt import Attempt
from stratctl.backends.batch.driverfile import FileStore
from stratctl.backends.batch.scheduler import Scheduler, study_directory
from stratctl.backends.batch.search import Journal, study_trials
from stratctl.backends.batch.trials import gangs, given_up_of, limits_of, trial_state
from stratctl.core.space import Trial, attempt_name
from stratctl.core.spec import Study
from stratctl.run.recovery import limit_of
from stratctl.run.rows import Snapshot, StudyRow, TrialRow
from stratctl.trialstate import TrialState


def snapshot(study: Study, scheduler: Scheduler, now: float | None = None) -> Snapshot:
    """The study's rows as the scheduler's latest attempts of its trials tell them."""
    now = time.time() if now is None else now
    seen = scheduler.attempts()
    given_up = given_up_of(scheduler)
    limits = limits_of(study)
    told: dict[str, dict[str, Any]] = {}
    trials = study_trials(study)
    if study.strategy.closed_loop:  # how the trials its search asked that ended were told
        told = Journal(study_directory(study)).told()
    gpus_of = {name: sum(gang) for name, gang in gangs(study, trials).items()}  # each trial's, all its tasks
    rows = []
    for trial in trials:
        attempt = seen.get(trial.name)
        state = trial_state(attempt, limits, trial.name in given_up) if attempt else TrialState.WAITING
        why = given_up.get(trial.name, "")
        trial_row = _trial_row(study, trial, attempt, state, why, gpus_of[trial.name], scheduler, now)
        entry = told.get(trial.name) or {}
        if entry.get("state") == "pruned":  # stopped by the pruner: its last reported value is its result
            pruned = TrialState.PRUNED.value
            trial_row = replace(trial_row, state=pruned, result=entry.get("result"), reason="", failures=0)
        rows.append(trial_row)
    row = replace(_study_row(study, rows), driver=driver_of(study, now))
    unasked = max(0, (study.strategy.trials or 0) - len(rows)) if study.strategy.closed_loop else 0
    if unasked:  # the search's budget not asked yet: waiting, and the study not done
        waiting = TrialState.WAITING.value
        row = replace(
            row, trials=row.trials + unasked, states={**row.states, waiting: row.states.get(waiting, 0) + unasked}
        )
    return Snapshot(scheduler.where, now, [row], rows)


def driver_of(study: Study, now: float) -> str:
    """Who drives the study, as its live mark in the study's directory says ("" when no loop holds it)."""
    mark, _ = FileStore(study_directory(study)).read()
    if mark is None or not mark.live(now):
        return ""
    return f"{mark.holder} since {time.strftime('%H:%M:%S', time.localtime(mark.since))}"


def _trial_row(
    study: Study,
    trial: Trial,
    attempt: Attempt | None,
    state: TrialState,
    given_up: str,
    gpus: int,
    scheduler: Scheduler,
    now: float,
) -> TrialRow:
    """A trial's row from its latest attempt (None: not submitted yet); `given_up`: why the
    trial was given up, if it was."""
    failed_why = attempt.reason if attempt and state is TrialState.FAILED and not attempt.exit_code else ""
    # the attempt a give-up for preemptions ended (Slurm's cancel): not a failure, nor its reason
    ended_by_give_up = limit_of(given_up) == "preemptions"
    if ended_by_give_up:
        failed_why = ""
    number = attempt.attempt if attempt else 0
    ran = attempt.run_seconds(now) + attempt.earlier_seconds if attempt else 0.0
    return TrialRow(
        study=study.name,
        trial=trial.name,
        state=state.value,
        attempt=number,
        params=dict(trial.params),
        job=attempt_name(trial, number),
        phase=attempt.native_state if attempt else "",
        pending=attempt.reason if attempt and state is TrialState.PENDING else "",
        result=scheduler.result(trial.name),
        preemptions=attempt.preemptions if attempt else 0,
        failures=attempt.failures + (attempt.state is TrialState.FAILED and not ended_by_give_up) if attempt else 0,
        index=trial.index,
        exit_code=attempt.exit_code if attempt and attempt.exit_code else None,
        # why a failed attempt with no exit code failed (the signal that killed it, the scheduler's words)
        # and why it was given up, as on Kubernetes
        reason="; ".join(filter(None, [failed_why, given_up])) if state is TrialState.FAILED else "",
        queue=attempt.queue if attempt and attempt.queue else scheduler.queue,
        gpu_seconds=ran * gpus,
        gpu_seconds_lost=attempt.earlier_seconds * gpus if attempt else 0.0,
        started=attempt.started if attempt else None,
        finished=attempt.ended if attempt else None,
    )


def _study_row(study: Study, rows: list[TrialRow]) -> StudyRow:
    """The study's figures, counted from its trial rows."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    return StudyRow(
        study=study.name,
        critical=study.critical,
        drained=counts.get(TrialState.SUSPENDED.value, 0) > 0,
        trials=len(rows),
        states=counts,
        in_flight=counts.get(TrialState.PENDING.value, 0) + counts.get(TrialState.RUNNING.value, 0),
        target=None,
        decision="",
        attempts=sum(r.attempt + 1 for r in rows if r.state != TrialState.WAITING.value),
        preemptions=sum(r.preemptions for r in rows),
        gpu_hours=sum(r.gpu_seconds for r in rows) / 3600,
        gpu_hours_lost=sum(r.gpu_seconds_lost for r in rows) / 3600,
        failures=sum(r.failures for r in rows),
    )
