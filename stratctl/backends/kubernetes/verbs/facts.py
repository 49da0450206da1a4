"""Facts about a cluster that decide whether a study can run there at all, read before
`submit` creates anything: does the namespace exist, which Volcano queues and priority
classes are there, what each node can allocate, and which of the requests `submit` makes
the user is allowed (one SelfSubjectAccessReview each).

Reading only: `stratctl.backends.kubernetes.verbs.preflight` decides what the facts mean. A fact the user
may not read is `None` (unknown), never a guess; a server that does not answer raises.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from stratctl.backends.kubernetes.api.cluster import (
    ACCESS_REVIEW,
    NAMESPACE,
    NODE,
    PRIORITY_CLASS,
    QUEUE,
    Cluster,
    resource_path,
)
from stratctl.errors import AlreadyExists, ClusterError, NotFound, Unavailable, Unreachable


@dataclass(frozen=True)
class Access:
    """One kind of request `submit` makes: `verb` on `resource` of API `group`, in
    `namespace` (None: cluster-wide), and what submit does with it (`why`)."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    why: str = ""

    @property
    def what(self) -> str:
        """`jobs.batch.volcano.sh`, `configmaps`: kubectl's spelling of the resource."""
        return f"{self.resource}.{self.group}" if self.group else self.resource


@dataclass(frozen=True)
class Facts:
    """What the cluster says; None where the user may not read it."""

    namespace: str
    namespace_exists: bool | None = None
    queues: dict[str, dict[str, Any]] | None = None  # name -> Queue object
    volcano: bool = True  # False: the cluster has no Volcano queue API at all
    priority_classes: set[str] | None = None
    nodes: list[dict[str, Any]] | None = None
    denied: list[Access] = field(default_factory=list)  # accesses a SelfSubjectAccessReview refused
    allowed: list[Access] = field(default_factory=list)  # ... and those it allowed


def _unknown(error: ClusterError) -> bool:
    """A read the user may not make (or an API the server lacks): the fact stays unknown.
    A server that does not answer is no fact at all: that propagates."""
    return not isinstance(error, (Unavailable, Unreachable))


def _exists(read: Callable[[], object]) -> bool | None:
    """Whether `read()` finds its object: True, False on 404, None when the user may not ask."""
    try:
        read()
        return True
    except AlreadyExists:
        return True
    except NotFound:
        return False
    except ClusterError as exc:
        if not _unknown(exc):
            raise
        return None


def namespace_exists(cluster: Cluster, namespace: str, probe: dict[str, Any]) -> bool | None:
    """Whether `namespace` exists. Users who may not read namespaces (most) are asked with a
    server-side dry run of `probe`, a ConfigMap in it: the API server refuses that with 404
    when the namespace does not exist, and stores nothing either way."""
    found = _exists(lambda: cluster.get(NAMESPACE, namespace))
    if found is not None:
        return found
    return _exists(
        lambda: cluster.create({**probe, "metadata": {**probe["metadata"], "namespace": namespace}}, dry_run=True)
    )


def allowed(cluster: Cluster, access: Access) -> bool | None:
    """What a SelfSubjectAccessReview says of `access` (None: the review itself failed)."""
    attributes = {"verb": access.verb, "group": access.group, "resource": access.resource}
    if access.namespace:
        attributes["namespace"] = access.namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    try:
        # not `create`: a review must come without metadata, and a field manager would add some
        answer = cluster.request(
            "POST",
            resource_path(*ACCESS_REVIEW, None),
            body=review,
            what=f"create SelfSubjectAccessReview {access.verb} {access.what}",
        )
    except ClusterError as exc:
        if not _unknown(exc):
            raise
        return None
    return bool(((answer or {}).get("status") or {}).get("allowed"))


def read(cluster: Cluster, namespace: str, accesses: list[Access], probe: dict[str, Any], workers: int = 8) -> Facts:
    """Every fact at once (concurrently: the throttle still paces them); the first failure to
    reach the server is raised (`Unreachable` once the server has been silent too long)."""

    def queues() -> tuple[dict[str, dict[str, Any]] | None, bool]:
        try:
            items, _ = cluster.list(QUEUE, all_namespaces=True)
        except NotFound:
            return None, False
        except ClusterError as exc:
            if not _unknown(exc):
                raise
            return None, True
        return {(q.get("metadata") or {}).get("name", ""): q for q in items}, True

    def listed(kind: tuple[str, str]) -> list[dict[str, Any]] | None:
        try:
            return cluster.list(kind, all_namespaces=True)[0]
        except ClusterError as exc:
            if not _unknown(exc):
                raise
            return None

    with ThreadPoolExecutor(workers) as pool:
        exists = pool.submit(namespace_exists, cluster, namespace, probe)
        queue_answer = pool.submit(queues)
        classes = pool.submit(listed, PRIORITY_CLASS)
        nodes = pool.submit(listed, NODE)
        reviews = [(access, pool.submit(allowed, cluster, access)) for access in accesses]
        # results in submission order: the first error is the namespace read's, sent first
        namespace_known = exists.result()
        queue_items, volcano = queue_answer.result()
        class_items = classes.result()
        node_items = nodes.result()
        answers = [(access, answer.result()) for access, answer in reviews]
    return Facts(
        namespace=namespace,
        namespace_exists=namespace_known,
        queues=queue_items,
        volcano=volcano,
        priority_classes=None
        if class_items is None
        else {(c.get("metadata") or {}).get("name", "") for c in class_items},
        nodes=node_items,
        denied=[access for access, answer in answers if answer is False],
        allowed=[access for access, answer in answers if answer is True],
    )
