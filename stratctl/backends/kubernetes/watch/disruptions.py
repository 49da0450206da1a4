"""Disruptions: the pods the scheduler took away, by job, remembered after they are gone.

When Volcano preempts or reclaims a pod it marks it `DisruptionTarget=True` (reason
PreemptionByScheduler) and deletes it. A pod mirror sees both: the condition in an update,
the pod's last state in the DELETED event. `Disruptions` keeps the pods seen with that
condition, keyed by the uid of the job that owns them, and forgets a deleted one `keep`
seconds after it went; so whether an ended job was preempted is answered from memory, not
by listing events (one field-selected list per job, seconds each in a namespace of 10,000
jobs, and nothing at all once the events expired or to a user who may not list them).

It plugs into a `Mirror` of pods: `observe` as its transform, `deleted` as its on_delete.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from stratctl.backends.kubernetes.objects.state import disrupted_at, owner_uid, timestamp
from stratctl.backends.kubernetes.watch.mirror import without_managed_fields

KEEP = 600.0  # seconds a deleted pod's last state is kept: longer than a loop takes to see its job end


class Disruptions:
    """Pods marked DisruptionTarget=True, by owning job uid; deleted ones for `keep` seconds."""

    def __init__(self, keep: float = KEEP, clock: Callable[[], float] = time.monotonic):
        self.keep = keep
        self.clock = clock
        self._lock = threading.Lock()
        # job uid -> pod "namespace/name" -> (last state seen, clock time it was deleted or None)
        self._pods: dict[str, dict[str, tuple[dict[str, Any], float | None]]] = {}

    @staticmethod
    def _key(pod: dict[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def observe(self, pod: dict[str, Any]) -> dict[str, Any]:
        """A pod as it arrives (the mirror's transform): noted when it is disrupted."""
        pod = without_managed_fields(pod)
        uid = owner_uid(pod)
        if uid and disrupted_at(pod) is not None:
            with self._lock:
                self._pods.setdefault(uid, {})[self._key(pod)] = (pod, None)
        return pod

    def deleted(self, pod: dict[str, Any]) -> None:
        """A pod's last state, as it is deleted (the mirror's on_delete)."""
        uid = owner_uid(pod)
        if not uid:
            return
        now = self.clock()
        with self._lock:
            self._prune(now)
            known = self._pods.get(uid, {})
            if disrupted_at(pod) is not None:
                self._pods.setdefault(uid, {})[self._key(pod)] = (pod, now)
            elif self._key(pod) in known:  # a later state without the condition: keep the one with it
                known[self._key(pod)] = (known[self._key(pod)][0], now)

    def of(self, uid: str) -> list[dict[str, Any]]:
        """The pods of job `uid` seen disrupted: those still there and those deleted lately."""
        with self._lock:
            self._prune(self.clock())
            return [pod for pod, _ in (self._pods.get(uid) or {}).values()]

    def stuck(self, uid: str, now: float, after: float) -> list[dict[str, Any]]:
        """Pods of job `uid` disrupted and still there, not terminated `after` seconds past
        their deletion time (`now`: wall clock, as the API server writes times)."""
        found = []
        with self._lock:
            for pod, gone in (self._pods.get(uid) or {}).values():
                deadline = timestamp((pod.get("metadata") or {}).get("deletionTimestamp"))
                phase = (pod.get("status") or {}).get("phase")
                if (
                    gone is None
                    and deadline is not None
                    and phase not in ("Succeeded", "Failed")
                    and now - deadline > after
                ):
                    found.append(pod)
        return found

    def deleted_pods(self) -> list[dict[str, Any]]:
        """Every deleted pod remembered: their start times tell when their gangs ran."""
        with self._lock:
            self._prune(self.clock())
            return [pod for pods in self._pods.values() for pod, gone in pods.values() if gone is not None]

    def _prune(self, now: float) -> None:
        for uid in list(self._pods):
            pods = self._pods[uid]
            for key in [k for k, (_, gone) in pods.items() if gone is not None and now - gone > self.keep]:
                del pods[key]
            if not pods:
                del self._pods[uid]
