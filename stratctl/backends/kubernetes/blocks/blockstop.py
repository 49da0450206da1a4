"""Stopping one trial of a block (merged submissions, blocks.py) while its block goes on:
for the pruner (searching.py) and for a changed trial rerun as a Job of its own
(`--rerun-changed`, revision.py).

An Indexed Job cannot end one index from outside: a pod deleted is a failure of its index
and, with retries left, the index runs again. So the index's script in the block's
ConfigMap is replaced first by one that exits PRUNED_EXIT, which the block's pod failure
policy fails at once (FailIndex); then its live pod is deleted. If retries are left, the
next pod of the index runs that script and ends at once. A block pod's trial is named by
`job_of_pod` (state.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, POD
from stratctl.backends.kubernetes.blocks.blockmanifests import PRUNED_SCRIPT
from stratctl.backends.kubernetes.objects.state import job_of_pod
from stratctl.errors import NotFound

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster


def block_of_view(job: dict[str, Any]) -> str | None:
    """The block a trial's job view was read from (blocks.py); None for a Job of its own."""
    return ((job.get("metadata") or {}).get("labels") or {}).get(labels.IN_BLOCK)


def stop_index(
    cluster: Cluster, namespace: str, view: dict[str, Any], pods: list[dict[str, Any]] | None = None
) -> None:
    """End the trial of this view (`<block>-<index>`) in its block, now and for good.
    `pods`: the pods at hand (a watch's copy); else the block's pods are listed."""
    name = view["metadata"]["name"]
    block = block_of_view(view)
    assert block is not None  # a view of a block's trial
    index = name[len(block) + 1 :]
    try:
        cluster.patch(CONFIGMAP, block, {"data": {index: PRUNED_SCRIPT}}, namespace)
    except NotFound:  # the block is gone: nothing runs
        return
    if pods is None:
        pods, _ = cluster.list(POD, namespace, label_selector=f"{labels.BLOCK}={block}")
    for pod in pods:
        live = (pod.get("status") or {}).get("phase") in ("Pending", "Running")
        if job_of_pod(pod) == name and live and not pod["metadata"].get("deletionTimestamp"):
            try:
                cluster.delete(POD, pod["metadata"]["name"], namespace)
            except NotFound:
                pass
