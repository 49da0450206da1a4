"""Completion: whether a study has finished, and waiting for it to (`stratctl wait`).

A study is finished when every trial succeeded or failed: none waiting, pending, running,
preempted, suspended or retrying. `wait` reads the study's row (`status.collect`) every
interval, says one line whenever the trials' states change, and ends with an exit code: OK
when every trial succeeded, FAILURE when some failed, TIMEOUT when the time ran out first. Clock and sleep are injected.
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


def wait(
    read: Callable[[], StudyRow],
    say: Callable[[str], None],
    timeout: float | None = None,
    interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ExitCode:
    """Block until the study read by `read()` finishes, or `timeout` seconds pass."""
    start = clock()
    said = None
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
        left = None if timeout is None else start + timeout - clock()
        if left is not None and left <= 0:
            say(f"{row.study}: timed out after {timeout:g}s, not finished ({line}); trials keep running")
            return ExitCode.TIMEOUT
        sleep(interval if left is None else min(interval, left))
