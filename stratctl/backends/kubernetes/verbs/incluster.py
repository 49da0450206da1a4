"""`submit --in-cluster`: hand a study to a driver in the cluster and return once it drives it.

The study's files go into a ConfigMap and its submit loop runs as a Job of one pod
(rendering/driverjob.py); this waits until that pod holds the study's Lease
(objects/lease.py), then says where it runs. A loop that drove the study until then (a
laptop's) hands it over at its next cycle, as to any `submit --take-over`. The same study
sent again unchanged finds its driver and says so; changed, its driver is replaced.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import Cluster
from stratctl.backends.kubernetes.api.resources import BATCH_JOB, CONFIGMAP, EVENT, LEASE, POD, SERVICE
from stratctl.backends.kubernetes.objects.lease import LeaseStore, lease_name
from stratctl.backends.kubernetes.rendering.driverjob import (
    MAX_BYTES,
    PRIORITY_CLASS,
    SERVICE_ACCOUNT,
    DriverSpec,
    config_map,
    driver_name,
    job,
    layout,
    service,
    size_of,
)
from stratctl.errors import AlreadyExists, ClusterError, NotFound, UsageError

if TYPE_CHECKING:  # delete imports this module: its start-up loads no study model
    from stratctl.core.spec import Study
from stratctl.version import VERSION

STARTUP = 180.0  # seconds a driver pod may take to hold its study (image pulled, scheduled, started)
# a container waiting for one of these will not start by itself
STUCK = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError")


@dataclass(frozen=True)
class Driven:
    """Where a study's driver runs, as its Lease names it."""

    pod: str
    node: str
    job: str
    namespace: str
    version: str  # the driver's stratctl version ("" when its Lease does not say)
    kept: bool = False  # the driver that already drove the study, left as it was

    def line(self, study: str) -> str:
        on = f" on node {self.node}" if self.node else ""
        how = "already driven" if self.kept else "driven"
        return (
            f"study {study} is {how} by pod {self.pod}{on} (Job {self.job} in {self.namespace}); "
            f"`stratctl status {study}` follows it, `stratctl logs {study} --driver` shows its output"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "job": self.job,
            "pod": self.pod,
            "node": self.node,
            "version": self.version,
            "kept": self.kept,
        }

    def version_warning(self) -> str | None:
        if self.version and self.version != VERSION:
            return f"warning: the driver runs stratctl {self.version}, this command is stratctl {VERSION}"
        return None


def study_files(study: Study) -> tuple[str, dict[str, str]]:
    """The study file and the templates it refers to, placed as driverjob.layout says:
    (the study file's place, {place: text})."""
    source = study.source.resolve() if study.source else Path.cwd() / "study.yaml"
    others: list[Path] = []
    if study.templates_dir is not None:
        stated = Path(study.templates_dir)
        if stated.is_absolute() or str(stated).startswith("~"):
            raise UsageError(
                f"{study.source or '<stdin>'}: templates_dir: {study.templates_dir} is an absolute path: "
                "--in-cluster sends the templates with the study, so give it relative to the study file"
            )
        folder = study.templates_path
        assert folder is not None
        if not folder.is_dir():
            raise UsageError(f"{study.source or '<stdin>'}: templates_dir: {folder} is not a directory")
        others = sorted(
            p
            for p in folder.rglob("*")
            if p.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in p.parts)
        )
    place, places = layout(str(source), [str(p) for p in others])
    files = {place: study.text or ""}
    for path in others:
        try:
            files[places[str(path)]] = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: cannot be sent with the study ({exc})") from None
    return place, files


def send(
    cluster: Cluster,
    spec: DriverSpec,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    startup: float = STARTUP,
) -> Driven:
    """Put the study and its driver in the cluster (or find them there, unchanged) and wait
    until the driver's pod holds the study."""
    if size_of(spec) > MAX_BYTES:
        raise UsageError(
            f"the study file and its templates are {size_of(spec) // 1024} KiB: a ConfigMap holds at most "
            f"{MAX_BYTES // 1024} KiB; --in-cluster cannot carry them"
        )
    ns, name = spec.namespace, spec.name
    wanted = job(spec)
    digest = _digest(spec)
    wanted["metadata"]["annotations"][labels.SPEC_HASH] = digest
    current = _current(cluster, name, ns)
    kept = current is not None and _active(current) and _annotation(current, labels.SPEC_HASH) == digest
    if not kept:
        if current is not None:
            _remove(cluster, BATCH_JOB, name, ns, wall, sleep)
        _replace(cluster, config_map(spec), wall, sleep)
        try:
            cluster.create(service(spec))
        except AlreadyExists:
            pass  # the same Service, from an earlier driver
        cluster.create(wanted)
    return replace(_held(cluster, spec, wall, sleep, startup), kept=kept)


def _held(
    cluster: Cluster, spec: DriverSpec, wall: Callable[[], float], sleep: Callable[[float], None], startup: float
) -> Driven:
    """Wait until a pod of the driver's Job holds the study's Lease; fail early, saying why,
    when its pod cannot start or its Job cannot make one."""
    ns, name = spec.namespace, spec.name
    store = LeaseStore(cluster, ns, spec.study)
    started = wall()
    checked = started
    while True:
        mark, _ = store.read()
        now = wall()
        if mark is not None and mark.holder.startswith(f"pod {name}-") and mark.live(now):
            pod, _, node = mark.holder.removeprefix("pod ").partition(" on ")
            return Driven(pod, node, name, ns, _lease_version(cluster, ns, spec.study))
        if now - checked >= 2.0:
            checked = now
            _check(cluster, spec, now - started)
        if now - started > startup:
            raise ClusterError(
                f"the driver of study {spec.study} did not take it within {startup:.0f} s: "
                f"{_situation(cluster, spec) or 'no pod of Job ' + name + ' yet'}"
            )
        sleep(0.5)


def _check(cluster: Cluster, spec: DriverSpec, waited: float) -> None:
    """Raise when the driver cannot come up by itself: its image, its ServiceAccount, its
    PriorityClass, a pod that ended before holding the study."""
    ns, name = spec.namespace, spec.name
    try:
        current = cluster.get(BATCH_JOB, name, ns)
    except NotFound:
        raise ClusterError(f"Job {ns}/{name} (the driver of study {spec.study}) was deleted meanwhile") from None
    for condition in (current.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            raise ClusterError(
                f"the driver Job {ns}/{name} failed: {condition.get('message') or condition.get('reason')}"
            )
    pods = _pods(cluster, spec)
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK:
                raise ClusterError(
                    f"the driver pod {ns}/{pod_name} cannot start: {waiting['reason']}: {waiting.get('message', '')}"
                    f" (its image {spec.image}: --driver-image names another)"
                )
    if not pods and waited >= 10:
        failed = _events(cluster, ns, name, "FailedCreate")
        if failed:
            hint = ""
            if SERVICE_ACCOUNT in failed or PRIORITY_CLASS in failed:
                hint = f"; an admin applies `stratctl rbac -n {ns} --driver` once per namespace"
            raise ClusterError(f"Job {ns}/{name} cannot make the driver's pod: {failed}{hint}")


def _situation(cluster: Cluster, spec: DriverSpec) -> str:
    """What the driver's pods are doing, for a message."""
    said = []
    for pod in _pods(cluster, spec):
        status = pod.get("status") or {}
        what = status.get("phase") or "Pending"
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                what += f" ({condition.get('message') or condition.get('reason')})"
        said.append(f"pod {pod['metadata']['name']} {what}")
    return "; ".join(said)


def _pods(cluster: Cluster, spec: DriverSpec) -> list[dict[str, Any]]:
    pods, _ = cluster.list(POD, spec.namespace, label_selector=f"{labels.DRIVER_OF}={spec.study}")
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def _events(cluster: Cluster, ns: str, name: str, reason: str) -> str:
    events, _ = cluster.list(EVENT, ns, field_selector=f"involvedObject.name={name},reason={reason}")
    return "; ".join(sorted({str(e.get("message") or "") for e in events} - {""}))


def _current(cluster: Cluster, name: str, ns: str) -> dict[str, Any] | None:
    try:
        return cluster.get(BATCH_JOB, name, ns)
    except NotFound:
        return None


def _active(found: dict[str, Any]) -> bool:
    """A Job that has not ended (neither Complete nor Failed) and is not being deleted."""
    if (found.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (found.get("status") or {}).get("conditions") or []
    return not any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)


def _annotation(found: dict[str, Any], key: str) -> str:
    return str(((found.get("metadata") or {}).get("annotations") or {}).get(key) or "")


def _digest(spec: DriverSpec) -> str:
    text = json.dumps([job(spec), spec.files], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _remove(
    cluster: Cluster,
    kind: tuple[str, str],
    name: str,
    ns: str,
    wall: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Delete an object and wait until it is gone (its finalizers done), so that one of the
    same name can be created."""
    cluster.delete(kind, name, ns)
    deadline = wall() + 60
    while wall() < deadline:
        try:
            cluster.get(kind, name, ns)
        except NotFound:
            return
        sleep(0.5)
    raise ClusterError(f"{kind[1]} {ns}/{name} is still being deleted after 60 s")


def _replace(
    cluster: Cluster, manifest: dict[str, Any], wall: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    try:
        cluster.create(manifest)
    except AlreadyExists:
        meta = manifest["metadata"]
        _remove(cluster, CONFIGMAP, meta["name"], meta["namespace"], wall, sleep)
        cluster.create(manifest)


def _lease_version(cluster: Cluster, ns: str, study: str) -> str:
    try:
        lease = cluster.get(LEASE, lease_name(study), ns)
    except NotFound:
        return ""
    return _annotation(lease, labels.VERSION)


def driver_pods(cluster: Cluster, ns: str, study: str) -> list[dict[str, Any]]:
    """The pods of a study's driver Job, newest last (for `logs --driver`)."""
    pods, _ = cluster.list(POD, ns, label_selector=f"{labels.DRIVER_OF}={study}")
    return sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))


def remove_driver(cluster: Cluster, ns: str, study: str) -> bool:
    """Delete a study's driver (its Job, whose pod goes with it, its ConfigMap and Service):
    True when there was one."""
    name = driver_name(study)
    found = False
    for kind in (BATCH_JOB, CONFIGMAP, SERVICE):
        try:
            cluster.get(kind, name, ns)
        except NotFound:
            continue
        cluster.delete(kind, name, ns)
        found = found or kind == BATCH_JOB
    return found


def outcome(cluster: Cluster, ns: str, study: str) -> tuple[bool, str] | None:
    """How a study's driver ended: (whether its Job completed, what its condition says);
    None while it runs. A driver whose Job is gone ended too: (False, why)."""
    found = _current(cluster, driver_name(study), ns)
    if found is None:
        return False, f"Job {ns}/{driver_name(study)} is gone (the study was deleted?)"
    for condition in (found.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return True, "the driver ended: every trial done"
        if condition.get("type") == "Failed":
            return False, f"the driver ended: {condition.get('message') or condition.get('reason')}"
    return None
