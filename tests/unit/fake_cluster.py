"""An in-memory stand-in for `stratctl.cluster.Cluster`, for unit tests of the submit loop.

It keeps objects as dicts, answers 409/404 like the API server, can be told to fail
particular creates, and moves jobs through phases when the test says so. End-to-end
tests use the real API server instead.
"""

from __future__ import annotations

import copy

from stratctl import labels
from stratctl.cluster import ApiMetrics
from stratctl.errors import AlreadyExists, NotFound


class FakeCluster:
    def __init__(self, namespace: str = "stratctl-e2e"):
        self.namespace = namespace
        self.objects: dict[tuple, dict] = {}
        self.metrics = ApiMetrics()
        self.creates: list[str] = []  # names, in order, of trial objects actually created (not records)
        self.fail: dict[str, Exception] = {}  # name -> error raised by its create
        self.max_in_flight_seen = 0

    def _key(self, api_version, kind, ns, name):
        return (api_version, kind, ns or self.namespace, name)

    def create(self, manifest: dict, dry_run: bool = False) -> dict:
        self.metrics.record("POST", 201, 0.001)
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
        self.objects[key] = obj
        if manifest["kind"] != "ConfigMap":
            self.creates.append(name)
        self.max_in_flight_seen = max(self.max_in_flight_seen, len(self.jobs(lambda p: p in ("Pending", "Running"))))
        return obj

    def get(self, kind, name, namespace=None) -> dict:
        self.metrics.record("GET", 200, 0.001)
        try:
            return copy.deepcopy(self.objects[self._key(*kind, namespace, name)])
        except KeyError:
            raise NotFound(f"{kind[1]} {name} not found") from None

    def list(self, kind, namespace=None, label_selector=None, **_) -> tuple[list[dict], str]:
        self.metrics.record("GET", 200, 0.001)
        wanted = dict(part.split("=", 1) for part in label_selector.split(",")) if label_selector else {}
        out = []
        for (api_version, k, ns, _name), obj in self.objects.items():
            if (api_version, k) != tuple(kind) or ns != (namespace or self.namespace):
                continue
            have = obj["metadata"].get("labels") or {}
            if all(have.get(a) == b for a, b in wanted.items()):
                out.append(copy.deepcopy(obj))
        return out, "1"

    def patch(self, kind, name, patch, namespace=None) -> dict:
        self.metrics.record("PATCH", 200, 0.001)
        obj = self.objects[self._key(*kind, namespace, name)]
        for field, value in patch.items():
            if isinstance(value, dict):
                obj.setdefault(field, {}).update(value)
            else:
                obj[field] = value
        return copy.deepcopy(obj)

    def delete(self, kind, name, namespace=None) -> None:
        self.metrics.record("DELETE", 200, 0.001)
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
