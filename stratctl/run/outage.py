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

A server over a paused etcd does not refuse: it hangs, and a request may wait its whole
read timeout before it fails. So requests in flight are tracked too (`sending`,
`received`), and one that has had no answer for `STALL` seconds, sent after the server
last answered anything, starts the outage as a miss would (`stalled`, polled by a
watchdog thread): the display says so while the request still waits.

While the server is out, the watchdog also asks the backend's `probe` (if it has one),
once a `probe_every` seconds: whether the server answers a new connection now. A request
waiting on a connection that died with the network would only fail at its deadline; the
probe's answer ends the outage at once, and its listeners (the request path) send those
requests again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from stratctl.errors import ClusterError, Unreachable

Clock = Callable[[], float]
log = logging.getLogger(__name__)

STALL = 10.0  # seconds without an answer to a request that count as an outage before it fails
PROBE_EVERY = 1.0  # seconds between two probes of a server that does not answer


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
    """Misses and answers of one API server (or a scheduler's controller: `server` names it
    in messages), from any thread."""

    def __init__(
        self,
        patience: float = 300.0,
        first_patience: float | None = None,
        clock: Clock = time.monotonic,
        server: str = "the API server",
    ):
        self.server = server
        self.patience = patience
        self.first_patience = patience if first_patience is None else first_patience
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the outage began (None: the server answers)
        self._last_answer: float | None = None
        self._listeners: list[Callable[[Change], None]] = []
        self.stall = STALL
        self._in_flight: dict[int, tuple[float, str]] = {}  # token -> (sent, what)
        self._tokens = 0
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        # whether the server answers now, asked by the watchdog while it is out (None: never)
        self.probe: Callable[[], bool] | None = None
        self.probe_every = PROBE_EVERY
        self._probed = float("-inf")

    def listen(self, listener: Callable[[Change], None]) -> None:
        self._listeners.append(listener)

    def _tell(self, change: Change) -> None:
        for listener in list(self._listeners):
            listener(change)

    def said(self, change: Change) -> str:
        """A change of the server's state, as the submit loop says it once, as it happens."""
        server = self.server.removeprefix("the ")
        if change.down:
            patience = duration(self.patience)
            return f"{server} unreachable ({change.error}); retrying, giving up after {patience} without an answer"
        return f"{server} answering again after {duration(change.lasted)} out; carrying on"

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
            since = self._since
            starting = since is None
            if since is None:
                # it began when this request went out, unless the server answered since
                since = self._since = max(sent, self._last_answer) if self._last_answer is not None else sent
            lasted, limit = now - since, self._limit()
        if starting:
            self._tell(Change(down=True, error=str(error)))
        if lasted >= limit:
            return Unreachable(
                f"no answer from {self.server} for {duration(lasted)}, giving up (last error: {error})",
                status=error.status,
                reason=error.reason,
            )
        return error

    def sending(self, what: str) -> int:
        """A request goes out now; the token to give `received` once it is over, whatever the outcome."""
        with self._lock:
            self._tokens += 1
            self._in_flight[self._tokens] = (self.clock(), what)
            return self._tokens

    def received(self, token: int) -> None:
        with self._lock:
            self._in_flight.pop(token, None)

    def stalled(self) -> Change | None:
        """Start the outage if a request sent after the last answer has waited `self.stall`
        seconds (a server that hangs rather than refuses); the change told, if any."""
        with self._lock:
            now = self.clock()
            if self._since is not None:
                return None
            waiting = [
                (sent, what)
                for sent, what in self._in_flight.values()
                if self._last_answer is None or sent >= self._last_answer
            ]
            if not waiting:
                return None
            sent, what = min(waiting)
            if now - sent < self.stall:
                return None
            self._since = sent
            change = Change(down=True, error=f"{what}: no answer for {duration(now - sent)}")
        self._tell(change)
        return change

    def probing(self) -> bool:
        """While the server is out, ask the probe (at most once a `probe_every`); its answer
        ends the outage. Whether it answered."""
        if self.probe is None or self._since is None or self.clock() - self._probed < self.probe_every:
            return False
        self._probed = self.clock()
        try:
            answered = self.probe()
        except Exception:  # the watchdog must not die of its probe: no answer
            answered = False
        if answered:
            self.answered()
        return answered

    def watch(self, interval: float = 1.0) -> Outage:
        """Poll `stalled` and `probing` every `interval` seconds in a daemon thread, until `stop`."""

        def run() -> None:
            while not self._stop.wait(interval):
                try:
                    self.stalled()
                    self.probing()
                except Exception as exc:  # a listener's failure must not end the watchdog, nor pass unseen
                    log.warning("watching %s for an outage: %s", self.server, exc, exc_info=True)

        if self._watchdog is None:
            self._watchdog = threading.Thread(target=run, name="outage-watchdog", daemon=True)
            self._watchdog.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def remaining(self) -> float:
        """Seconds the server may stay silent from now before requests give up."""
        with self._lock:
            lasted = 0.0 if self._since is None else self.clock() - self._since
            return self._limit() - lasted

    def timeout(self, connect: float, read: float) -> tuple[float, float]:
        """A request's (connect, read) timeouts, cut to the patience left (at least 1 s)."""
        left = max(1.0, self.remaining())
        return min(connect, left), min(read, left)
