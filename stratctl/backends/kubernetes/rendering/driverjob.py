"""A study's driver in the cluster (`submit --in-cluster`): the objects that carry the study
there and run its submit loop as a Job of one pod. Pure; verbs/incluster.py sends them.

- A ConfigMap `stratctl-driver-<study>` holds the study file and the templates it refers to,
  laid out as they are beside each other on the user's disk (so a `templates_dir` relative to
  the study file resolves the same in the pod).
- A Job `stratctl-driver-<study>` of one pod runs `stratctl submit <study> --take-over` with
  the pod's own credentials: ServiceAccount `stratctl-driver`, PriorityClass
  `stratctl-driver` (`stratctl rbac --driver`). A pod that dies is replaced once it has
  ended (`podReplacementPolicy: Failed`: two drivers never overlap); one disrupted (a node
  drained, preempted) counts against no limit; a loop that ended with the study's verdict
  (trials failed, the study refused, timed out) ends the Job rather than running again.
- A Service `stratctl-driver-<study>` in front of the driver's Prometheus metrics.

None of them carries `stratctl.io/study`, the label that makes an object one of the study's
trials: they carry `stratctl.io/driver-of` instead.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from stratctl import labels
from stratctl.errors import ExitCode

MOUNT = "/stratctl/study"  # where the pod finds the study's files
METRICS_PORT = 9090
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT = "stratctl-driver"
PRIORITY_CLASS = "stratctl-driver"
CONTAINER = "driver"
MAX_BYTES = 900 * 1024  # a ConfigMap holds at most 1 MiB, its metadata included
# how a driver's loop ends with the study's verdict: running it again would say the same
FINAL_EXIT_CODES = (ExitCode.FAILURE, ExitCode.INVALID_INPUT, ExitCode.CONFLICT, ExitCode.TIMEOUT)


def driver_name(study: str) -> str:
    """The name of a study's driver Job, its ConfigMap and its Service (its Lease's too)."""
    return f"stratctl-driver-{study}"


@dataclass(frozen=True)
class DriverSpec:
    """What a study's driver runs, and where."""

    study: str
    namespace: str
    image: str
    files: Mapping[str, str]  # path under MOUNT -> text
    study_file: str  # the study file's path under MOUNT
    flags: Sequence[str] = ()  # `submit` flags passed through (throttle, storage, prometheus...)
    client_version: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)  # each key's taint is tolerated too
    scheduler: str | None = None  # None: the cluster's default scheduler

    @property
    def name(self) -> str:
        return driver_name(self.study)


def layout(study_file: str, others: Sequence[str]) -> tuple[str, dict[str, str]]:
    """Where the study file and the files it refers to (absolute POSIX paths) go under MOUNT:
    relative to their deepest common directory, so each stays where the study file expects it.
    Returns the study file's place and {absolute path: place}."""
    paths = [study_file, *others]
    root = posixpath.commonpath([posixpath.dirname(p) for p in paths])
    places = {p: str(PurePosixPath(p).relative_to(root)) for p in paths}
    return places[study_file], places


def config_map(spec: DriverSpec) -> dict[str, Any]:
    """The study's files, each under a key of its own (a key cannot hold a '/'); the volume
    puts each at its place."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(spec),
        "data": {_key(i): text for i, (_, text) in enumerate(sorted(spec.files.items()))},
    }


def size_of(spec: DriverSpec) -> int:
    return sum(len(place.encode()) + len(text.encode()) for place, text in spec.files.items())


def job(spec: DriverSpec) -> dict[str, Any]:
    args = [
        "submit",
        f"{MOUNT}/{spec.study_file}",
        "--take-over",
        "--namespace",
        spec.namespace,
        "--metrics-port",
        str(METRICS_PORT),
        "--metrics-address",
        "0.0.0.0",
        *spec.flags,
    ]
    env = [
        {"name": "STRATCTL_DRIVER_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "STRATCTL_DRIVER_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "STRATCTL_CLIENT_VERSION", "value": spec.client_version},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    pod: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        # the token is mounted explicitly (below), as the ServiceAccount admission plugin would
        "automountServiceAccountToken": False,
        "priorityClassName": PRIORITY_CLASS,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {
                "name": CONTAINER,
                "image": spec.image,
                "args": args,
                "env": env,
                "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi"},
                    "limits": {"memory": "1Gi"},
                },
                "securityContext": {"allowPrivilegeEscalation": False},
                "volumeMounts": [
                    {"name": "api", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True},
                    {"name": "study", "mountPath": MOUNT, "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {
                "name": "api",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                            }
                        },
                    ]
                },
            },
            {
                "name": "study",
                "configMap": {
                    "name": spec.name,
                    "items": [
                        {"key": _key(i), "path": place} for i, (place, _) in enumerate(sorted(spec.files.items()))
                    ],
                },
            },
        ],
    }
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
        pod["tolerations"] = [{"key": key, "operator": "Exists"} for key in sorted(spec.node_selector)]
    if spec.scheduler:
        pod["schedulerName"] = spec.scheduler
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec),
        "spec": {
            "backoffLimit": 20,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": sorted(int(code) for code in FINAL_EXIT_CODES),
                        },
                    },
                ]
            },
            "template": {"metadata": {"labels": _labels(spec)}, "spec": pod},
        },
    }


def service(spec: DriverSpec) -> dict[str, Any]:
    """The driver's metrics, for a Prometheus that scrapes Services (or its pod by the same
    annotations)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec),
        "spec": {
            "selector": _labels(spec),
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}],
        },
    }


def _labels(spec: DriverSpec) -> dict[str, str]:
    return {labels.DRIVER_OF: spec.study, labels.MANAGED_BY: labels.MANAGED_BY_VALUE}


def _metadata(spec: DriverSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": _labels(spec),
        "annotations": {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(METRICS_PORT),
            labels.VERSION: spec.client_version,
        },
    }


def _key(index: int) -> str:
    return f"file-{index}"
