"""The preemption hook: what a trial does with the SIGTERM that precedes its end.

Kubernetes sends SIGTERM to a pod's containers when Volcano preempts it, when it is
evicted and when `stratctl drain` or `delete` deletes it, then SIGKILL once the pod's grace
period (`terminationGracePeriodSeconds`, the study's `checkpoint.grace_seconds`; 30 s by
default) has passed. Slurm sends SIGTERM and SIGKILL `KillWait` seconds later (30 s by
default) when it preempts, requeues or cancels a job; YARN's NodeManager waits
`yarn.nodemanager.sleep-delay-before-sigkill.ms` (250 ms by default) between the two.
A checkpoint saved in that window is work the next attempt does not redo.

Python runs a signal handler in the main thread between two bytecodes: a step blocked in
one long native call delays it, so the grace period must cover a step plus a save.
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

EXIT_STATUS = 128 + signal.SIGTERM  # 143: what a shell or a container runtime reports for a SIGTERM'd process

_state = {"preempted": False}


def on_preempt(callback: Callable[[], Any] | None = None, *, exit: bool = True, signum: int = signal.SIGTERM) -> None:
    """On the first SIGTERM, run `callback` (e.g. `lambda: save(state, step)`) once, then the
    handler installed before this one, then end the process with status 143 (`exit`;
    `finally` blocks and atexit handlers run). With `exit=False` the program decides:
    the handler returns and `preempted()` is True from then on, for the training loop to
    stop at its next step. A callback that raises is printed on stderr and the hook goes
    on: the process must still end within its grace period. Call from the main thread."""
    previous = signal.getsignal(signum)
    ran = [False]

    def handler(number: int, frame: Any) -> None:
        if ran[0]:
            return  # a second SIGTERM (Slurm may repeat it) while the first is handled, or after
        ran[0] = _state["preempted"] = True
        if callback is not None:
            try:
                callback()
            except Exception:  # said on stderr: the hook must go on and end the process in time
                print("stratctl.trial: the preemption callback failed:", file=sys.stderr)
                traceback.print_exc()
        if callable(previous):  # not SIG_DFL, SIG_IGN or None (a handler set outside Python)
            previous(number, frame)
        if exit:
            sys.exit(EXIT_STATUS)

    signal.signal(signum, handler)


def preempted() -> bool:
    """True once SIGTERM arrived (see `on_preempt`)."""
    return _state["preempted"]
