"""Intermediate values read from the trials' own output: the report lines that
`stratctl.trial.report()` prints (`stratctl.report {"step":3,"values":{"loss":0.41}}`, see
stratctl/trial/metrics.py), read by the submit loop through the API server's pods/log.

Why the log: a pod needs nothing for it. No Kubernetes client in the image, no service
account token mounted, no RBAC for the pod and no route from the pod to the API server
(clusters that set `automountServiceAccountToken: false` or block that route by a
NetworkPolicy are common). The loop's user needs `get pods/log`, which `stratctl rbac`
grants for `stratctl logs` already.

What it costs: one GET of pods/log per running pod of a pruned study every `EVERY`
seconds, through the loop's token bucket. Each asks only for what is new: `sinceTime`
(whole seconds: the lines of the last second come again, and a step read twice is the same
step) with `timestamps` to know where it stopped, at most `LIMIT` bytes. A pod whose node
serves no log (the request fails other than by a transient error) is not asked again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from stratctl.backends.kubernetes.api.cluster import Cluster
from stratctl.backends.kubernetes.objects.state import job_of_pod
from stratctl.errors import ClusterError, NotFound, Unavailable
from stratctl.trial.metrics import parse_report_line

EVERY = 5.0  # seconds between two reads of one pod's log
LIMIT = 1 << 20  # bytes of one read: a chatty program's new output beyond it waits for the next read


def split_stamp(line: str) -> tuple[str, str]:
    """(timestamp, text) of a line read with `timestamps=true` (RFC 3339, then one space)."""
    stamp, _, text = line.partition(" ")
    return stamp, text


def since_of(stamp: str) -> str:
    """The `sinceTime` that reads again from `stamp`'s whole second (the API takes seconds)."""
    head = stamp.split(".", 1)[0].rstrip("Z")
    return head + "Z" if head else ""


class LogReports:
    """The report lines of running pods, read incrementally: pod → step → values."""

    def __init__(
        self, cluster: Cluster, namespace: str, every: float = EVERY, clock: Callable[[], float] = time.monotonic
    ):
        self.cluster, self.namespace, self.every, self.clock = cluster, namespace, every, clock
        self.since: dict[str, str] = {}  # pod uid → sinceTime of its next read
        self.due: dict[str, float] = {}  # pod uid → when it is read next
        self.steps: dict[str, dict[int, dict[str, float]]] = {}  # pod uid → what it reported
        self.job: dict[str, str] = {}  # pod uid → its job
        self.silent: set[str] = set()  # pods whose log cannot be read (their node serves none)

    def read(self, pods: Iterable[dict[str, Any]], metric: str) -> dict[str, dict[int, float]]:
        """Job name → its steps' values of `metric`, from its running pods' report lines (the
        pods not due yet give what they gave before; a step reported by two pods of a gang
        keeps the first value read)."""
        live: set[str] = set()
        now = self.clock()
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid, job = meta.get("uid") or meta.get("name") or "", job_of_pod(pod)
            if not uid or not job or (pod.get("status") or {}).get("phase") != "Running":
                continue
            live.add(uid)
            self.job[uid] = job
            if uid in self.silent or self.due.get(uid, 0.0) > now:
                continue
            self.due[uid] = now + self.every
            self._read(uid, meta["name"], _container(pod))
        for uid in set(self.job) - live:  # ended or gone: what it said was read in its last cycle
            for table in (self.since, self.due, self.steps, self.job):
                table.pop(uid, None)
            self.silent.discard(uid)
        out: dict[str, dict[int, float]] = {}
        for uid, steps in self.steps.items():
            mine = out.setdefault(self.job[uid], {})
            for step, values in steps.items():
                if metric in values:
                    mine.setdefault(step, values[metric])
        return {job: steps for job, steps in out.items() if steps}

    def _read(self, uid: str, pod: str, container: str | None) -> None:
        try:
            lines = list(
                self.cluster.pod_log(
                    pod,
                    self.namespace,
                    container=container,
                    timestamps=True,
                    since_time=self.since.get(uid),
                    limit_bytes=LIMIT,
                )
            )
        except (Unavailable, NotFound):
            return  # the next read tries again; a pod gone is dropped once the mirror says so
        except ClusterError:
            self.silent.add(uid)  # e.g. a node without a kubelet that serves logs
            return
        steps = self.steps.setdefault(uid, {})
        for raw in lines:
            stamp, text = split_stamp(raw.decode(errors="replace").rstrip("\n"))
            if stamp:
                self.since[uid] = since_of(stamp)
            parsed = parse_report_line(text)
            if parsed is not None:
                step, values = parsed
                steps[step] = {**steps.get(step, {}), **values}


def _container(pod: dict[str, Any]) -> str | None:
    """The trial's container: the first of the pod's (stratctl's templates make one)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return containers[0].get("name") if containers else None
