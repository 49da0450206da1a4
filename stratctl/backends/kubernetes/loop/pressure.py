"""What the policy decides on, read from a Kubernetes cluster once a cycle, and the
progress the submit loop shows (pure but for what it is handed: the watches' snapshots,
the Prometheus watch's latest reading, the API request counters).

- the study's gangs pending, and those pending past the grace (stuck), with why they wait
  (blocked.py: a gang that never starts says what it lacks);
- the cluster's capacity from its watched nodes, pods and PodGroups (capacity.py): free
  and fragmented GPUs, whole gangs that fit, a higher-priority gang waiting, its shadow
  time for backfill, a topology that holds no gang;
- the control plane's health from Prometheus (etcd's p99, Volcano's scheduling latency);
- the request pace (run/pace.py): stalled, and the room for creates one cycle has;
- whether any of it may be out of date (a watch broken or silent, the API server out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from stratctl.backends.kubernetes.objects.blocked import Blocked
from stratctl.backends.kubernetes.watch.mirror import watch_health
from stratctl.run.pace import api_room
from stratctl.run.policy import Observed
from stratctl.run.progress import Progress
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.backends.kubernetes.watch.capacity import Capacity, ClusterSignals
    from stratctl.backends.kubernetes.watch.prometheus import ControlPlaneWatch


def tally(
    progress: Progress,
    states: dict[str, TrialState],
    throttle: Throttle,
    cluster: Cluster | None,
    unasked: int,
    watches: Iterable[object],
) -> None:
    """The progress from the trials' states (refused ones aside; `unasked`: a closed-loop
    search's budget not asked yet, waiting too), the request counters and the watches' health."""
    p = progress
    counts = {s: 0 for s in TrialState}
    for name, state in states.items():
        if name not in p.errors:
            counts[state] += 1
    p.pending, p.running = counts[TrialState.PENDING], counts[TrialState.RUNNING]
    p.succeeded, p.failed = counts[TrialState.SUCCEEDED], counts[TrialState.FAILED]
    p.waiting, p.pruned = counts[TrialState.WAITING] + unasked, counts[TrialState.PRUNED]
    bucket = throttle.bucket
    p.throttle_waits, p.throttle_wait_seconds = bucket.waits, bucket.waited_seconds
    p.throttled_429 = throttle.stats.throttled
    p.api = throttle.pressure()  # the request pace: shown when the API quota pushes back
    if cluster is not None:
        metrics = cluster.metrics
        p.api_writes, p.api_requests, p.api_checks = metrics.writes, metrics.requests, metrics.checks
        p.api_sent, p.api_refused = dict(metrics.sent), dict(metrics.refused)
    p.watch_errors, p.watch_problem = watch_health(watches)  # a broken watch means a stale picture: say so


class Pressure:
    """One study's reading of the cluster, cycle after cycle: since when each trial is
    pending, and the capacity last read (packing places trials into it)."""

    def __init__(
        self,
        cluster: Cluster | None,
        namespace: str,
        grace: float,
        poll_interval: float,
        say: Callable[[str], None],
        clock: Callable[[], float],
        wall: Callable[[], float],
    ):
        self.grace, self.poll_interval = grace, poll_interval
        self.clock, self.wall = clock, wall
        self.blocked = Blocked(cluster, namespace, say) if cluster is not None else None
        self.pending_since: dict[str, float] = {}  # trials pending, since when
        self.capacity: Capacity | None = None  # as last read from the signals

    def observe(
        self,
        states: dict[str, TrialState],
        progress: Progress,
        latest: dict[str, dict[str, Any]],
        drained: bool,
        signals: ClusterSignals | None,
        groups: list[dict[str, Any]] | None,
        prometheus: ControlPlaneWatch | None,
        durations: bool,
        stale: str | None = None,
    ) -> Observed:
        """This cycle's `Observed`, and the progress's view of it. `latest`: each trial's
        latest job; `groups`: the mirrored PodGroups (None: not mirrored); `durations`:
        whether the study states its trials' durations (backfill needs them); `stale`: why
        the picture may be out of date (`mirror.staleness`), which holds the target."""
        p, now = progress, self.clock()
        for name, state in states.items():
            if state is TrialState.PENDING:
                self.pending_since.setdefault(name, now)
            else:
                self.pending_since.pop(name, None)
        late = [n for n, since in self.pending_since.items() if now - since > self.grace]
        p.stuck = len(late)
        if self.blocked is not None:  # why they wait, when they wait past the grace: a gang that never starts
            p.blocked = self.blocked.why([latest[n] for n in late if n in latest], groups, now)
        precedence, shadow, backfill_fit, spread = None, None, None, None
        if signals is not None:
            self.capacity = capacity = signals.capacity(self.wall())
            shadow, backfill_fit, spread = capacity.shadow, capacity.backfill_fit, capacity.spread
            p.free_gpus, p.gangs_fit, p.fragmentation = capacity.free_gpus, capacity.gangs_fit, capacity.fragmentation
            precedence = str(capacity.precedence) if capacity.precedence else None
            p.latency_p90 = signals.latency_p90()  # shown; the request pace acts on it, not the target
        control = prometheus.latest() if prometheus is not None else None
        p.etcd_p99 = control.etcd_p99 if control else None
        p.scheduling_latency_p90 = control.volcano_latency_p90 if control else None
        return Observed(
            etcd_p99=p.etcd_p99,
            scheduling_latency_p90=p.scheduling_latency_p90,
            # a trial whose next attempt is due holds its place (TrialState.owed)
            in_flight=p.in_flight + sum(1 for s in states.values() if s.owed),
            pending=p.pending,
            waiting=p.waiting,
            stuck=p.stuck,
            drained=drained,
            api_stalled=p.api.stalled if p.api is not None else 0.0,
            api_room=api_room(p.api, self.poll_interval),
            gangs_fit=p.gangs_fit,
            free_gpus=p.free_gpus,
            precedence=precedence,
            shadow=shadow if durations else None,
            backfill_fit=backfill_fit,
            spread=spread,
            stale=stale,
        )
