"""What `stratctl status` prints, for each output format, from a snapshot (pure).

Without a study: the studies only. With one: its row, then its trials. On a terminal a
rich table fitted to the width; into a pipe the same columns as plain text; `-o name`
one name a line; `-o csv` every column; JSON and YAML snake_case keys and RFC 3339 times.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from stratctl.run.rows import Snapshot, StudyRow, TrialRow
from stratctl.view import tables
from stratctl.view.columns import note_column, rfc3339, run_time, study_columns, study_note, trial_columns
from stratctl.view.plaintext import csv_text, plain


def _study_dict(row: StudyRow, now: float) -> dict[str, Any]:
    data = asdict(row)
    failures = data.pop("failures")
    started, finished = data.pop("started"), data.pop("finished")
    data.update(
        failed_attempts=failures,
        as_of=rfc3339(row.as_of),
        start=rfc3339(started),
        finish=rfc3339(finished),
        done=row.done,
        note=study_note(row, now),
    )
    return data


_TRIAL_FIELDS = [f.name for f in fields(TrialRow)]


def _trial_dict(row: TrialRow, now: float) -> dict[str, Any]:
    data = {name: getattr(row, name) for name in _TRIAL_FIELDS}  # asdict's deep copy costs 5x at 10,000 trials
    failures = data.pop("failures")
    for key in ("started", "finished"):
        data.pop(key)
    took = run_time(row, now)
    data.update(
        failed_attempts=failures,
        created=rfc3339(row.created),
        start=rfc3339(row.started),
        finish=rfc3339(row.finished),
        duration_seconds=None if took is None else round(took, 3),
    )
    return data


def document(snap: Snapshot, with_trials: bool, namespaces: list[str] | None = None) -> dict[str, Any]:
    """The snapshot as JSON-ready data: snake_case keys, RFC 3339 times, durations in
    seconds; each study names its namespace (one per study in `namespaces`)."""
    where = namespaces or [snap.namespace] * len(snap.studies)
    out = {
        "namespace": snap.namespace if namespaces is None else None,
        "taken_at": rfc3339(snap.taken_at),
        "studies": [{"namespace": ns, **_study_dict(s, snap.taken_at)} for ns, s in zip(where, snap.studies)],
    }
    if with_trials:
        out["trials"] = [_trial_dict(t, snap.taken_at) for t in snap.trials]
    return out


def json_text(document: dict[str, Any]) -> str:
    """The document as JSON: indented, each trial on one line (a study of 10,000 trials
    prints in a tenth of the time the indenting encoder takes, and greps line by line)."""
    trials = document.get("trials")
    head = json.dumps({k: v for k, v in document.items() if k != "trials"}, indent=2)
    if trials is None:
        return head
    body = ",\n".join("    " + json.dumps(t) for t in trials)
    return f'{head[:-2]},\n  "trials": [' + (f"\n{body}\n  ]" if trials else "]") + "\n}"


def names(snap: Snapshot, with_trials: bool) -> str:
    items = [t.trial for t in snap.trials] if with_trials else [s.study for s in snap.studies]
    return "".join(f"{name}\n" for name in items)


def csv(snap: Snapshot, with_trials: bool, namespaces: list[str] | None = None) -> str:
    if with_trials:
        return csv_text(trial_columns(snap.trials, snap.taken_at, wide=True))
    return csv_text(
        study_columns(snap.studies, snap.taken_at, True, namespaces) + [note_column(snap.studies, snap.taken_at)]
    )


def text(
    snap: Snapshot, with_trials: bool, wide: bool = False, limit: int | None = None, namespaces: list[str] | None = None
) -> str:
    """Plain columns for a pipe: the studies (their note last), then a blank line and the trials."""
    out = plain(
        study_columns(snap.studies, snap.taken_at, wide, namespaces) + [note_column(snap.studies, snap.taken_at)]
    )
    if with_trials:
        rows = snap.trials[:limit] if limit else snap.trials
        out += "\n" + plain(trial_columns(rows, snap.taken_at, wide))
    return out


def picture(
    snap: Snapshot,
    with_trials: bool,
    width: int | None,
    wide: bool = False,
    limit: int | None = None,
    namespaces: list[str] | None = None,
) -> RenderableType:
    """The rich tables for a terminal `width` columns wide."""
    parts: list[RenderableType] = [tables.studies_table(snap.studies, snap.taken_at, width, wide, namespaces)]
    if with_trials:
        parts += [Text(""), tables.table(snap.trials, snap.taken_at, limit, snap.total_trials, width, wide)]
    return Group(*parts)


def hidden(snap: Snapshot, limit: int | None) -> str:
    """The line saying how many trials a table left out (`--limit`), or ""."""
    from stratctl.view.columns import plural

    shown = min(len(snap.trials), limit) if limit else len(snap.trials)
    more = max(snap.total_trials or 0, len(snap.trials)) - shown
    return f"{plural(more, 'more trial')} not shown (--limit)" if more > 0 else ""


def empty_line(namespace: str | None) -> str:
    return f"No studies found in namespace {namespace}." if namespace else "No studies found in any namespace."


def best_line(row: TrialRow, ranking: str) -> str:
    """`best trial by loss (lowest): NAME (lr=0.1, layers=4): loss 0.2313, accuracy 0.912`"""
    from stratctl.view.columns import value

    name, order = ranking.lstrip("-+"), "highest" if ranking.startswith("-") else "lowest"
    params = ", ".join(f"{k}={value(v)}" for k, v in row.params.items())
    metrics = ", ".join(f"{k} {value(v)}" for k, v in (row.result or {}).items())
    return f"best trial by {name} ({order}): {row.trial}" + (f" ({params})" if params else "") + f": {metrics}"
