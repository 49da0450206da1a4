"""Status rows as columns, and which of them fit a width (pure).

A trial table has one column per parameter and one per result metric, as `plan` has;
`trial_columns` and `study_columns` build them from rows, formatted for people (`cells`:
`4h11m`, `0.2313`) and for programs (`raw`: full precision, RFC 3339 times). The rich
table (`tables`), the plain text a pipe gets and `-o csv` (`plaintext`) all draw the same
columns, so they never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stratctl.run.rows import ORDER, StudyRow, TrialRow

GAP = 3  # characters between two columns of a table (as `tables` draws them)


@dataclass
class Column:
    key: str  # snake_case: the header of plain text and CSV
    header: str  # what the rich table shows
    numeric: bool = False  # right-aligned
    cells: list[str] = field(default_factory=list)
    raw: list[Any] = field(default_factory=list)
    sentence: bool = False  # free text: the last column, wrapped at words in a table
    priority: int = 0  # which columns a narrow table keeps first (lowest first)
    csv_key: str = ""  # the CSV header when it differs (`age_seconds`: CSV has numbers, not `4h11m`)

    def add(self, cell: str, raw: Any = None) -> None:
        self.cells.append(cell)
        self.raw.append(cell if raw is None and cell != "-" else raw)

    @property
    def width(self) -> int:
        return max([len(self.header)] + [len(line) for c in self.cells for line in c.split("\n")])


# ------------------------------------------------------------------ words and numbers


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def duration(seconds: float | None) -> str:
    """`45s`, `3m05s`, `14m`, `4h11m`, `2d3h`: two units at most, like kubectl's ages."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m" if s % 3600 // 60 else f"{s // 3600}h"
    return f"{s // 86400}d{s % 86400 // 3600}h" if s % 86400 // 3600 else f"{s // 86400}d"


def rfc3339(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def value(v: Any) -> str:
    """A parameter or metric for people: 4 significant digits, JSON for structures."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int | str):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _names(rows: list[dict[str, Any] | None]) -> list[str]:
    seen: dict[str, None] = {}
    for d in rows:
        for key in d or {}:
            seen.setdefault(key, None)
    return list(seen)


def _free(key: str, taken: set[str], prefix: str) -> str:
    return key if key not in taken else f"{prefix}.{key}"


# ------------------------------------------------------------------ trials


def run_time(row: TrialRow, now: float) -> float | None:
    """How long the latest attempt ran (runs): from its start to its end (or now)."""
    start = row.started if row.started is not None else (row.created if row.finished is not None else None)
    if start is None:
        return None
    return (row.finished if row.finished is not None else now) - start


def why(row: TrialRow) -> str:
    """A sentence on a row that needs one: why it failed, why its gang waits, why it was requeued."""
    parts = []
    if row.state == "failed":
        code = f"exit {row.exit_code}" if row.exit_code is not None else ""
        parts.append(": ".join(filter(None, [code, row.reason])) or "failed")
    elif row.pending:
        parts.append(row.pending)
    if row.requeued:
        parts.append(f"attempt {row.attempt} requeued: {row.requeued}")
    return "; ".join(parts)


def _column(
    key: str,
    header: str | None = None,
    numeric: bool = False,
    cells: Iterable[str] = (),
    raw: list[Any] | None = None,
    sentence: bool = False,
    priority: int = 1,
    csv_key: str = "",
) -> Column:
    """A column of `cells`, with their `raw` values for JSON and CSV (none: the cells)."""
    c = Column(key, header or key.replace("_", " "), numeric, sentence=sentence, priority=priority, csv_key=csv_key)
    for i, cell in enumerate(cells):
        c.add(cell, None if raw is None else raw[i])
    return c


def _number(key: str, header: str, values: list[Any]) -> Column:
    return _column(key, header, True, [str(v) for v in values], list(values))


def trial_columns(rows: list[TrialRow], now: float, wide: bool = False, study: bool = False) -> list[Column]:
    """The trial table: `wide` adds the index, job, times, preemptions, failed attempts and
    GPU-hours; `study` a column naming each row's study (rows of several studies)."""
    cols = _trial_names(rows, wide, study)
    cols += _values(rows, {c.key for c in cols} | {"age", "duration", "exit", "why"})
    if wide:
        cols += _trial_accounts(rows)
    cols += _trial_times(rows, now)
    if wide:  # a failed row's `why` starts with its exit code
        cells = [value(r.exit_code) for r in rows]
        cols.append(_column("exit_code", "exit", True, cells, [r.exit_code for r in rows], priority=6))
    texts = [why(r) for r in rows]
    if wide or any(texts):
        cells = [t or "-" for t in texts]
        cols.append(_column("why", cells=cells, raw=[t or None for t in texts], sentence=True, priority=2))
    return cols


def _trial_names(rows: list[TrialRow], wide: bool, study: bool) -> list[Column]:
    """What names each trial: its index (wide), study, name, state, attempt and queue."""
    cols = []
    if wide:
        cols.append(_column("index", "#", True, [value(r.index) for r in rows], [r.index for r in rows], priority=0))
    if study:
        cols.append(_column("study", cells=[r.study for r in rows], priority=0))
    cols.append(_column("trial", cells=[r.trial for r in rows], priority=0))
    cols.append(_column("state", cells=[r.state for r in rows], priority=0))
    cols.append(
        _column(
            "attempt",
            numeric=True,
            cells=["-" if r.attempt < 0 else str(r.attempt) for r in rows],
            raw=[None if r.attempt < 0 else r.attempt for r in rows],
            priority=5,
        )
    )
    if len({r.queue for r in rows if r.queue}) > 1:  # trials spread over several queues (queue fallback)
        cells = [r.queue or "-" for r in rows]
        cols.append(_column("queue", cells=cells, raw=[r.queue or None for r in rows], priority=5))
    return cols


def _values(rows: list[TrialRow], taken: set[str]) -> list[Column]:
    """A column per parameter, then per result, named apart from the keys `taken`."""
    cols = []
    sides: tuple[tuple[str, Callable[[TrialRow], dict[str, Any] | None]], ...] = (
        ("param", lambda r: r.params),
        ("result", lambda r: r.result),
    )
    for prefix, name_of in sides:
        for name in _names([name_of(r) for r in rows]):
            values = [(name_of(r) or {}).get(name) for r in rows]
            key = _free(name, taken, prefix)
            taken.add(key)
            numeric = all(_is_number(v) for v in values if v is not None)
            cols.append(_column(key, key, numeric, [value(v) for v in values], values))
    return cols


def _trial_accounts(rows: list[TrialRow]) -> list[Column]:
    """The wide table's job, preemptions, failed attempts, GPU-hours and times."""
    cols = [
        _column("job", cells=[r.job or "-" for r in rows]),
        _column(
            "preemptions", numeric=True, cells=[str(r.preemptions) for r in rows], raw=[r.preemptions for r in rows]
        ),
        _column(
            "failed_attempts", "failed attempts", True, [str(r.failures) for r in rows], [r.failures for r in rows]
        ),
        _column(
            "gpu_hours",
            "GPU-h",
            True,
            [f"{r.gpu_seconds / 3600:.2f}" for r in rows],
            [r.gpu_seconds / 3600 for r in rows],
        ),
    ]
    times: tuple[tuple[str, Callable[[TrialRow], float | None]], ...] = (
        ("created", lambda r: r.created),
        ("start", lambda r: r.started),
        ("finish", lambda r: r.finished),
    )
    for key, at in times:
        cols.append(_column(key, cells=[rfc3339(at(r)) or "-" for r in rows], raw=[rfc3339(at(r)) for r in rows]))
    return cols


def _trial_times(rows: list[TrialRow], now: float) -> list[Column]:
    """How long ago each trial was created, and how long it has run."""
    return [
        _column(
            "age",
            numeric=True,
            cells=[duration(now - r.created) if r.created else "-" for r in rows],
            raw=[None if not r.created else round(now - r.created, 3) for r in rows],
            priority=4,
            csv_key="age_seconds",
        ),
        _column(
            "duration",
            numeric=True,
            cells=[duration(run_time(r, now)) for r in rows],
            raw=[None if (t := run_time(r, now)) is None else round(t, 3) for r in rows],
            priority=3,
            csv_key="duration_seconds",
        ),
    ]


# ------------------------------------------------------------------ studies


def study_note(row: StudyRow, now: float | None = None) -> str:
    """The study's outcome once every trial ended, else the submit loop's latest decision."""
    s = row.states
    if row.done:
        took = f" in {duration(row.finished - row.started)}" if row.finished and row.started else ""
        pruned = f", {s['pruned']} pruned" if s.get("pruned") else ""
        return f"finished: {s.get('succeeded', 0)} succeeded, {s.get('failed', 0)} failed{pruned}{took}"
    note = row.decision or "no decision recorded"
    if row.driver:
        note = f"driven by {row.driver}: {note}"
    if row.target is not None and row.in_flight > row.target:
        note += (
            f"; {row.in_flight} in flight above the target of {row.target}: no new trial until enough of them finish"
        )
    if row.as_of is not None and now is not None:
        note += f" (figures as of {duration(now - row.as_of)} ago)"
    return note


def by_state(row: StudyRow) -> str:
    return ", ".join(f"{n} {state}" for state, n in ((s, row.states.get(s, 0)) for s in ORDER) if n) or "-"


def study_columns(
    rows: list[StudyRow],
    now: float,
    wide: bool = False,
    namespaces: list[str] | None = None,
    states_in_words: bool = False,
) -> list[Column]:
    """The studies table: trials by state (a column per state: every state when `wide`,
    else those some study has; or, for people, one column of words), in flight and
    target, GPU-hours; `wide` adds attempts, failed attempts, preemptions, GPU-hours lost
    and age. `namespaces` (one per row) adds that column."""
    cols: list[Column] = []
    if namespaces is not None:
        cols.append(_column("namespace", "namespace", False, namespaces, priority=0))
    cols.append(_column("study", "study", False, [r.study for r in rows], priority=0))
    cols.append(_number("trials", "trials", [r.trials for r in rows]))
    if states_in_words:
        words = Column("states", "by state", sentence=True, priority=1)
        for r in rows:
            words.add(by_state(r))
        cols.append(words)
    for state in ORDER if not states_in_words else ():
        if wide or any(r.states.get(state) for r in rows):
            cols.append(_number(state, state, [r.states.get(state, 0) for r in rows]))
    cols.append(_number("in_flight", "in flight", [r.in_flight for r in rows]))
    cells = ["-" if r.done or r.target is None else str(r.target) for r in rows]
    cols.append(_column("target", "target", True, cells, [None if r.done else r.target for r in rows]))
    if wide:
        cols.append(_number("attempts", "attempts", [r.attempts for r in rows]))
        cols.append(_number("failed_attempts", "failed attempts", [r.failures for r in rows]))
        cols.append(_number("preemptions", "preemptions", [r.preemptions for r in rows]))
    cols.append(_column("gpu_hours", "GPU-h", True, [f"{r.gpu_hours:.2f}" for r in rows], [r.gpu_hours for r in rows]))
    if wide or any(r.states.get("pruned") for r in rows):
        saved = [r.gpu_hours_saved for r in rows]
        cols.append(_column("gpu_hours_saved", "GPU-h saved", True, [f"{h:.2f}" for h in saved], saved))
    if wide:
        cols += _study_wide(rows, now)
    return cols


def _study_wide(rows: list[StudyRow], now: float) -> list[Column]:
    """The wide table's GPU-hours lost, age and flags of each study."""
    lost = [r.gpu_hours_lost for r in rows]
    return [
        _column("gpu_hours_lost", "GPU-h lost", True, [f"{h:.2f}" for h in lost], lost),
        _column(
            "age",
            "age",
            True,
            [duration(now - r.started) if r.started else "-" for r in rows],
            [None if not r.started else round(now - r.started, 3) for r in rows],
        ),
        _column(
            "flags",
            "flags",
            False,
            [
                ",".join(
                    f
                    for f, on in (
                        ("critical", r.critical),
                        ("drained", r.drained),
                        ("breaker-drained", bool(r.breaker)),
                    )
                    if on
                )
                or "-"
                for r in rows
            ],
        ),
    ]


def note_column(rows: list[StudyRow], now: float) -> Column:
    c = Column("note", "note", sentence=True)
    for r in rows:
        c.add("; ".join(filter(None, [study_note(r, now), r.api])))
    return c


# ------------------------------------------------------------------ fitting a width


SENTENCE = 20  # the narrowest a sentence column is drawn (wrapped at words)


def fit(columns: list[Column], width: int) -> tuple[list[Column], list[Column]]:
    """The columns that fit in `width` without cutting a word, in their order: priority 0
    always, then by priority while they fit; a sentence column needs SENTENCE characters
    at least (a table wraps it at words). Returns (shown, left out)."""
    chosen: set[int] = set()
    used = 0
    for i in sorted(range(len(columns)), key=lambda i: columns[i].priority):
        c = columns[i]
        need = (min(c.width, SENTENCE) if c.sentence else c.width) + (GAP if chosen else 0)
        if c.priority == 0 or used + need <= width:
            chosen.add(i)
            used += need
    return ([c for i, c in enumerate(columns) if i in chosen], [c for i, c in enumerate(columns) if i not in chosen])
