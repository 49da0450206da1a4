"""Optional pressure signals from a Prometheus server (`submit --prometheus-url`).

etcd's backend commit latency is the earliest sign that the control plane is saturating
(every write waits on it), and the scheduler's own pending-pod count and Volcano's
scheduling latency say how far behind it is. Each is one instant query; an unreachable
or empty Prometheus yields None, so the policy simply goes without that signal.
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from dataclasses import dataclass

ETCD_COMMIT_P99 = (
    "histogram_quantile(0.99, sum(rate(etcd_disk_backend_commit_duration_seconds_bucket[1m])) by (le))"
)
SCHEDULER_PENDING = "sum(scheduler_pending_pods)"
VOLCANO_LATENCY_P90_MS = (
    "histogram_quantile(0.9, sum(rate(volcano_e2e_scheduling_latency_milliseconds_bucket[1m])) by (le))"
)


@dataclass(frozen=True)
class ControlPlane:
    etcd_commit_p99: float | None  # seconds
    scheduler_pending_pods: float | None
    volcano_latency_p90: float | None  # seconds


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

    def control_plane(self) -> ControlPlane:
        latency_ms = self.query(VOLCANO_LATENCY_P90_MS)
        return ControlPlane(
            etcd_commit_p99=self.query(ETCD_COMMIT_P99),
            scheduler_pending_pods=self.query(SCHEDULER_PENDING),
            volcano_latency_p90=None if latency_ms is None else latency_ms / 1000,
        )
