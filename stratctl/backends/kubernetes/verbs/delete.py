"""Delete: take a study out of the cluster, its driver (`submit --in-cluster`), jobs, PodGroups,
Services, pods and record.

`survey` counts what a study has in the cluster and whether a submit loop is following
it (its heartbeat in the record, `record.loop_following`); `check` decides, purely,
whether a deletion may go ahead (a loop is following and `--force` was not given: no;
no confirmation on a terminal and no `--yes`: ask, or refuse when nobody can answer).
`delete` removes the jobs first (background propagation: the garbage collector takes
their pods, PodGroups and a batch/v1 Job's headless Service), waits until they are gone so
no job controller recreates a pod, then the PodGroups, Services and pods no job owns (the
garbage collector's are left to it: a user may delete jobs without being allowed to delete
pods), and the record last: a deletion cut short can be run again, since the study is
still listed. It waits, bounded, until the objects are gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD, PODGROUP, SERVICE, VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.api.resources import LEASE
from stratctl.backends.kubernetes.objects.lease import lease_name
from stratctl.backends.kubernetes.objects.record import DELETING_KEY, loop_following, record_name
from stratctl.backends.kubernetes.rendering.driverjob import driver_name
from stratctl.backends.kubernetes.verbs.incluster import remove_driver
from stratctl.errors import NotFound, StratctlError, UsageError

JOB_KINDS = (VOLCANO_JOB, BATCH_JOB)
GONE_TIMEOUT = 60.0  # seconds `delete` waits for the objects to disappear
POLL = 0.5


class Followed(StratctlError):
    """A running submit loop follows the study: deleting it under the loop would race it."""

    exit_code = UsageError.exit_code


@dataclass
class Survey:
    """What a study has in the cluster, by kind, and the loop following it (if any)."""

    study: str
    jobs: int = 0
    podgroups: int = 0
    pods: int = 0
    services: int = 0  # the headless Services of batch/v1 attempts (a Volcano Job's are Volcano's)
    record: bool = False
    loop: dict[str, Any] | None = None  # the heartbeat of a submit loop following the study
    driver: bool = False  # a driver in the cluster drives it (`submit --in-cluster`): delete stops it

    def describe(self) -> str:
        parts = [f"{self.jobs} job(s)", f"{self.podgroups} PodGroup(s)", f"{self.pods} pod(s)"]
        if self.services:
            parts.insert(2, f"{self.services} Service(s)")
        said = ", ".join(parts) + (" and its record" if self.record else "")
        return said + (f", and its driver (Job {driver_name(self.study)})" if self.driver else "")


@dataclass
class Outcome:
    """What `delete` removed, by kind, and what was still there when it stopped waiting."""

    study: str
    deleted: dict[str, int] = field(default_factory=dict)
    left: dict[str, int] = field(default_factory=dict)
    kept_record: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "deleted": dict(self.deleted),
            "left": dict(self.left),
            "kept_record": self.kept_record,
        }


def _selector(study: str) -> str:
    return f"{labels.STUDY}={study}"


def _names(
    cluster: Cluster, kind: tuple[str, str], namespace: str, study: str, orphans_only: bool = False
) -> list[str]:
    return [
        o["metadata"]["name"]
        for o in cluster.list(kind, namespace, label_selector=_selector(study))[0]
        if not (orphans_only and o["metadata"].get("ownerReferences"))
    ]


def survey(cluster: Cluster, namespace: str, study: str, now: float) -> Survey:
    found = Survey(study)
    try:
        cm = cluster.get(CONFIGMAP, record_name(study), namespace)
        found.record, found.loop = True, loop_following(cm, now)
    except NotFound:
        pass
    found.jobs = sum(len(_names(cluster, kind, namespace, study)) for kind in JOB_KINDS)
    found.podgroups = len(_names(cluster, PODGROUP, namespace, study))
    found.pods = len(_names(cluster, POD, namespace, study))
    found.services = len(_names(cluster, SERVICE, namespace, study))
    try:
        cluster.get(BATCH_JOB, driver_name(study), namespace)
        found.driver = True
    except NotFound:
        pass
    if not (found.driver or found.record or found.jobs or found.podgroups or found.pods or found.services):
        raise UsageError(f"no study {study!r} in namespace {namespace}: nothing carries the label {_selector(study)}")
    return found


def check(found: Survey, now: float, force: bool, yes: bool, interactive: bool) -> bool:
    """Whether to ask for a confirmation before deleting (pure); raises when it may not go on."""
    if found.loop is not None and not force and not found.driver:  # a driver's loop is stopped by delete
        where = f" on {found.loop.get('host')} (pid {found.loop.get('pid')})" if found.loop.get("host") else ""
        raise Followed(
            f"a submit loop{where} is following study {found.study} (heartbeat "
            f"{max(0, round(now - float(found.loop['at'])))} s ago): stop it first, or pass --force"
        )
    if yes:
        return False
    if not interactive:
        raise UsageError(f"deleting study {found.study} needs a confirmation: pass --yes")
    return True


def delete(
    cluster: Cluster,
    namespace: str,
    study: str,
    keep_record: bool = False,
    timeout: float = GONE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Delete the study's objects (module docstring) and wait, at most `timeout`, until they are gone."""
    outcome = Outcome(study, kept_record=keep_record)
    deadline = clock() + timeout
    jobs = {kind: _names(cluster, kind, namespace, study) for kind in JOB_KINDS}
    counts: dict[str, Callable[[], int]] = {
        "jobs": lambda: sum(len(_names(cluster, kind, namespace, study)) for kind in JOB_KINDS),
        "podgroups": lambda: len(_names(cluster, PODGROUP, namespace, study)),
        "pods": lambda: len(_names(cluster, POD, namespace, study)),
        "services": lambda: len(_names(cluster, SERVICE, namespace, study)),
    }
    outcome.deleted = {
        "jobs": sum(len(n) for n in jobs.values()),
        "podgroups": counts["podgroups"](),
        "pods": counts["pods"](),
        "services": counts["services"](),
    }
    if remove_driver(cluster, namespace, study):  # its driver in the cluster first: it stops
        outcome.deleted["driver"] = 1
    try:  # then a submit loop still following the study (`--force`) stops, creating nothing again
        cluster.patch(CONFIGMAP, record_name(study), {"data": {DELETING_KEY: "true"}}, namespace)
    except NotFound:
        pass
    for kind, names in jobs.items():
        for name in names:
            cluster.delete(kind, name, namespace)
    _wait(counts["jobs"], deadline, clock, sleep)
    for kind in (PODGROUP, SERVICE, POD):  # what no job owns, so the garbage collector will not take it
        for name in _names(cluster, kind, namespace, study, orphans_only=True):
            try:
                cluster.delete(kind, name, namespace)
            except NotFound:
                pass
    # a block's ConfigMap of scripts (merged submissions): the study's ConfigMaps but its record
    for block in cluster.list(CONFIGMAP, namespace, label_selector=f"{_selector(study)},{labels.BLOCK}")[0]:
        cluster.delete(CONFIGMAP, block["metadata"]["name"], namespace)
        outcome.deleted["scripts"] = outcome.deleted.get("scripts", 0) + 1
    _wait(lambda: sum(count() for count in counts.values()), deadline, clock, sleep)
    outcome.left = {key: n for key, count in counts.items() if (n := count())}
    if keep_record:
        cluster.patch(CONFIGMAP, record_name(study), {"data": {DELETING_KEY: None}}, namespace)
    if not outcome.left:  # its driver's mark (run/driver.py), if any: no loop drives it now
        cluster.delete(LEASE, lease_name(study), namespace)
    if not keep_record and not outcome.left:  # the record goes last: a deletion cut short can be run again
        try:
            cluster.get(CONFIGMAP, record_name(study), namespace)
            cluster.delete(CONFIGMAP, record_name(study), namespace)
            outcome.deleted["record"] = 1
        except NotFound:
            outcome.deleted["record"] = 0
    return outcome


def _wait(
    remaining: Callable[[], int], deadline: float, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    while remaining() and clock() < deadline:
        sleep(POLL)
