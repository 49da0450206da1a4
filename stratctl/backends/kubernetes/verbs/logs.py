"""Logs: what a trial's containers printed, read through the API server (pods/log).

`pods_of` finds the pods of a trial's latest attempt (labelled study, trial, attempt),
optionally one Volcano task of its gang; of a trial in a block (merged submissions), its
index's latest pod. `best_trial` names the trial `status` would show first for a metric.
`lines` yields every container's lines, each with the name of its source when there are
several (a gang's pods, a pod's containers), so a gang's logs read like `kubectl logs
--prefix`. Following (`follow=True`) reads every source at
once and carries on across the API server's quiet-stream timeouts, resuming each source
from the timestamp of its last line.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, POD, Cluster
from stratctl.backends.kubernetes.blocks.blocks import INDEX, listed_of
from stratctl.backends.kubernetes.verbs.absent import no_pods
from stratctl.errors import ClusterError, NotFound, Unavailable, Unreachable, UsageError

TASK_KEY = "volcano.sh/task-spec"  # the Volcano task a pod belongs to (label and annotation)


@dataclass(frozen=True)
class Source:
    """One container of one pod: where a log comes from."""

    pod: str
    container: str
    prefix: str = ""  # what each of its lines is shown with ("" for the only source)


def task_of(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return (meta.get("labels") or {}).get(TASK_KEY) or (meta.get("annotations") or {}).get(TASK_KEY) or ""


def pods_of(cluster: Cluster, namespace: str, study: str, trial: str, task: str | None = None) -> list[dict[str, Any]]:
    """The pods of the trial's latest attempt that has pods, in name order."""
    selector = f"{labels.STUDY}={study},{labels.TRIAL}={trial}"
    pods = cluster.list(POD, namespace, label_selector=selector)[0] or _in_block(cluster, namespace, study, trial)
    if not pods:  # why: no such trial, not created yet, suspended, cleaned up, not started
        raise no_pods(cluster, namespace, study, trial)
    latest = max(int((p["metadata"].get("labels") or {}).get(labels.ATTEMPT, "0") or 0) for p in pods)
    pods = [p for p in pods if int((p["metadata"].get("labels") or {}).get(labels.ATTEMPT, "0") or 0) == latest]
    if task:
        tasks = sorted({task_of(p) for p in pods} - {""})
        pods = [p for p in pods if task_of(p) == task]
        if not pods:
            raise UsageError(f"trial {trial} has no task {task!r}" + (f" (tasks: {', '.join(tasks)})" if tasks else ""))
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def _in_block(cluster: Cluster, namespace: str, study: str, trial: str) -> list[dict[str, Any]]:
    """The latest pod of the trial's index in its block (merged submissions: a block's pods
    carry the block's name and their completion index, not their trial's); [] when the
    trial is in no block or its index has no pod yet."""
    blocks = cluster.list(BATCH_JOB, namespace, label_selector=f"{labels.STUDY}={study},{labels.BLOCK}")[0]
    for block in blocks:
        for index, listed in enumerate(listed_of(block)):
            if listed.name == trial:
                selector = f"{labels.BLOCK}={block['metadata']['name']},{INDEX}={index}"
                pods = cluster.list(POD, namespace, label_selector=selector)[0]
                if not pods:
                    raise UsageError(
                        f"trial {trial} of study {study} has no pod yet: it waits for its turn in its block "
                        f"{block['metadata']['name']} (index {index})"
                    )
                return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")[-1:]
    return []


def sources(pods: list[dict[str, Any]]) -> list[Source]:
    """Every container of the pods that reached a node; prefixed when there are several."""
    found = []
    for pod in pods:
        if not (pod.get("spec") or {}).get("nodeName"):
            continue  # not scheduled: nothing to read yet
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        for name in names:
            found.append((pod["metadata"]["name"], name, len(names) > 1))
    several = len(found) > 1
    return [
        Source(pod, container, (f"{pod}/{container}" if many else pod) if several else "")
        for pod, container, many in found
    ]


def best_trial(cluster: Cluster, namespace: str, study: str, metric: str) -> str:
    """The trial `status --sort METRIC` puts first: lowest `loss`, highest `-accuracy`."""
    from stratctl.backends.kubernetes.verbs.status import collect
    from stratctl.run.ranking import sort_trials

    name = metric.lstrip("-+")
    rows = [
        r
        for r in sort_trials(collect(cluster, namespace, study).trials, metric)
        if isinstance((r.result or {}).get(name), int | float)
    ]
    if not rows:
        raise UsageError(f"no trial of study {study} has reported {name!r} in its result yet")
    return rows[0].trial


def lines(
    cluster: Cluster, namespace: str, found: list[Source], tail: int | None = None, follow: bool = False
) -> Iterator[tuple[str, str]]:
    """(prefix, line) of every source's log: one source after the other, or with `follow`
    all at once, as lines arrive."""
    if not follow:
        for source in found:
            for raw in cluster.pod_log(source.pod, namespace, source.container, tail=tail):
                yield source.prefix, raw.decode("utf-8", "replace").rstrip("\n")
        return
    out: queue.Queue[Any] = queue.Queue(maxsize=1000)
    done = object()

    def pump(source: Source) -> None:
        try:
            for line in follow_one(cluster, namespace, source, tail):
                out.put((source.prefix, line))
        except BaseException as exc:  # handed to the reader, which raises it
            out.put(exc)
        finally:
            out.put(done)

    for source in found:
        threading.Thread(target=pump, args=(source,), name=f"log-{source.pod}", daemon=True).start()
    running = len(found)
    while running:
        item = out.get()
        if item is done:
            running -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            yield item


def instant(stamp: str) -> str:
    """An RFC 3339 timestamp as the kubelet writes it (trailing zeros of the fraction
    dropped), padded to nanoseconds so that timestamps compare as strings."""
    if not stamp.endswith("Z"):
        return stamp
    whole, _, fraction = stamp[:-1].partition(".")
    return f"{whole}.{fraction:0<9}Z"


def follow_one(cluster: Cluster, namespace: str, source: Source, tail: int | None = None) -> Iterator[str]:
    """One container's lines as they come, until it ends or its pod is gone. A stream the
    API server or the client times out while the container is quiet (the client's read
    deadline, `connections.SILENT`, is also how a connection that died is found) is opened
    again from the last line's timestamp (lines of that same instant already shown are
    skipped)."""
    since: str | None = None
    shown: set[str] = set()  # lines already yielded at timestamp `since`
    while True:
        try:
            for raw in cluster.pod_log(
                source.pod,
                namespace,
                source.container,
                tail=None if since else tail,
                follow=True,
                timestamps=True,
                since_time=since,
            ):
                stamp, _, text = raw.decode("utf-8", "replace").rstrip("\n").partition(" ")
                stamp = instant(stamp)
                if since is not None and stamp <= since and (stamp < since or text in shown):
                    continue
                if stamp != since:
                    since, shown = stamp, set()
                shown.add(text)
                yield text
            return
        except Unreachable:
            raise
        except Unavailable:
            try:
                cluster.get(POD, source.pod, namespace)
            except NotFound:
                return
            except ClusterError:
                pass
