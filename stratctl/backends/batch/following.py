"""Whether a submit loop follows a study on a batch scheduler (Slurm, YARN): its heartbeat,
a file in the study directory (backends/batch/scheduler.py `study_directory`).

Kubernetes keeps the same heartbeat in the study's record (backends/kubernetes/objects/record.py
`loop_following`): {"at": wall time, "running": bool, "host", "pid"}, refreshed while the
loop runs (here at most every REFRESH seconds, at each cycle's progress) and set to not
running when it stops. A marker older than STALE is a loop that died without saying so
(killed, its machine gone). `wait` reads it to say at once that nothing will admit the
trials still waiting.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratctl.run.heartbeat import live

LOOP = ".study/loop.json"  # beside the study as submitted (backends/batch/catalog.py)
REFRESH = 10.0
STALE = 90.0  # as the Kubernetes record's LOOP_STALE


def follower(directory: Path, now: float, stale: float = STALE) -> dict[str, Any] | None:
    """The heartbeat of a submit loop following the study at wall time `now`, or None."""
    try:
        marker = json.loads((directory / LOOP).read_text())
    except (OSError, ValueError):
        return None
    marker = live(marker, now, stale)
    if marker is None:
        return None
    if marker.get("host") == socket.gethostname() and not _alive(marker.get("pid")):
        return None  # killed on this machine without saying so: no need to wait for it to go stale
    return marker


def _alive(pid: Any) -> bool:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return True  # not known: taken at its word
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: it exists
    return True


class Heartbeat:
    """A reporter (run/progress.py) that says, in the study directory, that a submit loop
    follows the study, around the reporter it wraps; `stop` says it stopped."""

    def __init__(self, directory: Path, inner: Any = None, wall: Callable[[], float] = time.time):
        self.directory, self.inner, self.wall = directory, inner, wall
        self._last: float | None = None

    def beat(self, running: bool = True) -> None:
        now = self.wall()
        marker = {"at": now, "running": running, "host": socket.gethostname(), "pid": os.getpid()}
        try:
            path = self.directory / LOOP
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(marker, sort_keys=True))
            tmp.replace(path)
        except OSError:
            return  # a heartbeat not written is a loop `wait` does not see: never a reason to stop submitting
        self._last = now

    def stop(self) -> None:
        self.beat(running=False)

    def update(self, progress: Any) -> None:
        if self._last is None or self.wall() - self._last >= REFRESH:
            self.beat()
        if self.inner is not None:
            self.inner.update(progress)

    def event(self, message: str) -> None:
        if self.inner is not None:
            self.inner.event(message)
