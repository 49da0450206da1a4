"""Blocked: why the study's gangs that have waited past the grace period cannot start, for
the live panel and the log.

A gang that can never start (its queue deleted or closed, no node able to hold a pod)
looks from the loop like any pending gang; without its cause the operator waits. The
cause comes from the objects that know it (`kube.waiting`): the queue's state, then the
PodGroup's Unschedulable condition, then the scheduler's events on it. Read at most every
REFRESH seconds, and only while gangs are stuck; a failed read keeps the last answer (the
loop never fails for it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stratctl.backends.kubernetes.api.cluster import PODGROUP
from stratctl.backends.kubernetes.objects.state import podgroup_name
from stratctl.backends.kubernetes.objects.waiting import Queues, condition, gang_events, queue_of, reason
from stratctl.errors import ClusterError, NotFound

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster

REFRESH = 10.0  # seconds between two reads of the cause while gangs stay stuck


class Blocked:
    def __init__(self, cluster: Cluster, namespace: str, event: Callable[[str], None] = lambda message: None) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.event = event
        self.last = ""
        self._read_at = float("-inf")

    def why(self, stuck: list[dict[str, Any]], groups: list[dict[str, Any]] | None, now: float) -> str:
        """The cause for the first of the `stuck` jobs (their PodGroups from `groups`, the
        loop's mirror, when it has one); "" when none is stuck. Says each new cause once."""
        if not stuck:
            self.last, self._read_at = "", float("-inf")
            return ""
        if now - self._read_at < REFRESH:
            return self.last
        self._read_at = now
        job = stuck[0]
        name = podgroup_name(job)
        try:
            group = next((g for g in groups or [] if (g.get("metadata") or {}).get("name") == name), None)
            if group is None:
                try:
                    group = self.cluster.get(PODGROUP, name, self.namespace)
                except NotFound:
                    group = None
            queue = queue_of(job) or queue_of(group)
            events = (
                gang_events(self.cluster, self.namespace, name) if group is not None and not condition(group) else []
            )
            cause = reason(group, queue, Queues(self.cluster).get(queue), events)
        except ClusterError:
            return self.last
        if cause != self.last:
            self.event(f"{len(stuck)} gang(s) waiting to start; {job['metadata']['name']}: {cause}")
        self.last = cause
        return cause
