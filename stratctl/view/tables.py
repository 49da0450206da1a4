"""Tables of studies and trials for a terminal: rows in, a picture out (`rich`)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stratctl.engine.summary import StudyRow, TrialRow


STYLE = {"running": "green", "pending": "yellow", "preempted": "magenta", "suspended": "cyan", "retrying": "yellow",
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


def studies_table(rows: list[StudyRow], now: float | None = None) -> Group:
    """One line of figures per study, then each study's latest decision on a line of its
    own (they are sentences; as a column they made the table unreadable at 80 columns). A
    row the submit loop summarised says how old it is."""
    table = Table(title="studies", title_justify="left", header_style="bold")
    for column in ("study", "trials by state", "in flight", "attempts", "preempted", "failed", "GPU-h used/lost"):
        numeric = column not in ("study", "trials by state")
        table.add_column(column, justify="right" if numeric else "left", overflow="fold",
                         max_width=9 if numeric else None)
    notes = []
    for s in rows:
        states = ", ".join(f"[{STYLE.get(k, '')}]{v} {k}[/]" for k, v in s.states.items() if v)
        flags = (" [red]critical[/]" if s.critical else "") + (" [cyan]drained[/]" if s.drained else "")
        target = "-" if s.target is None else str(s.target)
        table.add_row(f"{s.study}{flags}", f"{s.trials}: {states}", f"{s.in_flight}/{target}", str(s.attempts),
                      str(s.preemptions), str(s.failures), f"{s.gpu_hours:.2f}/{s.gpu_hours_lost:.2f}")
        note = Text(f"{s.study}: ", style="bold")
        note.append(s.decision or "no decision recorded")
        if s.as_of is not None and now is not None:
            note.append(f" (figures as of {age(now - s.as_of)} ago)", style="dim")
        notes.append(note)
        if s.api:  # the API quota pushes back: say whether it, not the GPUs, is what limits the study
            notes.append(Text(f"{s.study}: {s.api}", style="yellow"))
    return Group(table, *notes)


def table(rows: list[TrialRow], now: float, limit: int | None = None, total: int | None = None) -> Table:
    """The trials, one line each, in the order given; `total` counts the rows not read."""
    shown = rows if not limit else rows[:limit]
    more = (len(rows) if total is None else max(total, len(rows))) - len(shown)
    out = Table(header_style="bold", caption=f"{more} more trials not shown (--limit)" if more > 0 else None)
    for column in ("trial", "state", "attempt", "age", "params", "result / why pending"):
        out.add_column(column, justify="right" if column in ("attempt", "age") else "left",
                       overflow="fold" if column.startswith("result") else "ellipsis")
    for r in shown:
        state = f"[{STYLE.get(r.state, '')}]{r.state}[/]"
        if r.preemptions:
            state += f" ({r.preemptions}× preempted)"
        if r.failures:
            state += f" ({r.failures}× failed)"
        detail = _brief(r.result) if r.result is not None else r.pending
        if r.requeued:
            detail = "; ".join(filter(None, [detail, f"attempt {r.attempt} requeued: {r.requeued}"]))
        out.add_row(r.trial, state, "-" if r.attempt < 0 else str(r.attempt),
                    age(now - r.created) if r.created else "-", _brief(r.params, 40), detail or "")
    return out
