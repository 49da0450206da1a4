"""Why a gang waits: the real cause of a pending trial, from the objects that know it.

Volcano says why a gang cannot be placed in its PodGroup's `Unschedulable` condition
(`0/8 nodes are unavailable: 8 Insufficient nvidia.com/gpu`). Some gangs never get that
far: a job whose queue does not exist gets no PodGroup at all (the job controller only
logs it), and a queue that is Closed leaves its PodGroups Pending with events that do not
name the queue. So the queue is read too, and its state comes first. `reason` is pure;
`Queues` reads queues for it, each once per lookup table. `explain_pending` fills in why
the pending trials a status table shows wait, reading as little as it can.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from stratctl.backends.kubernetes.api.cluster import EVENT, PODGROUP, QUEUE, VOLCANO_JOB
from stratctl.errors import ClusterError, NotFound
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.run.rows import TrialRow

MISSING: dict[str, Any] = {"missing": True}  # what `Queues.get` returns for a queue that does not exist


def queue_problem(name: str | None, queue: dict[str, Any] | None) -> str:
    """Why a gang in queue `name` can never start ("" when the queue is fine or unknown)."""
    if not name or queue is None:
        return ""
    if queue is MISSING:
        return (
            f"queue {name!r} does not exist: Volcano will not schedule the gang (create the queue, or drain the study)"
        )
    state = (queue.get("status") or {}).get("state") or "Open"
    if state != "Open":
        return f"queue {name!r} is {state}: Volcano admits no new gang from it"
    return ""


def condition(podgroup: dict[str, Any] | None) -> str:
    """The message of the PodGroup's Unschedulable condition ("" when it has none)."""
    for c in ((podgroup or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Unschedulable" and c.get("status") == "True":
            return c.get("message") or c.get("reason") or "unschedulable"
    return ""


# what the scheduler says of every gang whose pods do not exist yet, whatever holds it back
_NOT_READY = re.compile(r"^0/0 tasks in gang unschedulable")


def event_cause(events: list[dict[str, Any]]) -> str:
    """The newest Unschedulable event of a gang that says more than that it is not ready:
    a gang held back before its pods exist (`queue resource quota insufficient: insufficient
    nvidia.com/gpu`) has no condition, only these events."""
    telling = [
        e
        for e in events
        if e.get("reason") == "Unschedulable" and e.get("message") and not _NOT_READY.match(e["message"])
    ]
    if not telling:
        return ""
    newest = max(
        telling,
        key=lambda e: (
            e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or ""
        ),
    )
    message: str = newest["message"]
    return message


def reason(
    podgroup: dict[str, Any] | None,
    queue_name: str | None = None,
    queue: dict[str, Any] | None = None,
    events: Sequence[dict[str, Any]] = (),
) -> str:
    """Why the gang of a pending trial waits: its queue's problem, else the PodGroup's
    Unschedulable condition, else its telling events, else what its phase says ("" for a
    gang that is not waiting)."""
    blocked = queue_problem(queue_name, queue)
    if blocked:
        return blocked
    if podgroup is None:
        return "no PodGroup yet: the Volcano job controller has not caught up"
    told = condition(podgroup) or event_cause(list(events))
    if told:
        return told
    status = podgroup.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Inqueue":
        return "admitted to the queue, gang not yet placed"
    if phase == "Pending":
        return "waiting for the queue to admit the gang"
    return ""


def gang_kind(podgroup: dict[str, Any]) -> str:
    """What makes gangs wait for the same reason: the same queue, phase, members, priority
    class and resources asked for."""
    spec, status = podgroup.get("spec") or {}, podgroup.get("status") or {}
    return json.dumps(
        [
            spec.get("queue"),
            status.get("phase"),
            spec.get("minMember"),
            spec.get("priorityClassName"),
            spec.get("minResources"),
            spec.get("minTaskMember"),
        ],
        sort_keys=True,
    )


def gang_events(cluster: Cluster, namespace: str, podgroup: str) -> list[dict[str, Any]]:
    """The events of a PodGroup ([] when they cannot be read: the reason then does without)."""
    try:
        return cluster.list(EVENT, namespace, field_selector=f"involvedObject.name={podgroup}")[0]
    except ClusterError:
        return []


def queue_of(obj: dict[str, Any] | None) -> str | None:
    """The queue a Volcano Job or a PodGroup names."""
    return ((obj or {}).get("spec") or {}).get("queue") or None


class Queues:
    """Queues by name, each read once (thread-safe): `MISSING` when it does not exist,
    None when it cannot be read (no right to, or the server did not answer)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._known: dict[str, dict[str, Any] | None] = {}
        self._lock = threading.Lock()

    def get(self, name: str | None) -> dict[str, Any] | None:
        if not name:
            return None
        with self._lock:  # held while reading: a few queues, each read once however many ask
            if name not in self._known:
                try:
                    self._known[name] = self.cluster.get(QUEUE, name)
                except NotFound:
                    self._known[name] = MISSING
                except ClusterError:
                    self._known[name] = None
            return self._known[name]


def pending_reason(
    podgroup: dict[str, Any] | None,
    queues: Queues | None = None,
    queue: str | None = None,
    events: Sequence[dict[str, Any]] = (),
) -> str:
    """Why a gang waits (`waiting.reason`): a queue that is missing or not Open first, read
    through `queues` (the PodGroup's queue, or `queue` for a job that has no PodGroup), then
    the PodGroup's condition, then its `events`."""
    name = queue or queue_of(podgroup)
    return reason(podgroup, name, queues.get(name) if queues is not None else None, events)


def explain_pending(cluster: Cluster, namespace: str, rows: list[TrialRow]) -> None:
    """Fill in why the given pending trials wait: one PodGroup read each (concurrently),
    and the events of one PodGroup per kind of gang.

    Listing a PodGroup's events is a field-selector scan of every event in the namespace
    (the API server has no index for it): about 1.5 s each beside 10,000 waiting gangs.
    Gangs in the same queue, in the same phase, asking for the same resources and members
    wait for the same reason, so the events of the first of them explain the rest.
    """
    todo = [r for r in rows if r.state == TrialState.PENDING.value and not r.pending and r.podgroup]
    queues = Queues(cluster)
    groups: dict[str, dict[str, Any] | None] = {}

    def read(row: TrialRow) -> None:
        try:
            groups[row.podgroup] = cluster.get(PODGROUP, row.podgroup, namespace)
        except ClusterError:  # no PodGroup: the job's queue may be why (Volcano makes none for a missing queue)
            groups[row.podgroup] = None
            try:
                row.pending = pending_reason(None, queues, queue_of(cluster.get(VOLCANO_JOB, row.job, namespace)))
            except ClusterError:
                row.pending = pending_reason(None)

    if not todo:
        return
    with ThreadPoolExecutor(min(8, len(todo))) as pool:
        list(pool.map(read, todo))
    kinds: dict[str, list[TrialRow]] = {}  # kind of gang → its rows that need events
    for row in todo:
        group = groups[row.podgroup]
        if group is None:
            continue
        if condition(group) or queue_problem(queue_of(group), queues.get(queue_of(group))):
            row.pending = pending_reason(group, queues)
        else:
            kinds.setdefault(gang_kind(group), []).append(row)

    def explain(same: list[TrialRow]) -> None:
        events = gang_events(cluster, namespace, same[0].podgroup)
        for row in same:
            row.pending = pending_reason(groups[row.podgroup], queues, events=events)

    if kinds:
        with ThreadPoolExecutor(min(8, len(kinds))) as pool:
            list(pool.map(explain, kinds.values()))
