"""Outage: whether the API server answers, told by the outcome of every request.

The request path reports each answer and each request that got none (a connection error,
a timeout, a 5xx, a 401/403 right after the same request worked). The first miss after an
answer starts an outage, the next answer ends it; listeners hear of both once (the submit
loop says so on its display). While the server stays silent, requests keep being retried
(the throttle); once it has been silent longer than the patience, the failure of a request
becomes `Unreachable`, which nothing retries: the command ends (exit 3) in bounded time.
Request timeouts are cut to the patience left, so a hung server cannot stretch it.

Before the server has ever answered, `first_patience` applies: a wrong kubeconfig or a
server that is down when the command starts is reported within seconds, not minutes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from stratctl.errors import ClusterError, Unreachable

Clock = Callable[[], float]


def duration(seconds: float) -> str:
    """`42s`, `5m`, `5m30s`: how long, for a person."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, rest = divmod(seconds, 60)
    return f"{minutes}m{rest}s" if rest else f"{minutes}m"


@dataclass(frozen=True)
class Change:
    """The server stopped answering (`down`, with the error that said so), or answers again
    after `lasted` seconds."""

    down: bool
    error: str = ""
    lasted: float = 0.0


class Outage:
    """Misses and answers of one API server, from any thread."""

    def __init__(self, patience: float = 300.0, first_patience: float | None = None, clock: Clock = time.monotonic):
        self.patience = patience
        self.first_patience = patience if first_patience is None else first_patience
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the outage began (None: the server answers)
        self._last_answer: float | None = None
        self._listeners: list[Callable[[Change], None]] = []

    def listen(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    def _tell(self, change: Change) -> None:
        for listener in list(self._listeners):
            listener(change)

    @property
    def since(self) -> float | None:
        """When the current outage began, on `clock`; None while the server answers."""
        return self._since

    def _limit(self) -> float:
        return self.patience if self._last_answer is not None else self.first_patience

    def answered(self) -> None:
        """The server answered a request (any status but a transient one)."""
        with self._lock:
            now = self.clock()
            began, self._since, self._last_answer = self._since, None, now
        if began is not None:
            self._tell(Change(down=False, lasted=now - began))

    def failed(self, error: ClusterError, sent: float) -> ClusterError:
        """A request sent at `sent` got no answer (`error` says how). Returns what to raise:
        `error`, or `Unreachable` once the server has been silent longer than the patience."""
        with self._lock:
            now = self.clock()
            starting = self._since is None
            if starting:
                # it began when this request went out, unless the server answered since
                self._since = max(sent, self._last_answer) if self._last_answer is not None else sent
            lasted, limit = now - self._since, self._limit()
        if starting:
            self._tell(Change(down=True, error=str(error)))
        if lasted >= limit:
            return Unreachable(f"no answer from the API server for {duration(lasted)}, giving up "
                               f"(last error: {error})", status=error.status, reason=error.reason)
        return error

    def remaining(self) -> float:
        """Seconds the server may stay silent from now before requests give up."""
        with self._lock:
            lasted = 0.0 if self._since is None else self.clock() - self._since
            return self._limit() - lasted

    def timeout(self, connect: float, read: float) -> tuple[float, float]:
        """A request's (connect, read) timeouts, cut to the patience left (at least 1 s)."""
        left = max(1.0, self.remaining())
        return min(connect, left), min(read, left)
