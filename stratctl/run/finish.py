"""Completion: whether a study has finished, and waiting for it to (`stratctl wait`).

A study is finished when every trial succeeded or failed: none waiting, pending, running,
preempted, suspended or retrying. `wait` reads the study's row (`status.collect`) every
interval, says one line whenever the trials' states change, and ends with an exit code: OK
when every trial succeeded, FAILURE when some failed, TIMEOUT when the time ran out first. Clock and sleep are injected.

Trials still waiting to be admitted are admitted only by a submit loop following the study.
When none follows it (`followed`: its heartbeat, in the Kubernetes record or the study
directory), `wait` says so at once, with the command that would follow it, and goes on
waiting until `--timeout`: a loop started meanwhile (another terminal, a CI job) is seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from stratctl.errors import ExitCode
from stratctl.run.rows import StudyRow
from stratctl.trialstate import TrialState

DONE = (TrialState.SUCCEEDED.value, TrialState.PRUNED.value, TrialState.FAILED.value)


def finished(row: StudyRow) -> bool:
    done = sum(row.states.get(s, 0) for s in DONE)
    return done >= row.trials and not any(n for s, n in row.states.items() if s not in DONE)


def states_text(row: StudyRow) -> str:
    """`3 running, 2 pending, 5 succeeded`: the non-empty states, in the status table's order."""
    return ", ".join(f"{n} {s}" for s, n in row.states.items() if n) or "no trials"


def unadmitted(row: StudyRow) -> int:
    """Trials not admitted yet: waiting, or not listed at all (not created)."""
    listed = sum(row.states.values())
    return row.states.get(TrialState.WAITING.value, 0) + max(0, row.trials - listed)


def unfollowed_text(row: StudyRow, command: str) -> str:
    """What `wait` says of a study no submit loop follows, with trials still to admit."""
    n = unadmitted(row)
    return (
        f"{row.study}: no submit loop follows this study, and {n} trial{'s' if n != 1 else ''} "
        f"wait{'s' if n == 1 else ''} to be admitted: nothing will admit "
        f"{'it' if n == 1 else 'them'} until `{command}` runs (it follows the study to its end)"
    )


def wait(
    read: Callable[[], StudyRow],
    say: Callable[[str], None],
    timeout: float | None = None,
    interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    followed: Callable[[], bool] | None = None,
    follow_with: str = "stratctl submit STUDY_FILE",
) -> ExitCode:
    """Block until the study read by `read()` finishes, or `timeout` seconds pass.
    `followed()`: whether a submit loop follows the study (asked only while trials wait to
    be admitted); `follow_with`: the command that would follow it."""
    start = clock()
    said = None
    alone: bool | None = None  # whether it was said that nothing follows the study
    while True:
        row = read()
        line = states_text(row)
        if finished(row):
            failed = row.states.get(TrialState.FAILED.value, 0)
            say(f"{row.study}: finished, {line}")
            return ExitCode.FAILURE if failed else ExitCode.OK
        if line != said:
            say(f"{row.study}: {line}")
            said = line
        if followed is not None and unadmitted(row):
            now_alone = not followed()
            if now_alone and not alone:
                say(unfollowed_text(row, follow_with))
            elif alone and not now_alone:
                say(f"{row.study}: a submit loop follows it now")
            alone = now_alone
        left = None if timeout is None else start + timeout - clock()
        if left is not None and left <= 0:
            say(f"{row.study}: timed out after {timeout:g}s, not finished ({line}); trials keep running")
            return ExitCode.TIMEOUT
        sleep(interval if left is None else min(interval, left))
