"""Tables of studies and trials for a terminal: rows in, a picture out (`rich`).

The columns come from `columns`; here they are fitted to the terminal's width (the trial
name and state always, then as many others as fit without cutting a word; the ones left
out are named under the table) and drawn with the states in colour.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from stratctl.run.rows import StudyRow, TrialRow
from stratctl.view.columns import GAP, Column, duration, fit, plural, study_columns, study_note, trial_columns

STYLE = {
    "running": "green",
    "pending": "yellow",
    "preempted": "magenta",
    "suspended": "cyan",
    "retrying": "yellow",
    "succeeded": "bold green",
    "pruned": "blue",
    "failed": "red",
    "waiting": "dim",
}

age = duration  # the name older callers use


def _draw(
    columns: list[Column], width: int | None, title: str | None = None, caption: list[str] | None = None
) -> tuple[Table, list[Column]]:
    """The table of the columns that fit, and the columns left out (named in its caption,
    but for a sentence column, which the caller prints under the table)."""
    shown, left = fit(columns, width) if width else (columns, [])
    notes = list(caption or [])
    named = [c.header for c in left if not c.sentence]
    if named:
        notes.append(f"not shown: {', '.join(named)} (use a wider terminal or -o wide)")
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
        title=title,
        title_justify="left",
        caption="\n".join(notes) or None,
        caption_justify="left",
    )
    for c in shown:
        table.add_column(
            c.header,
            justify="right" if c.numeric else "left",
            no_wrap=not c.sentence,
            overflow="fold",
            min_width=None if c.sentence else c.width,
        )
    for i in range(len(columns[0].cells) if columns else 0):
        table.add_row(*(Text(c.cells[i], style=STYLE.get(c.cells[i], "") if c.key == "state" else "") for c in shown))
    return table, left


def studies_table(
    rows: list[StudyRow],
    now: float | None = None,
    width: int | None = None,
    wide: bool = False,
    namespaces: list[str] | None = None,
) -> Group:
    """One line of figures per study, then each study's outcome or latest decision on a
    line of its own (they are sentences; as a column they made the table unreadable)."""
    now_ = now if now is not None else 0.0
    columns = study_columns(rows, now_, wide, namespaces, states_in_words=True)
    if width:  # trials by state on one line if it fits, else one state a line (never "2" apart from "failed")
        states = next(c for c in columns if c.key == "states")
        others = sum(c.width + GAP for c in fit([c for c in columns if c is not states], width)[0])
        if states.width > width - others:
            states.cells = [cell.replace(", ", "\n") for cell in states.cells]
            states.sentence = False
    table, _ = _draw(columns, width, title=plural(len(rows), "study", "studies"))
    notes = []
    for s in rows:
        flags = (
            (" [critical]" if s.critical else "")
            + (" [drained]" if s.drained else "")
            + (" [breaker-drained]" if s.breaker else "")
        )
        note = Text(f"{s.study}{flags}: ", style="bold")
        note.append(study_note(s, now))
        notes.append(note)
        if s.breaker:  # throttle.on_breaker: drain, and the etcd breaker holds the study
            notes.append(
                Text(
                    f"{s.study}: etcd breaker: {s.breaker}; the submit loop resumes them when it clears", style="yellow"
                )
            )
        if s.api:  # the API quota pushes back: say whether it, not the GPUs, is what limits the study
            notes.append(Text(f"{s.study}: {s.api}", style="yellow"))
    return Group(table, *notes)


def table(
    rows: list[TrialRow],
    now: float,
    limit: int | None = None,
    total: int | None = None,
    width: int | None = None,
    wide: bool = False,
) -> RenderableType:
    """The trials, one line each, in the order given; `total` counts the rows not read.
    When the `why` column does not fit, its sentences follow the table, one per trial."""
    shown = rows if not limit else rows[:limit]
    more = (len(rows) if total is None else max(total, len(rows))) - len(shown)
    caption = [f"{plural(more, 'more trial')} not shown (--limit)"] if more > 0 else []
    columns = trial_columns(shown, now, wide)
    drawn, left = _draw(columns, width, caption=caption)
    sentences = next((c for c in left if c.sentence), None)
    if sentences is None:
        return drawn
    lines = [
        Text.assemble((f"{trial}: ", "bold"), text)
        for trial, text in zip(columns[[c.key for c in columns].index("trial")].cells, sentences.cells)
        if text != "-"
    ]
    return Group(drawn, *lines)
