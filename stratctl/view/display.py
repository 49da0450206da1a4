"""How a running submission shows itself: a live rich panel on a terminal, log lines in CI.

Both take `Progress` snapshots from the submit loop; the picture is a pure function of
the snapshot (`progress_table`), so it is tested without a terminal. rich is loaded by
the panel alone: log lines and summaries (CI, `-o json`) start without it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from stratctl.run.progress import Progress
from stratctl.view.columns import plural

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.table import Table


def progress_table(p: Progress) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    finished = p.succeeded + p.failed + p.pruned
    table.add_row("study", p.study)
    pruned = f", {p.pruned} pruned" if p.pruned else ""
    table.add_row("trials", f"{finished}/{p.total} finished ({p.succeeded} succeeded{pruned}, {p.failed} failed)")
    table.add_row(
        "in flight",
        f"{p.in_flight} of target {p.target} ({p.running} running, {p.pending} pending gangs), {p.waiting} waiting"
        + ("  [yellow]holding[/]" if p.hold else ""),
    )
    table.add_row("decision", p.reason or "-")
    if p.breaker:  # throttle.on_breaker: drain, while the etcd breaker moves or holds the study
        table.add_row("etcd breaker", Text(p.breaker, style="yellow"))
    if p.blocked:  # gangs wait past the grace period: the cause, as the cluster states it
        table.add_row("why pending", Text(f"{p.stuck} gang(s): {p.blocked}", style="yellow"))
    if p.free_gpus is not None:
        table.add_row(
            "cluster",
            f"{plural(p.free_gpus, 'free GPU')}, room for {plural(p.gangs_fit or 0, 'more gang')}, "
            f"{(p.fragmentation or 0) * 100:.0f}% fragmented"
            + (f", API p90 {p.latency_p90 * 1000:.0f}ms" if p.latency_p90 is not None else "")
            + (f", etcd p99 {p.etcd_p99 * 1000:.0f}ms" if p.etcd_p99 is not None else "")
            + (
                f", scheduling p90 {p.scheduling_latency_p90 * 1000:.0f}ms"
                if p.scheduling_latency_p90 is not None
                else ""
            ),
        )
    table.add_row("submitted", f"{p.created} created, {p.existing} already there, {len(p.errors)} refused")
    table.add_row(
        "throttle",
        f"{p.throttle_waits} waits ({p.throttle_wait_seconds:.1f}s), "
        + (
            f"{p.throttled_429} refused for {p.limit_words}, {p.api_requests} {p.calls_word}, {p.api_writes} "
            f"{p.create_command}"
            if p.create_command
            else f"{p.throttled_429} × HTTP 429, {p.api_requests} requests, {p.api_writes} writes"
        ),
    )
    if p.api_note:  # the API quota pushes back: whether it, not the GPUs, limits the study
        table.add_row(
            "API quota", Text(p.api_note.removeprefix("API quota: "), style="yellow" if p.api_limited else "")
        )
    if p.watch_problem:  # the numbers above may be stale: the watch feeding them is down
        table.add_row("watches", Text(f"{p.watch_problem} ({p.watch_errors} failures so far)", style="red"))
    elif p.watch_errors:
        table.add_row("watches", f"healthy again ({p.watch_errors} failures so far)")
    return table


def render_progress(p: Progress) -> Group:
    from rich.console import Group
    from rich.progress_bar import ProgressBar

    finished = p.succeeded + p.failed + p.pruned + len(p.errors)
    bar = ProgressBar(total=max(p.total, 1), completed=finished, width=60)
    return Group(progress_table(p), bar)


class LiveDisplay:
    """A rich Live panel, refreshed on every update; events scroll above it."""

    def __init__(self, console: Console):
        self.console = console
        self.live: Live | None = None

    def __enter__(self) -> LiveDisplay:
        from rich.live import Live

        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.live:
            self.live.__exit__(kind, error, traceback)

    def update(self, progress: Progress) -> None:
        if self.live:
            self.live.update(render_progress(progress))

    def event(self, message: str) -> None:
        from rich.text import Text

        # console.log would append this module's file:line to every line: it is not the user's business
        self.console.print(Text(time.strftime("[%H:%M:%S] "), style="dim") + Text(message))


class LogDisplay:
    """Plain timestamped lines for CI logs: one per event, one per change of counts."""

    def __init__(self, stream: TextIO = sys.stderr, clock: Callable[[], float] = time.time):
        self.stream = stream
        self.clock = clock
        self._last: tuple[Any, ...] | None = None

    def __enter__(self) -> LogDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _line(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.clock()))
        print(f"{stamp} {text}", file=self.stream, flush=True)

    def update(self, p: Progress) -> None:
        key = (
            p.created,
            p.existing,
            p.pending,
            p.queued,
            p.running,
            p.succeeded,
            p.failed,
            p.pruned,
            len(p.errors),
            p.throttled_429,
            p.watch_problem,
            p.blocked,
        )
        if key == self._last:
            return
        self._last = key
        self._line(
            f"{p.study}: {p.succeeded + p.failed + p.pruned}/{p.total} finished ({p.failed} failed"
            + (f", {p.pruned} pruned), " if p.pruned else "), ")
            + f"{p.in_flight}/{p.target} in flight ({p.pending} pending), "
            + (f"{p.queued} queued in blocks, " if p.queued else "")
            + f"{p.waiting} waiting, "
            f"{p.created} created, "
            + (f"{p.throttled_429} refused for {p.limit_words}" if p.create_command else f"{p.throttled_429} x 429")
            + (f"; {p.watch_problem}" if p.watch_problem else "")
            + (f"; {p.stuck} gang(s) waiting: {p.blocked}" if p.blocked else "")
            + (f"; {p.api_note}" if p.api_limited else "")
        )

    def event(self, message: str) -> None:
        self._line(message)


def summary(p: Progress, width: int | None = None) -> str:
    """The closing summary: one line per item, each wrapped at `width` (a terminal's) between
    words, its continuation indented; unwrapped into a pipe, so each item stays one line."""
    text = _summary(p)
    if not width:
        return text
    import textwrap

    return "\n".join(
        textwrap.fill(
            line,
            width,
            subsequent_indent=" " * (len(line) - len(line.lstrip()) + 2),
            break_long_words=False,
            break_on_hyphens=False,
        )
        for line in text.splitlines()
    )


def _summary(p: Progress) -> str:
    if p.dry_run:
        verb = "accepted by the API server (dryRun=All)" if p.dry_run == "server" else "rendered"
        lines = [
            f"dry run ({p.dry_run}): {p.created + p.existing} of {p.total} trials {verb}, "
            f"{len(p.errors)} refused; nothing was created"
        ]
        lines += [f"  {trial}: {message}" for trial, message in sorted(p.errors.items())]
        return "\n".join(lines)
    lines = [
        f"study {p.study}: {p.succeeded} succeeded, "
        + (f"{p.pruned} pruned, " if p.pruned else "")
        + f"{p.failed} failed, {p.in_flight} in flight, "
        f"{p.waiting} not yet submitted, of {plural(p.total, 'trial')}",
        f"created {p.created}, already there {p.existing}; {plural(p.api_writes, 'API write')}"
        # a ratio of writes to trials created only when some were (0 created: "4.00 per" said nothing)
        + (f" ({p.api_writes / p.created:.2f} per created trial)" if p.created else "")
        + (f", {p.api_checks} access checks" if p.api_checks else "")
        + f", {p.throttled_429} HTTP 429 received, "
        f"{p.throttle_waits} throttle waits ({p.throttle_wait_seconds:.1f}s)",
    ]
    if p.create_command:  # a batch scheduler's commands, not API requests
        lines[1] = (
            f"created {p.created}, already there {p.existing}; {p.api_writes} {p.create_command}, "
            f"{p.throttled_429} refused for {p.limit_words}, {p.throttle_waits} throttle waits "
            f"({p.throttle_wait_seconds:.1f}s)"
        )
        if p.api_sent:
            lines.append(
                f"{p.scheduler} {p.calls_word}: "
                + ", ".join(f"{k} {n}" for k, n in sorted(p.api_sent.items(), key=lambda kv: -kv[1]))
            )
    elif p.api_sent:
        lines.append(
            "requests by kind"
            + (f" ({p.api_requests / (p.created + p.existing):.2f} per trial)" if p.created + p.existing else "")
            + ": "
            + by_kind(p.api_sent, p.api_refused)
        )
    for trial, message in sorted(p.errors.items()):
        lines.append(f"  {trial}: {message}")
    return "\n".join(lines)


def by_kind(sent: dict[str, int], refused: dict[str, int]) -> str:
    """`create Job 100 (12 × 429), get ConfigMap 61, ...`: most first."""
    return ", ".join(
        f"{kind} {n}" + (f" ({refused[kind]} × 429)" if refused.get(kind) else "")
        for kind, n in sorted(sent.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def summary_json(p: Progress) -> str:
    return json.dumps(p.as_dict(), indent=2, sort_keys=True)
