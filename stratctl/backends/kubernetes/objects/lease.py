"""A study's driver mark on Kubernetes (run/driver.py): the Lease `stratctl-driver-<study>`
(coordination.k8s.io/v1) in the study's namespace. `holderIdentity` is the driver,
`acquireTime` since when, `renewTime` its last renewal, `leaseDurationSeconds` how long that
holds; a driver asking to take over writes itself into the annotation `stratctl.io/take-over`;
`stratctl.io/version` says which stratctl the holder runs.
Every write carries the resourceVersion it read (a merge patch with it, or a create): the
API server refuses a stale one with 409, so two drivers never both think they won.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import Cluster
from stratctl.backends.kubernetes.api.resources import LEASE, POD
from stratctl.errors import AlreadyExists, NotFound
from stratctl.run.driver import Mark, gone
from stratctl.version import VERSION


def lease_name(study: str) -> str:
    return f"stratctl-driver-{study}"


def micro_time(epoch: float) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, in UTC."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def epoch_of(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def mark_of(lease: dict[str, Any]) -> Mark | None:
    """The mark a Lease holds (None when it names no holder)."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = epoch_of(spec.get("renewTime"))
    if not holder or renewed is None:
        return None
    since = epoch_of(spec.get("acquireTime")) or renewed
    ttl = spec.get("leaseDurationSeconds")
    take_over = ((lease.get("metadata") or {}).get("annotations") or {}).get(labels.TAKE_OVER) or ""
    return Mark(str(holder), since, renewed, float(ttl) if isinstance(ttl, int) and ttl > 0 else 0.0, take_over)


def pod_gone(cluster: Cluster, namespace: str) -> Callable[[str], bool]:
    """Whether a driver that named itself `pod NAME on NODE` is dead: its pod is gone, ended,
    or being deleted (the next pod of a driver's Job takes the study at once, not once the
    killed one's mark expires); else, as for any holder, `run/driver.py`'s `gone`."""

    def dead(holder: str) -> bool:
        if not holder.startswith("pod "):
            return gone(holder)
        name = holder.removeprefix("pod ").split(" on ", 1)[0]
        try:
            pod = cluster.get(POD, name, namespace)
        except NotFound:
            return True
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        return bool(meta.get("deletionTimestamp")) or status.get("phase") in ("Succeeded", "Failed")

    return dead


class LeaseStore:
    """The mark of one study, kept in its Lease (run/driver.py's MarkStore)."""

    def __init__(self, cluster: Cluster, namespace: str, study: str):
        self.cluster, self.namespace, self.study = cluster, namespace, study
        self.name = lease_name(study)
        self.where = f"Lease {namespace}/{self.name}"

    def read(self) -> tuple[Mark | None, str]:
        try:
            lease = self.cluster.get(LEASE, self.name, self.namespace)
        except NotFound:
            return None, ""
        return mark_of(lease), str((lease.get("metadata") or {}).get("resourceVersion") or "")

    def write(self, mark: Mark, version: str) -> bool:
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {labels.STUDY: self.study},
                "annotations": {labels.TAKE_OVER: mark.take_over or None, labels.VERSION: VERSION},
            },
            "spec": {
                "holderIdentity": mark.holder,
                "acquireTime": micro_time(mark.since),
                "renewTime": micro_time(mark.renewed),
                "leaseDurationSeconds": max(1, round(mark.ttl)),
            },
        }
        try:
            if not version:
                body["metadata"]["annotations"] = {k: v for k, v in body["metadata"]["annotations"].items() if v}
                self.cluster.create(body)
            else:
                body["metadata"]["resourceVersion"] = version
                self.cluster.patch(LEASE, self.name, body, self.namespace)
        except (AlreadyExists, NotFound):  # another write came first (409), or it was removed meanwhile
            return False
        return True

    def remove(self, version: str) -> None:
        try:
            self.cluster.delete(LEASE, self.name, self.namespace, resource_version=version)
        except AlreadyExists:
            pass  # changed meanwhile: no longer this driver's to remove
