"""The client-side view of the API server: requests sent and answered per kind, the 429s
among them, and recent latencies, which the controller reads as a pressure signal."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field


@dataclass
class ApiMetrics:
    """Client-side view of the API server: request counts and recent latencies."""

    requests: int = 0
    writes: int = 0  # writes the server stored: creates, patches, deletes answered 2xx
    checks: int = 0  # writes it stored nothing for: access reviews and dry runs
    throttled: int = 0  # 429s received (before retries)
    errors: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=512))
    sent: dict[str, int] = field(default_factory=dict)  # requests sent per kind ("create Job"), retries included
    refused: dict[str, int] = field(default_factory=dict)  # of those, answered 429, per kind
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, kind: str, refused: bool = False) -> None:
        """One request of `kind` (the verb and kind its `what` starts with) went out."""
        with self._lock:
            self.sent[kind] = self.sent.get(kind, 0) + 1
            if refused:
                self.refused[kind] = self.refused.get(kind, 0) + 1

    def record(self, method: str, status: int | None, seconds: float, check: bool = False) -> None:
        """One request answered with `status` (None: no answer); `check`: one the server
        stores nothing for (an access review, a dry run), even when it is a POST."""
        with self._lock:
            self.requests += 1
            if method in ("POST", "PUT", "PATCH", "DELETE") and status is not None and 200 <= status < 300:
                if check:
                    self.checks += 1
                else:
                    self.writes += 1
            if status == 429:
                self.throttled += 1
            elif status is None or status >= 400:
                self.errors += 1
            self.latencies.append(seconds)

    def latency_quantile(self, q: float) -> float | None:
        with self._lock:
            data = sorted(self.latencies)
        if not data:
            return None
        return data[min(len(data) - 1, int(q * len(data)))]
