"""An in-memory stand-in for `stratctl.backends.kubernetes.api.cluster.Cluster`, for unit tests of the submit loop.

It keeps objects as dicts, answers 409/404 like the API server, can be told to fail
particular creates or every request (`down`: an API server outage), and moves jobs
through phases when the test says so. End-to-end tests use the real API server instead.
"""

from __future__ import annotations

import copy
import re

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import ApiMetrics
from stratctl.errors import AlreadyExists, NotFound


def merge_patch(target: dict, patch: dict) -> None:
    """A JSON merge patch (RFC 7386), as the API server applies `Cluster.patch`: nested
    mappings merge, null deletes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeCluster:
    def __init__(self, namespace: str = "stratctl-e2e"):
        self.namespace = namespace
        self.objects: dict[tuple, dict] = {}
        self.metrics = ApiMetrics()
        self.creates: list[str] = []  # names, in order, of trial objects actually created (not records)
        self.fail: dict[str, Exception] = {}  # name -> error raised by its create
        self.max_in_flight_seen = 0
        self.uids = 0
        self.down: Exception | None = None  # while set, every request fails with it (an API server outage)
        self.listed: list[tuple] = []  # (kind, field selector) of every list call

    def _answer(self) -> None:
        if self.down is not None:
            raise self.down

    def _key(self, api_version, kind, ns, name):
        return (api_version, kind, ns or self.namespace, name)

    def create(self, manifest: dict, dry_run: bool = False) -> dict:
        self.metrics.record("POST", 201, 0.001)
        self._answer()
        name = manifest["metadata"]["name"]
        if name in self.fail:
            raise self.fail[name]
        key = self._key(manifest["apiVersion"], manifest["kind"], manifest["metadata"].get("namespace"), name)
        if key in self.objects:
            raise AlreadyExists(f"{manifest['kind']} {name} already exists")
        if dry_run:
            return manifest
        obj = copy.deepcopy(manifest)
        obj.setdefault("status", {})
        self.uids += 1
        obj["metadata"].setdefault("uid", f"uid-{self.uids}")
        obj["metadata"]["resourceVersion"] = str(self.uids)
        self.objects[key] = obj
        if manifest["kind"] not in ("ConfigMap", "Lease"):  # trial objects, not the study's own
            self.creates.append(name)
        self.max_in_flight_seen = max(self.max_in_flight_seen, len(self.jobs(lambda p: p in ("Pending", "Running"))))
        return obj

    def pod_log(self, name, namespace=None, container=None, timestamps=False, since_time=None, limit_bytes=None, **_):
        """A pod's log: the lines a test put under the pod's "log" key (none by default)."""
        pod = self.objects.get(("v1", "Pod", namespace or self.namespace, name))
        if pod is None:
            raise NotFound(f"pods {name!r} not found")
        return iter(line.encode() for line in pod.get("log", []))

    def get(self, kind, name, namespace=None) -> dict:
        self.metrics.record("GET", 200, 0.001)
        self._answer()
        try:
            return copy.deepcopy(self.objects[self._key(*kind, namespace, name)])
        except KeyError:
            raise NotFound(f"{kind[1]} {name} not found") from None

    def list(
        self, kind, namespace=None, label_selector=None, field_selector=None, transform=None, **_
    ) -> tuple[list[dict], str]:
        self.metrics.record("GET", 200, 0.001)
        self._answer()
        self.listed.append((tuple(kind), field_selector))
        items = [copy.deepcopy(o) for o in self._select(tuple(kind), namespace, label_selector)]
        return (list(map(transform, items)) if transform else items), "1"

    def _select(self, kind, namespace, label_selector) -> list[dict]:
        """Objects of a kind in name order (as the API server lists them), filtered by a
        label selector of `k=v`, `k`, `!k`, `k in (a,b)` terms."""
        terms = re.findall(r"(!?)([^,=\s!]+)(?:\s+in\s+\(([^)]*)\)|=([^,]*))?", label_selector or "")
        out = []
        for (api_version, k, ns, _name), obj in sorted(self.objects.items(), key=lambda kv: kv[0][3]):
            if (api_version, k) != kind or ns != (namespace or self.namespace):
                continue
            have = obj["metadata"].get("labels") or {}
            if all(
                (key not in have)
                if negated
                else key in have and (values == equal == "" or have[key] in (values.split(",") if values else [equal]))
                for negated, key, values, equal in terms
            ):
                out.append(obj)
        return out

    PLURALS = {
        ("batch.volcano.sh/v1alpha1", "jobs"): ("batch.volcano.sh/v1alpha1", "Job"),
        ("batch/v1", "jobs"): ("batch/v1", "Job"),
        ("scheduling.volcano.sh/v1beta1", "podgroups"): ("scheduling.volcano.sh/v1beta1", "PodGroup"),
        ("v1", "pods"): ("v1", "Pod"),
        ("v1", "configmaps"): ("v1", "ConfigMap"),
    }

    def request(self, method, path, query=None, body=None, what="", content_type=""):
        """Paginated GET of a collection, as `status` reads it: limit and continue (an offset)."""
        assert method == "GET", method
        self.metrics.record("GET", 200, 0.001)
        self._answer()
        parts = path.strip("/").split("/")
        group_version = "/".join(parts[1 : parts.index("namespaces")])  # /api/v1/... or /apis/<group>/<version>/...
        namespace, kind = parts[parts.index("namespaces") + 1], self.PLURALS[(group_version, parts[-1])]
        self.requests_seen = getattr(self, "requests_seen", []) + [(path, dict(query or {}))]
        query = query or {}
        found = self._select(kind, namespace, query.get("labelSelector"))
        self.pages_served = getattr(self, "pages_served", 0) + 1
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(found)
        page = found[start : start + limit]
        more = start + limit < len(found)
        return {"items": copy.deepcopy(page), "metadata": {"continue": str(start + limit) if more else None}}

    def patch(self, kind, name, patch, namespace=None) -> dict:
        self.metrics.record("PATCH", 200, 0.001)
        self._answer()
        obj = self.objects[self._key(*kind, namespace, name)]
        given = (patch.get("metadata") or {}).get("resourceVersion")
        if given is not None and given != obj["metadata"].get("resourceVersion"):
            raise AlreadyExists(f"{kind[1]} {name}: the object has been modified (409)")
        merge_patch(obj, patch)
        self.uids += 1
        obj["metadata"]["resourceVersion"] = str(self.uids)
        return copy.deepcopy(obj)

    def delete(self, kind, name, namespace=None, resource_version=None) -> None:
        self.metrics.record("DELETE", 200, 0.001)
        self._answer()
        found = self.objects.get(self._key(*kind, namespace, name))
        if resource_version and found is not None and found["metadata"].get("resourceVersion") != resource_version:
            raise AlreadyExists(f"{kind[1]} {name}: precondition failed (409)")
        self.objects.pop(self._key(*kind, namespace, name), None)

    # -- test controls ---------------------------------------------------------------

    def jobs(self, phase_filter=lambda phase: True) -> list[dict]:
        return [
            o
            for (av, k, _, _), o in self.objects.items()
            if av == "batch.volcano.sh/v1alpha1" and k == "Job" and phase_filter(self.phase(o))
        ]

    @staticmethod
    def phase(job: dict) -> str:
        return ((job.get("status") or {}).get("state") or {}).get("phase", "Pending")

    def set_phase(self, job: dict, phase: str) -> None:
        job.setdefault("status", {})["state"] = {"phase": phase}

    def advance(self, finish: str = "Completed") -> None:
        """One step of a cluster's life: running jobs finish, pending ones start."""
        for job in self.jobs():
            phase = self.phase(job)
            if phase == "Running":
                self.set_phase(job, finish)
            elif phase == "Pending":
                self.set_phase(job, "Running")

    def record(self, study: str) -> dict:
        return self.objects[("v1", "ConfigMap", self.namespace, f"stratctl-study-{study}")]

    def trial_names(self) -> list[str]:
        return sorted(o["metadata"]["labels"][labels.TRIAL] for o in self.jobs())
