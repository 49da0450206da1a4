"""Prometheus metrics of a running submission, served on `--metrics-port`.

A reporter like the displays: it turns each `Progress` snapshot into gauges, so a
Grafana panel can show target against in-flight trials and why the target moved.
"""

from __future__ import annotations

import errno

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from stratctl.errors import UsageError
from stratctl.run.progress import Progress


class MetricsReporter:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        labels = ["study"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"stratctl_{name}", doc, labels, registry=self.registry)

        self.target = gauge("target_in_flight", "Trials the policy allows in flight")
        self.in_flight = gauge("trials_in_flight", "Trials created and not finished")
        self.pending = gauge("gangs_pending", "In-flight trials whose gang is not scheduled yet")
        self.stuck = gauge("gangs_stuck", "Gangs pending longer than the grace period")
        self.waiting = gauge("trials_waiting", "Trials not yet created")
        self.succeeded = gauge("trials_succeeded", "Trials finished successfully")
        self.failed = gauge("trials_failed", "Trials that failed")
        self.pruned = gauge("trials_pruned", "Trials a closed-loop search's pruner stopped early")
        self.hold = gauge("admission_held", "1 while new submissions are held")
        self.free_gpus = gauge("cluster_free_gpus", "Free nvidia.com/gpu summed over ready nodes")
        self.gangs_fit = gauge("cluster_gangs_fit", "Whole gangs of the study's shape the free GPUs could hold")
        self.latency = gauge("api_latency_p90_seconds", "p90 of the client's recent API request latency")
        self.throttled = Counter("stratctl_http_429", "HTTP 429 responses received", labels, registry=self.registry)
        self.api_qps = gauge("api_pace_qps", "Requests per second the client allows itself now (the request pace)")
        self.api_window = gauge("api_pace_window", "API requests the client allows in flight now")
        self.api_limited = gauge("api_quota_limited", "1 while the API quota, not the GPUs, limits the study")
        self.watch_broken = gauge(
            "watch_broken", "1 while a watch of the loop (jobs, nodes, pods, PodGroups) is broken"
        )
        self.watch_failures = Counter(
            "stratctl_watch_failures", "Failures of the loop's watches", labels, registry=self.registry
        )
        self.decisions = Counter(
            "stratctl_target_changes", "Changes of the in-flight target", labels, registry=self.registry
        )
        self.waits = Counter(
            "stratctl_throttle_waits", "Requests the client-side token bucket made wait", labels, registry=self.registry
        )
        self._seen_waits = 0
        self._seen_429 = 0
        self._seen_watch_errors = 0
        self._last_target: int | None = None

    def serve(self, port: int, address: str = "127.0.0.1") -> MetricsReporter:
        """Serve /metrics on address:port, or refuse in one line (exit 2) when it is taken."""
        try:
            start_http_server(port, addr=address, registry=self.registry)
        except OSError as e:
            reason = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be served: {e.strerror or e}"
            raise UsageError(
                f"--metrics-port {port}: {address}:{port} {reason}; choose another port or stop what listens there"
            ) from None
        return self

    def _start(self, study: str) -> None:
        """Export every counter at 0 from the first update, so a rate() over the series is
        defined from the start instead of appearing with the first event."""
        for counter in (self.throttled, self.watch_failures, self.decisions, self.waits):
            counter.labels(study)

    def update(self, p: Progress) -> None:
        s = p.study
        if self._last_target is None:
            self._start(s)
        for gauge, value in (
            (self.target, p.target),
            (self.in_flight, p.in_flight),
            (self.pending, p.pending),
            (self.stuck, p.stuck),
            (self.waiting, p.waiting),
            (self.succeeded, p.succeeded),
            (self.failed, p.failed),
            (self.pruned, p.pruned),
            (self.hold, int(p.hold)),
            (self.free_gpus, p.free_gpus),
            (self.gangs_fit, p.gangs_fit),
            (self.latency, p.latency_p90),
            (self.watch_broken, int(p.watch_problem is not None)),
            (self.api_qps, p.api.qps if p.api else None),
            (self.api_window, p.api.window if p.api else None),
            (self.api_limited, int(p.api_limited)),
        ):
            if value is not None:
                gauge.labels(s).set(value)
        if p.throttled_429 > self._seen_429:
            self.throttled.labels(s).inc(p.throttled_429 - self._seen_429)
            self._seen_429 = p.throttled_429
        if p.throttle_waits > self._seen_waits:
            self.waits.labels(s).inc(p.throttle_waits - self._seen_waits)
            self._seen_waits = p.throttle_waits
        if p.watch_errors > self._seen_watch_errors:
            self.watch_failures.labels(s).inc(p.watch_errors - self._seen_watch_errors)
            self._seen_watch_errors = p.watch_errors
        if self._last_target is not None and p.target != self._last_target:
            self.decisions.labels(s).inc()
        self._last_target = p.target

    def event(self, message: str) -> None:
        pass
