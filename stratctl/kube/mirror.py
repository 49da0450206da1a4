"""A list-then-watch cache of one kind of Kubernetes object, kept current by a background
thread: what client-go calls an informer, reduced to what stratctl reads.
"""

from __future__ import annotations

import logging
import threading

from stratctl.errors import ClusterError
from stratctl.kube.cluster import Cluster

log = logging.getLogger(__name__)

def without_managed_fields(obj: dict) -> dict:
    """Drop `metadata.managedFields` (a third of a job's bytes; nothing here reads it)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


class Mirror:
    """A list-then-watch cache of one kind of object, refreshed by a background thread.

    `transform` trims each object as it arrives (what client-go calls a transform), so a
    mirror of 10,000 jobs holds only what its reader needs.
    """

    def __init__(self, cluster: Cluster, kind: tuple[str, str], all_namespaces: bool = True,
                 label_selector: str | None = None, watch_timeout: int = 60, namespace: str | None = None,
                 transform=without_managed_fields):
        self.cluster = cluster
        self.kind = kind
        self.all_namespaces = all_namespaces
        self.namespace = namespace
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.transform = transform
        self._objects: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._version = ""
        self.events = 0
        self.deletions = 0  # objects seen deleted, ever (relists included)
        self._changed = threading.Event()
        self.relists = 0

    def _key(self, obj: dict) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def relist(self) -> None:
        items, version = self.cluster.list(self.kind, self.namespace, label_selector=self.label_selector,
                                           all_namespaces=self.all_namespaces)
        with self._lock:
            fresh = {self._key(o): self.transform(o) for o in items}
            self.deletions += len(self._objects.keys() - fresh.keys())
            self._objects = fresh
            self._version = version
        self.relists += 1
        self._changed.set()

    def start(self) -> Mirror:
        self.relist()
        self._thread = threading.Thread(target=self._run, name=f"mirror-{self.kind[1]}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for kind, obj in self.cluster.watch(self.kind, self._version, namespace=self.namespace,
                                                   label_selector=self.label_selector,
                                                   timeout_seconds=self.watch_timeout,
                                                   all_namespaces=self.all_namespaces):
                    if self._stop.is_set():
                        return
                    self._apply(kind, obj)
            except ClusterError as exc:
                if self._stop.is_set():
                    return
                log.debug("watch %s ended: %s; relisting", self.kind[1], exc)
                self._stop.wait(1.0)
                try:
                    self.relist()
                except ClusterError:
                    continue

    def _apply(self, kind: str, obj: dict) -> None:
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if version:
                self._version = version
            if kind == "BOOKMARK":
                return
            self.events += 1
            self._changed.set()
            if kind == "DELETED":
                self._objects.pop(self._key(obj), None)
                self.deletions += 1
            else:
                self._objects[self._key(obj)] = self.transform(obj)

    def add(self, obj: dict) -> None:
        """Read your own writes: an object this process just created, unless the watch
        already brought it (then what is here is at least as new)."""
        with self._lock:
            self._objects.setdefault(self._key(obj), self.transform(obj))

    def wait(self, timeout: float) -> bool:
        """Block until an object changed since the last call (True) or `timeout` passed."""
        fired = self._changed.wait(timeout)
        self._changed.clear()
        return fired

    def items(self) -> list[dict]:
        with self._lock:
            return list(self._objects.values())

    def snapshot(self) -> tuple[list[dict], int]:
        """The objects and the deletion count they reflect, read together."""
        with self._lock:
            return list(self._objects.values()), self.deletions

    def stop(self) -> None:
        self._stop.set()
