"""The submit loop's side of the study record (the ConfigMap of record.py): created or
adopted when the loop starts, its flags read back, the loop's own keys written.

The record is shared: `drain` and `resume` (in other processes, on other machines) own
`drained` and the suspension marks, so the loop never writes the whole record back, only
the keys it changed (`change` marks them, `save` and `flush` write them). Writes are
coalesced: the target and its reason at most every RECORD_EVERY seconds (SUMMARY_EVERY
while the API quota pushes back: a one-seat quota has no room for a write per decision);
the study's summary row rides along when due (`save_summary`), and so does the heartbeat
that tells `delete` a loop follows the study.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, Cluster
from stratctl.backends.kubernetes.objects.record import (
    StudyRecord,
    loop_data,
    parse_record,
    record_data,
    record_manifest,
    record_name,
)
from stratctl.backends.kubernetes.objects.summary import build, latest_slim, summary_data
from stratctl.errors import AlreadyExists, ClusterError, NotFound

SUMMARY_EVERY = 10.0  # seconds between two summaries in the study record, at least
SUMMARY_REFRESH = 20.0  # ... and at most, while the loop runs
RECORD_EVERY = 2.0  # seconds between two writes of the record's target and reason, at least
ADOPTED = ("study.yaml", "spec-hash", "trials", "critical", "max-failures", "spec")  # a rerun's own keys


class RecordKeeper:
    """One study's record, as one submit loop keeps it."""

    def __init__(
        self,
        cluster: Cluster,
        record: StudyRecord,
        namespace: str,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.cluster, self.record, self.namespace = cluster, record, namespace
        self.name = record_name(record.study)
        self.say, self.clock, self.wall = say, clock, wall
        self.cm: dict[str, Any] | None = None  # the record as last read (suspension marks included)
        self.exists = False  # the record exists (ensure went through)
        self.created = False  # this run created it (rather than adopting a previous run's)
        self.following = False  # whether the record's heartbeat says this loop follows the study
        self._unsaved: set[str] = set()  # keys changed since the last write (coalesced)
        self._written = float("-inf")  # clock time of the last write
        self._summary: tuple[float, dict[str, Any], float] | None = (
            None  # (clock, data, build seconds) of the last written
        )
        self._flags_read = float("-inf")  # clock time the flags were last read
        self._deletions_read = 0  # jobs seen deleted when the flags were last read

    def ensure(self) -> None:
        """Create the study record, or adopt the one a previous run left (keeping its flags)."""
        try:
            self.cluster.create(record_manifest(self.record, self.namespace))
            self.created = True
            self.say(f"recorded study {self.record.study} in ConfigMap {self.name}")
        except AlreadyExists:
            existing = parse_record(self.cluster.get(CONFIGMAP, self.name, self.namespace))
            self.record = replace(
                self.record,
                drained=existing.drained,
                finished=existing.finished,
                target=existing.target,
                moved=existing.moved,
                told=existing.told,
            )
            self.save(*ADOPTED)  # a change was judged before the loop started (revision.revise)
        self.exists = True

    def change(self, *keys: str, **fields: Any) -> None:
        """Change the record's fields; the keys they are written under go with the next write."""
        self.record = replace(self.record, **fields)
        self._unsaved.update(keys)

    def save(self, *keys: str) -> None:
        """Write the named keys now."""
        data = record_data(self.record)
        self.cluster.patch(CONFIGMAP, self.name, {"data": {k: data[k] for k in keys}}, self.namespace)
        self._unsaved.difference_update(keys)

    def flush(self, force: bool, tight: bool) -> None:
        """Write the changed keys, unless a write went out moments ago (then with the next)."""
        if self.cm is not None:
            self._write(self._unsaved_due(self.clock(), force, tight), self.clock())

    def due(self, watched: bool, poll_interval: float, deletions_seen: int) -> bool:
        """Whether to read the flags (drained, suspension marks) this cycle: every poll
        interval, and whenever one of the study's jobs was deleted since the last read.
        `drain` sets the flag before it deletes jobs, so a read made after the loop saw a
        job gone sees the flag: the loop never admits into a drain on a stale copy."""
        return not watched or self.clock() - self._flags_read >= poll_interval or deletions_seen != self._deletions_read

    def refresh(self, deletions_seen: int) -> None:
        self._flags_read, self._deletions_read = self.clock(), deletions_seen
        try:
            cm = self.cluster.get(CONFIGMAP, self.name, self.namespace)
        except NotFound:  # taken out under the loop: the study was deleted (`stratctl delete --force`)
            self.record = replace(self.record, deleting=True)
            return
        self.cm = cm
        now = parse_record(cm)
        self.record = replace(self.record, drained=now.drained, deleting=now.deleting)

    def save_summary(
        self,
        force: bool,
        done: bool,
        tight: bool,
        jobs: dict[str, dict[str, Any]],
        starts: Callable[[], dict[str, Any] | None],
    ) -> None:
        """Keep the study's row (trials by state, attempts, GPU-hours) in its record, so
        `status` shows this study without listing its jobs: when it changed, at most every
        SUMMARY_EVERY seconds (or 20 times what building it took, so a huge study spends at
        most 5% of the loop on it), and at least every SUMMARY_REFRESH (status trusts a
        summary for 30 s), and when `force`d. The changed keys ride along; `done`: the loop's
        last word, its heartbeat says it no longer follows the study. `jobs` are each trial's latest
        attempt; `starts` reads when batch/v1 Jobs' pods started (only when one is built)."""
        if self.cm is None:
            return
        now = self.clock()
        patch = self._unsaved_due(now, force, tight)
        summary = self._summary_due(now, force, jobs, starts)
        if summary is not None:
            patch.update(summary[1])
            # the heartbeat rides on the summary (no request of its own); the final one says the loop is done
            self.following = not done
            patch.update(self._heartbeat(self.following))
        self._write(patch, now)
        if summary is not None:
            self._summary = summary[0]

    def stopped(self) -> None:
        """Say the loop no longer follows the study, unless its last word said so already (best
        effort: a heartbeat left behind goes stale)."""
        if self.cm is None or not self.following:
            return
        self.following = False
        try:
            self.cluster.patch(CONFIGMAP, self.name, {"data": self._heartbeat(False)}, self.namespace)
        except ClusterError:
            pass

    def take_back(self) -> str:
        """A run that gives up before any trial: the record it created goes (one try, past the
        throttle: nothing half-done); what is left, said to the user."""
        try:
            self.cluster.with_gate(lambda send, mutating=False: send()).delete(CONFIGMAP, self.name, self.namespace)
        except ClusterError:
            return (
                f"no trial was created; the study's record (ConfigMap {self.name}) "
                "was left: run the same command again later, or `stratctl delete`"
            )
        return "nothing was created"

    def _heartbeat(self, running: bool) -> dict[str, str]:
        """The record key saying this loop follows the study (`delete` refuses while it does)."""
        return loop_data(self.wall(), running, socket.gethostname(), os.getpid())

    def _unsaved_due(self, now: float, force: bool, tight: bool) -> dict[str, str]:
        """The keys changed since the last write, if one may be written now."""
        due = force or now - self._written >= (SUMMARY_EVERY if tight else RECORD_EVERY)
        if not (self._unsaved and due):
            return {}
        data = record_data(self.record)  # as the record is now: a key changed twice is written once, its latest
        return {k: data[k] for k in self._unsaved}

    def _write(self, patch: dict[str, str], now: float) -> None:
        if not patch:
            return
        self.cluster.patch(CONFIGMAP, self.name, {"data": patch}, self.namespace)
        self._written = now
        self._unsaved.difference_update(patch)

    def _summary_due(
        self, now: float, force: bool, jobs: dict[str, dict[str, Any]], starts: Callable[[], dict[str, Any] | None]
    ) -> tuple[tuple[float, dict[str, Any], float], dict[str, Any]] | None:
        """The summary to write now, if one is due: (what to remember of it, its record keys)."""
        last_time, last_data, cost = self._summary or (float("-inf"), {}, 0.0)
        if not force and now - last_time < max(SUMMARY_EVERY, 20 * cost):
            return None
        at, started = self.wall(), time.perf_counter()
        assert self.cm is not None  # a summary is saved only into a record that was read
        cm = {**self.cm, "data": {**(self.cm.get("data") or {}), **record_data(self.record)}}
        (row,), _ = build(at, [cm], latest_slim(jobs.values()), starts=starts())
        cost = time.perf_counter() - started
        data = summary_data(row, 0.0)  # compared without the time it was taken
        if not force and data == last_data and now - last_time < SUMMARY_REFRESH:
            return None
        return (now, data, cost), summary_data(row, at)
