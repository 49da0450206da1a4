"""A list-then-watch cache of one kind of Kubernetes object, kept current by a background
thread: what client-go calls an informer, reduced to what stratctl reads.

The thread never dies of a failure: whatever breaks a watch (a reset connection, a line
that is not JSON, a bug in a transform), it relists and watches again, waiting longer after
each failure in a row. A broken watch is visible: one warning when it breaks and one when it
recovers, and counters the submit loop shows (`watch_health`).

A watch is asked to end every `connections.WATCH_SPAN` seconds and read with a deadline, so
one that died with the network is found within `connections.SILENT`. Until the mirror has
heard from the server again (an event, a watch's end, a list), its objects may be out of
date: `stale` says so, and the submit loop decides nothing on them (`staleness`). When the
server answers again after an outage, a mirror waiting to retry relists at once.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from stratctl import labels
from stratctl.backends.kubernetes.api import connections
from stratctl.backends.kubernetes.api.cluster import Cluster
from stratctl.backends.kubernetes.api.connections import WATCH_SPAN
from stratctl.errors import ClusterError, Reconnect
from stratctl.run.outage import Change, Outage, duration

log = logging.getLogger(__name__)

BACKOFF_BASE = 1.0  # seconds before the first retry
BACKOFF_CAP = 30.0  # seconds: the longest wait between two retries


def backoff(failures: int, rng: random.Random, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> float:
    """Seconds to wait after the `failures`-th failure in a row: the step doubles up to `cap`,
    and the wait is drawn between half the step and the step (so mirrors that broke together
    do not retry together, and none retries at once)."""
    step = min(cap, base * 2 ** min(failures - 1, 32))
    return rng.uniform(step / 2, step)


def describe(exc: BaseException) -> str:
    """An error in one line: stratctl's own say what failed; anything else is named by its type."""
    text = str(exc).strip()
    if not isinstance(exc, ClusterError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text.splitlines()[0][:200] if text else type(exc).__name__


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop `metadata.managedFields` (a third of a job's bytes; nothing here reads it)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def trimmed_job(obj: dict[str, Any]) -> dict[str, Any]:
    """What the submit loop reads of its study's jobs: metadata without managedFields, the
    status, and the spec with each pod template cut to its containers' names and resources
    (GPU accounting), node selector and priority class. Commands, env, volumes and the
    templates' labels and annotations (the job's, again) go. The trimmed spec is the same
    for every trial of a shape, so equal specs are one object; the keys of the metadata and
    status, and the values that repeat from job to job (label values, phases, times), are
    interned: one string for all jobs where each parsed answer had its own. A mirrored job
    of the bench study holds about 2 KB where the parsed job held 11 KB (4.4 KB before
    specs were shared). Nothing recreates a job from the mirror: new attempts are rendered."""
    without_managed_fields(obj)
    spec = obj.get("spec") or {}
    for template in [t.get("template") for t in spec.get("tasks") or [] if isinstance(t, dict)] + [
        spec.get("template")
    ]:
        if isinstance(template, dict):
            pod = template.get("spec") or {}
            kept = {k: pod[k] for k in ("nodeSelector", "priorityClassName", "schedulerName") if k in pod}
            for key in ("containers", "initContainers"):
                if isinstance(pod.get(key), list):
                    kept[key] = [
                        {"name": c.get("name"), "resources": c.get("resources") or {}}
                        for c in pod[key]
                        if isinstance(c, dict)
                    ]
            template["spec"] = kept
            template.pop("metadata", None)
    if isinstance(obj.get("spec"), dict):
        obj["spec"] = _shared(spec)
    for key in ("metadata", "status"):
        if isinstance(obj.get(key), dict):
            obj[key] = _interned(obj[key])
    meta = obj.get("metadata") or {}
    tags = meta.get("labels")
    if isinstance(tags, dict):  # the same few values on every job of a study, but the trial's
        for key, value in tags.items():
            if key != labels.TRIAL and type(value) is str:
                tags[key] = sys.intern(value)
        if tags.get(labels.TRIAL) == meta.get("name"):
            tags[labels.TRIAL] = meta["name"]  # a first attempt's name: one string
    return obj


# keys whose (short) values repeat from job to job: interned. Names, uids, versions and
# annotations are each job's own, and interning them would only grow the interned table.
SHARED = frozenset(
    {
        "apiVersion",
        "kind",
        "namespace",
        "creationTimestamp",
        "phase",
        "status",
        "type",
        "reason",
        "lastTransitionTime",
        "lastProbeTime",
    }
)
SHORT = 64  # characters: longer values (messages) are left as they are


def _interned(value: Any, shared: bool = False) -> Any:
    """`value` with every dict key interned, and the short strings under SHARED keys
    (read-only afterwards)."""
    kind = type(value)
    if kind is dict:
        return {sys.intern(k): _interned(v, k in SHARED) for k, v in value.items()}
    if kind is str:
        return sys.intern(value) if shared and len(value) <= SHORT else value
    if kind is list:
        return [_interned(v, shared) for v in value]
    return value


_SPECS: dict[str, dict[str, Any]] = {}  # trimmed specs by their JSON: a study's trials share a handful


def _shared(spec: dict[str, Any]) -> dict[str, Any]:
    """One object for every equal trimmed spec (the trials of a study have one per shape),
    so 100,000 mirrored jobs hold a few of them, not 100,000. Read-only: nothing writes
    into a mirrored job's spec."""
    key = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    found = _SPECS.get(key)
    if found is None:
        if len(_SPECS) >= 4096:  # a bound, for a loop that meets many shapes
            _SPECS.clear()
        found = _SPECS[key] = spec
    return found


class Mirror:
    """A list-then-watch cache of one kind of object, refreshed by a background thread.

    `transform` trims each object as it arrives (what client-go calls a transform), so a
    mirror of 10,000 jobs holds only what its reader needs. `on_delete` is told the last
    state of each object that goes: the object of a DELETED event, or what the cache held
    of one a relist no longer finds (a watch gap may have hidden its last changes).
    """

    def __init__(
        self,
        cluster: Cluster,
        kind: tuple[str, str],
        all_namespaces: bool = True,
        label_selector: str | None = None,
        watch_timeout: int = WATCH_SPAN,
        namespace: str | None = None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] = without_managed_fields,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] | None = None,
        rng: random.Random | None = None,
        on_delete: Callable[[dict[str, Any]], object] | None = None,
    ):
        self.cluster = cluster
        self.kind = kind
        self.all_namespaces = all_namespaces
        self.namespace = namespace
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.transform = transform
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by a stop, or by the server answering again: retry now
        self._thread: threading.Thread | None = None
        self._version = ""
        self.events = 0
        self.deletions = 0  # objects seen deleted, ever (relists included)
        self._changed = threading.Event()
        self.relists = 0
        self.on_delete = on_delete
        # clock time of the last list: from then on the cache has seen every change (a
        # watch gap ends in a relist)
        self.listed_at: float | None = None
        # health: read by the submit loop (`watch_health`), written by the thread
        self.clock = clock  # the wall clock: when a watch broke is shown to people
        self.sleep = sleep or self._nap  # a stop, or the server back, ends a wait at once
        self.rng = rng or random.Random()
        self.failures = 0  # failures of the watch (or of the relist after one), ever
        self.last_error: str | None = None
        self.broken_since: float | None = None  # clock time of the first failure of the current outage
        self._streak = 0  # failures since the last healthy watch: the backoff's exponent
        self._fresh = False  # relisted, and no event since: a 410 now is no routine expiry
        self.heard: float | None = None  # clock time the server last said anything of these objects
        self.failed_at = float("-inf")  # clock time of the watch's (or its relist's) last failure
        outage = getattr(cluster, "outage", None)
        if outage is not None:
            outage.listen(self._outage_changed)

    def _outage_changed(self, change: Change) -> None:
        if not change.down:  # the server answers again: a watch waiting to retry goes now
            self._wake.set()

    def _nap(self, seconds: float) -> None:
        """Wait before retrying: `seconds`, unless stopped or woken first."""
        self._wake.wait(seconds)
        self._wake.clear()

    def _key(self, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def relist(self) -> None:
        items, version = self.cluster.list(
            self.kind,
            self.namespace,
            label_selector=self.label_selector,
            all_namespaces=self.all_namespaces,
            transform=self.transform,
        )
        fresh = {self._key(o): o for o in items}
        del items
        with self._lock:
            gone = [self._objects[key] for key in self._objects.keys() - fresh.keys()]
            self.deletions += len(gone)
            self._objects = fresh
            self._version = version
            self.listed_at = self.heard = self.clock()
        if self.on_delete is not None:
            for obj in gone:
                self.on_delete(obj)
        self.relists += 1
        self._fresh = True
        self._changed.set()

    def start(self, follow: bool = True) -> Mirror:
        """List; with `follow`, then watch from the list's version in the background."""
        self.relist()
        if follow:
            self.follow(relist=False)
        return self

    @property
    def following(self) -> bool:
        """Whether a watch keeps the cache current (else it holds the last list, and `add`s)."""
        return self._thread is not None

    def follow(self, relist: bool = True) -> None:
        """Start the watch (once). With `relist`, a fresh list first, so the cache is whole
        when this returns: a watch from an old version would bring what changed since only
        as it replays it."""
        if self._thread is not None:
            return
        if relist:
            self.relist()
        self._thread = threading.Thread(target=self._run, name=f"mirror-{self.kind[1]}", daemon=True)
        self._thread.start()

    @property
    def healthy(self) -> bool:
        return self.broken_since is None

    def stale(self, now: float) -> str | None:
        """Why this mirror's objects may be out of date now (None: they are current): its
        watch is broken, or has been silent past its bound (it ends every WATCH_SPAN
        seconds, so a live one is heard from more often)."""
        if not self.following:
            return None
        if self.broken_since is not None and (self.heard is None or self.failed_at >= self.heard):
            # broken, and not relisted since its last failure (a relist makes it whole as of then)
            return f"{self.kind[1]} watch broken for {duration(now - self.broken_since)}"
        if self.heard is not None and now - self.heard > connections.SILENT + self.watch_timeout:
            return f"{self.kind[1]} watch silent for {duration(now - self.heard)}"
        return None

    def problem(self) -> str | None:
        """What is wrong with this watch, in one line; None while it is healthy."""
        with self._lock:
            since, error = self.broken_since, self.last_error
        if since is None:
            return None
        return f"{self.kind[1]} watch broken since {time.strftime('%H:%M:%S', time.localtime(since))}: {error}"

    def _run(self) -> None:
        """The thread: watch; after any failure relist, then watch again. Only `stop` ends it."""
        stale = False  # the cache missed events: relist before the next watch
        while not self._stop.is_set():
            try:
                if stale:
                    self.relist()
                    stale = False
                self._watch()
            except Exception as exc:  # a background thread must never die silently
                if self._stop.is_set():
                    return
                stale = True
                if isinstance(exc, Reconnect):  # its connection died, the server answers: relist now
                    self._failed(exc)
                    continue
                if getattr(exc, "status", None) == 410 and not self._fresh:
                    # the version expired (etcd compacted it): routine, relist at once
                    log.debug("watch %s: %s; relisting", self.kind[1], exc)
                    continue
                self.sleep(self._failed(exc))

    def _watch(self) -> None:
        """One watch from the cache's version, until the server ends it (healthy) or it fails."""
        for kind, obj in self.cluster.watch(
            self.kind,
            self._version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            timeout_seconds=self.watch_timeout,
            all_namespaces=self.all_namespaces,
        ):
            if self._stop.is_set():
                return
            self._apply(kind, obj)
            if self._streak:
                self._recovered()  # events flow again
        self._fresh = False
        self.heard = self.clock()  # the server ended the watch: it was live until now
        if self._streak:
            self._recovered()

    def _failed(self, exc: Exception) -> float:
        """Count a failure, warn at the first of an outage; the seconds to wait before retrying."""
        with self._lock:
            self.failures += 1
            self._streak += 1
            self.last_error = describe(exc)
            self.failed_at = self.clock()
            first = self.broken_since is None
            if first:
                self.broken_since = self.clock()
        wait = backoff(self._streak, self.rng)
        if first:
            log.warning(
                "watch of %s broke: %s; relisting and watching again, retrying with backoff (up to %gs)",
                self.kind[1],
                self.last_error,
                BACKOFF_CAP,
            )
        log.debug("watch of %s failed (%d in a row), retrying in %.1fs", self.kind[1], self._streak, wait, exc_info=exc)
        return wait

    def _recovered(self) -> None:
        with self._lock:
            since, failures = self.broken_since, self._streak
            self.broken_since, self._streak = None, 0
        if since is not None:
            # as loud as the break, so whoever saw one sees the other (stratctl sets up no
            # logging, and Python's last-resort handler prints warnings only)
            log.warning(
                "watch of %s recovered after %.0fs and %d failure(s)", self.kind[1], self.clock() - since, failures
            )

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            self._fresh = False
            self.heard = self.clock()
            if version:
                self._version = version
            if kind == "BOOKMARK":
                return
            self.events += 1
            self._changed.set()
            if kind != "DELETED":
                self._objects[self._key(obj)] = self.transform(obj)
                return
            self._objects.pop(self._key(obj), None)
            self.deletions += 1
        if self.on_delete is not None:
            self.on_delete(obj)

    def add(self, obj: dict[str, Any]) -> None:
        """Read your own writes: an object this process just created, unless the watch
        already brought it (then what is here is at least as new)."""
        with self._lock:
            self._objects.setdefault(self._key(obj), self.transform(obj))

    def wait(self, timeout: float) -> bool:
        """Block until an object changed since the last call (True) or `timeout` passed."""
        fired = self._changed.wait(timeout)
        self._changed.clear()
        return fired

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())

    def snapshot(self) -> tuple[list[dict[str, Any]], int]:
        """The objects and the deletion count they reflect, read together."""
        with self._lock:
            return list(self._objects.values()), self.deletions

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()


def watch_health(mirrors: Iterable[object]) -> tuple[int, str | None]:
    """Failures of the mirrors' watches so far, and what is broken now (None when nothing
    is). Anything that is not a Mirror (None, a test's stand-in) has nothing to report."""
    watched = [m for m in mirrors if isinstance(m, Mirror)]
    problems = [p for p in (m.problem() for m in watched) if p]
    return sum(m.failures for m in watched), "; ".join(problems) or None


def staleness(mirrors: Iterable[object], outage: Outage | None) -> str | None:
    """Why the picture the loop decides on may be out of date now, in one phrase (None: it
    is current): the API server not answering (whatever a cache holds, and any count read
    through it, is from before), or a watch broken or silent past its bound (each mirror
    on its own clock)."""
    since = getattr(outage, "since", None)
    if outage is not None and since is not None:
        return f"no answer from the API server for {duration(outage.clock() - since)}"
    reasons = [r for r in (m.stale(m.clock()) for m in mirrors if isinstance(m, Mirror)) if r]
    return "; ".join(reasons) or None
