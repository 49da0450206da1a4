"""Optional pressure signals from a Prometheus server (`submit --prometheus-url`).

etcd's latency is the earliest sign that the control plane is saturating (every write
waits on it). It is read as the API server sees it: the p99 of its requests to etcd
(`etcd_request_duration_seconds`, lists left out: a large list is slow by its size, not
because etcd is). That is the metric that rises when etcd stalls, whatever the cause
(a slow disk, compaction, a paused or overloaded process): etcd's own commit histogram
observes only commits that happen, so a stalled etcd shows nothing there, and managed
clusters rarely expose etcd's metrics at all, while every API server exports its own.
Volcano's end-to-end scheduling latency says the scheduler is falling behind (a cycle
that takes seconds places new gangs late, and more gangs make it longer). Each is one
instant query over a 1-minute rate, so a Prometheus scraping every 30 s still answers.
`ControlPlaneWatch` runs them in a background thread every few seconds, so a slow or
unreachable Prometheus never delays the submit loop: the loop reads the latest reading,
and a reading too old (or none) is no signal at all.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

ETCD_P99 = 'histogram_quantile(0.99, sum(rate(etcd_request_duration_seconds_bucket{operation!~"list.*"}[1m])) by (le))'
VOLCANO_LATENCY_P90_MS = (
    "histogram_quantile(0.9, sum(rate(volcano_e2e_scheduling_latency_milliseconds_bucket[1m])) by (le))"
)
#: Every query stratctl sends (the end-to-end tests check each returns data).
QUERIES = (ETCD_P99, VOLCANO_LATENCY_P90_MS)


@dataclass(frozen=True)
class ControlPlane:
    etcd_p99: float | None  # seconds
    volcano_latency_p90: float | None  # seconds
    at: float = 0.0  # clock time of the reading


class Prometheus:
    def __init__(self, url: str, timeout: float = 2.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, expr: str) -> float | None:
        """The value of an instant query that yields one sample (or a sum of them), else None."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as response:
                doc = json.load(response)
        except (OSError, ValueError):
            return None
        if doc.get("status") != "success":
            return None
        result = (doc.get("data") or {}).get("result") or []
        values = []
        for sample in result:
            try:
                value = float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if math.isfinite(value):
                values.append(value)
        return sum(values) if values else None

    def control_plane(self, at: float = 0.0) -> ControlPlane:
        latency_ms = self.query(VOLCANO_LATENCY_P90_MS)
        return ControlPlane(
            etcd_p99=self.query(ETCD_P99),
            volcano_latency_p90=None if latency_ms is None else latency_ms / 1000,
            at=at,
        )


class ControlPlaneWatch:
    """Reads the control plane's signals every `interval` seconds in a background thread.

    `latest()` never blocks: it returns the last reading if it is at most `stale` seconds
    old, else None (no signal, so the policy goes without it)."""

    def __init__(
        self,
        source: Prometheus,
        interval: float = 5.0,
        stale: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.source = source
        self.interval = interval
        self.stale = stale
        self.clock = clock
        self._reading: ControlPlane | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        """One reading (what the thread does every interval)."""
        self._reading = self.source.control_plane(at=self.clock())

    def latest(self) -> ControlPlane | None:
        reading = self._reading
        if reading is None or self.clock() - reading.at > self.stale:
            return None
        return reading

    def start(self) -> ControlPlaneWatch:
        self._thread = threading.Thread(target=self._run, name="prometheus", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # a dead poller would silently drop the signal
                log.warning("reading Prometheus failed: %s", exc)
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
