"""The roster: every trial of a study, created or not, as its record's study expands.

The cluster holds a job for each trial created so far; the trials still to come, and the
parameters of those whose job is gone (suspended by `drain`, cleaned up), are known only
from the study the record keeps. `status` of one study lists them all, as it does on Slurm
and YARN (backends/batch/status.py): a trial not created yet is `waiting`, with its parameters.

The expansion is paid only when the rows lack something (fewer trials than the study has,
or a row without its parameters): a study whose every trial has its job costs nothing more.
A closed-loop search asks its trials as results come in: the ones not asked yet have no
parameters to show, so its roster is the trials it has (their marks keep their parameters).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stratctl.backends.kubernetes.objects.record import StudyRecord, parse_record, record_name, space_order
from stratctl.backends.kubernetes.objects.summary import in_order
from stratctl.core import document
from stratctl.errors import StratctlError
from stratctl.run.rows import TrialRow
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.core.space import Trial

NOT_CREATED = "not created yet"


def lacking(record: StudyRecord, rows: Iterable[TrialRow]) -> bool:
    """Whether the rows of the record's study miss a trial or a trial's parameters."""
    names = set()
    for row in rows:
        if not row.params:
            return True
        names.add(row.trial)
    return len(names) < record.trials


def expected(record: StudyRecord) -> list[Trial] | None:
    """The trials the study in the record expands to, in order; None for a closed-loop
    search (its trials are asked as results come in) or a study that cannot be read again
    (a record older than the study file's format, say).

    The study is its spec as the record keeps it (canonical JSON, the fields its file
    set), else the study file's text (a spec above the size kept)."""
    from stratctl.core.space import expand
    from stratctl.core.spec import Study, study_from_document

    try:
        spec = json.loads(record.spec) if record.spec else None
        if isinstance(spec, dict):
            study = Study.model_validate(spec, context={"backend": spec.get("backend")})
        else:
            study = study_from_document(document.parse(record.source, f"<record {record_name(record.study)}>"))
        return None if study.strategy.closed_loop else expand(study)
    except (StratctlError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def complete(
    record: StudyRecord, rows: list[TrialRow], trials: list[Trial] | None, below: str | None = None
) -> list[TrialRow]:
    """The study's rows with what its trials say added (pure): a `waiting` row for each
    trial with no row (only those named before `below`, when given: the rows hold every
    trial up to there), and the parameters and index of rows that lack them; sorted by
    name. A waiting row of a held study (drained, or by the etcd breaker) says so."""
    if trials is None:
        return rows
    by_name = {t.name: t for t in trials}
    order = space_order(record.source)
    out = [_filled(row, by_name.get(row.trial), order) for row in rows]
    seen = {row.trial for row in rows}
    why = NOT_CREATED + ("; the study is drained" if record.held else "")
    out += [
        TrialRow(
            study=record.study,
            trial=t.name,
            state=TrialState.WAITING.value,
            attempt=0,
            params=in_order(dict(t.params), order),
            index=t.index,
            pending=why,
        )
        for t in trials
        if t.name not in seen and (below is None or t.name < below)
    ]
    return sorted(out, key=lambda r: r.trial)


def _filled(row: TrialRow, trial: Trial | None, order: list[str]) -> TrialRow:
    if trial is None or (row.params and row.index is not None):
        return row
    params = row.params or in_order(dict(trial.params), order)
    return replace(row, params=params, index=trial.index if row.index is None else row.index)


def every_trial(cms: list[dict[str, Any]], rows: list[TrialRow]) -> list[TrialRow]:
    """The rows of the studies of these records, with their trials not created yet and the
    parameters of every trial, where the rows lack them."""
    by_study: dict[str, list[TrialRow]] = {}
    for row in rows:
        by_study.setdefault(row.study, []).append(row)
    out: list[TrialRow] = []
    for cm in cms:
        record = parse_record(cm)
        mine = by_study.pop(record.study, [])
        out += complete(record, mine, expected(record)) if lacking(record, mine) else mine
    return out + [row for rest in by_study.values() for row in rest]


def first_trials(record: StudyRecord, first: list[TrialRow], read_all: bool, n: int) -> tuple[list[TrialRow], bool]:
    """The study's first `n` trials by name, created or not, from the first trials read
    (every trial with a job if `read_all`, else every one named up to the last row), and
    whether its trials not created yet could be listed."""
    trials = expected(record)
    if trials is None:
        return first, False
    below = None if read_all or not first else first[-1].trial
    return complete(record, first, trials, below)[:n], True
