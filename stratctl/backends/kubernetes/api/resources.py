"""The kinds of object stratctl reads or writes, and where the API server keeps each: the
path of a kind's collection or of one object of it (`resource_path`)."""

from __future__ import annotations

from urllib.parse import quote

from stratctl.errors import Invalid

# (apiVersion, kind) -> (plural, namespaced). Only what stratctl reads or writes.
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("batch.volcano.sh/v1alpha1", "Job"): ("jobs", True),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): ("podgroups", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Service"): ("services", True),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Event"): ("events", True),
    ("v1", "Node"): ("nodes", False),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("v1", "Namespace"): ("namespaces", False),
    ("scheduling.volcano.sh/v1beta1", "Queue"): ("queues", False),
    ("topology.volcano.sh/v1alpha1", "HyperNode"): ("hypernodes", False),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): ("selfsubjectaccessreviews", False),
    ("coordination.k8s.io/v1", "Lease"): ("leases", True),
}

VOLCANO_JOB = ("batch.volcano.sh/v1alpha1", "Job")
BATCH_JOB = ("batch/v1", "Job")
PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")
CONFIGMAP = ("v1", "ConfigMap")
SERVICE = ("v1", "Service")
POD = ("v1", "Pod")
NODE = ("v1", "Node")
PRIORITY_CLASS = ("scheduling.k8s.io/v1", "PriorityClass")
EVENT = ("v1", "Event")
NAMESPACE = ("v1", "Namespace")
QUEUE = ("scheduling.volcano.sh/v1beta1", "Queue")
HYPERNODE = ("topology.volcano.sh/v1alpha1", "HyperNode")
ACCESS_REVIEW = ("authorization.k8s.io/v1", "SelfSubjectAccessReview")
LEASE = ("coordination.k8s.io/v1", "Lease")


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    try:
        plural, namespaced = RESOURCES[(api_version, kind)]
    except KeyError:
        raise Invalid(f"stratctl does not manage objects of kind {kind} ({api_version})") from None
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = root
    if namespaced and namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{plural}"
    if name:
        path += f"/{quote(name, safe='')}"
    return path
