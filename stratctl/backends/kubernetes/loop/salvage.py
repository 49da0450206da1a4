"""Salvage: a trial whose job the Volcano job controller lost comes back as its next attempt.

Each cycle the submit loop hands over its study's jobs and, when it mirrors them, the
cluster's pods and the namespace's PodGroups; `lost.py` says which jobs show a symptom
and since when. A job that has shown one for its patience is read again from the API
server (a mirror may lag) and, if it is still lost, replaced: its next attempt is
created first (resume=1, the earlier attempts' totals carried, annotated
`stratctl.io/requeued-because: lost by the job controller`), then the lost job is
deleted, so the trial never looks unsubmitted in between. Without the mirrors (`submit
--detach`, or a static cap that does not yield) every waiting job is a suspect and the
reads alone decide, once per patience each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import POD, PODGROUP, VOLCANO_JOB
from stratctl.backends.kubernetes.attempts.requeue import carry_forward, submit_attempt
from stratctl.backends.kubernetes.objects.lost import (
    LOST_BY_CONTROLLER,
    WAITING_PHASES,
    Sightings,
    is_lost,
    losses,
    patience,
    symptom,
)
from stratctl.backends.kubernetes.objects.state import attempt_of, podgroup_name, volcano_phase
from stratctl.errors import ClusterError, NotFound, SpecConflict, Unreachable, transient
from stratctl.run.outage import duration
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.backends.kubernetes.attempts.placement import Placing
    from stratctl.core.render import Renderer
    from stratctl.core.spec import Study
    from stratctl.run.progress import Reporter

JOB_NAME = "volcano.sh/job-name"  # label Volcano puts on a job's pods
GROUP_NAME = "scheduling.k8s.io/group-name"  # annotation naming a pod's PodGroup


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _owner_uids(obj: dict[str, Any]) -> set[str]:
    return {o.get("uid") for o in _meta(obj).get("ownerReferences") or []}


class Salvage:
    """The submit loop's step that replaces its study's lost jobs."""

    def __init__(
        self,
        cluster: Cluster,
        renderer: Renderer | Placing,
        study: Study,
        trials: dict[str, Any],
        kind: tuple[str, str],
        reporter: Reporter,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        created: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.renderer = renderer
        self.study = study
        self.trials = trials
        self.kind = kind
        self.reporter = reporter
        self.clock = clock
        self.wall = wall
        self.created = created  # told of each new attempt's objects (the loop's job mirror)
        self.sightings = Sightings()
        self._deleted: set[str] = set()  # uids of lost jobs deleted (the watch may still show them)

    def forget(self) -> None:
        """After an outage: nobody could create pods while the API server was out."""
        self.sightings.reset()

    def step(
        self,
        states: dict[str, TrialState],
        latest: dict[str, dict[str, Any]],
        jobs: list[dict[str, Any]],
        drained: bool,
        pods: list[dict[str, Any]] | None = None,
        groups: list[dict[str, Any]] | None = None,
    ) -> dict[str, TrialState]:
        """Replace the lost among the trials' latest attempts (`latest`); `jobs` are all the
        study's jobs (older attempts too), `pods` and `groups` the mirrored ones (None: not
        mirrored). Transient errors propagate (the loop waits for the API server)."""
        if self.kind != VOLCANO_JOB:
            return states  # batch/v1 Jobs get their pods from Kubernetes' own job controller
        self._delete_replaced(jobs, latest)
        now = self.clock()
        mirrored = pods is not None and groups is not None
        by_job, by_group, by_owner = self._index(pods or [], groups or [])
        suspects: dict[str, str] = {}  # uid -> trial
        for name, job in latest.items():
            if states.get(name) is not TrialState.PENDING or name not in self.trials:
                continue
            uid: str = _meta(job).get("uid") or _meta(job).get("name") or ""
            if uid in self._deleted:
                continue
            if mirrored:
                ns, job_name = _meta(job).get("namespace") or self.study.namespace, _meta(job).get("name", "")
                group = by_owner.get(uid) or by_owner.get(podgroup_name(job))
                own = by_job.get((ns, job_name), []) + by_group.get((ns, podgroup_name(job)), [])
                suspect = symptom(job, group, own) is not None
            else:
                suspect = volcano_phase(job) in WAITING_PHASES
            if suspect:
                suspects[uid] = name
        since = self.sightings.update(suspects, now)
        if drained:
            return states  # drain deletes waiting jobs itself; resume brings them back
        for uid, name in suspects.items():
            job = latest[name]
            if now - since[uid] < patience(job):
                continue
            try:
                evidence = self._evidence(job)
                if evidence is None or not is_lost(*evidence, since[uid], now):
                    self.sightings.restart(uid, now)
                    continue
                self._replace(name, evidence, now - since[uid])
            except (ClusterError, SpecConflict) as exc:
                if transient(exc) or isinstance(exc, Unreachable):
                    raise
                self.reporter.event(f"trial {name}: cannot replace its lost job {_meta(job).get('name')}: {exc}")
                self.sightings.restart(uid, now)
                continue
            states[name] = TrialState.PENDING
        return states

    @staticmethod
    def _index(
        pods: list[dict[str, Any]], groups: list[dict[str, Any]]
    ) -> tuple[
        dict[tuple[str, str], list[dict[str, Any]]],
        dict[tuple[str, str], list[dict[str, Any]]],
        dict[str, dict[str, Any]],
    ]:
        by_job: dict[tuple[str, str], list[dict[str, Any]]] = {}
        by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in pods:
            meta = _meta(pod)
            ns = meta.get("namespace", "")
            if (meta.get("labels") or {}).get(JOB_NAME):
                by_job.setdefault((ns, meta["labels"][JOB_NAME]), []).append(pod)
            elif (meta.get("annotations") or {}).get(GROUP_NAME):
                by_group.setdefault((ns, meta["annotations"][GROUP_NAME]), []).append(pod)
        by_owner: dict[str, dict[str, Any]] = {}
        for group in groups:
            for uid in _owner_uids(group):
                by_owner[uid] = group
            by_owner.setdefault(_meta(group).get("name") or "", group)
        return by_job, by_group, by_owner

    def _evidence(
        self, job: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]] | None:
        """The job, its PodGroup and its pods as the API server has them now; None when the
        job is gone or was replaced by another of the same name."""
        meta = _meta(job)
        ns = meta.get("namespace") or self.study.namespace
        try:
            fresh = self.cluster.get(self.kind, meta["name"], ns)
        except NotFound:
            return None
        if _meta(fresh).get("uid") != meta.get("uid"):
            return None
        pods, _ = self.cluster.list(POD, ns, label_selector=f"{JOB_NAME}={meta['name']}")
        # Volcano copies the job's labels to its PodGroup and makes the job its owner
        trial, attempt = (meta.get("labels") or {}).get(labels.TRIAL), attempt_of(job)
        groups, _ = self.cluster.list(PODGROUP, ns, label_selector=f"{labels.TRIAL}={trial},{labels.ATTEMPT}={attempt}")
        group = next((g for g in groups if meta.get("uid") in _owner_uids(g)), None)
        return fresh, group, pods

    def _replace(
        self, name: str, evidence: tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]], lasted: float
    ) -> None:
        """Create the trial's next attempt, then delete the lost one."""
        job, group, pods = evidence
        meta = _meta(job)
        ns = meta.get("namespace") or self.study.namespace
        attempt = attempt_of(job) + 1
        notes = {labels.REQUEUED_BECAUSE: LOST_BY_CONTROLLER, labels.LOST: str(losses(job) + 1)}
        carry = carry_forward(job, self.wall(), TrialState.PENDING)
        submit_attempt(
            self.cluster, self.renderer, self.trials[name], attempt, carry, ns, annotations=notes, created=self.created
        )
        self.cluster.delete(self.kind, meta["name"], ns)
        self._deleted.add(meta.get("uid") or meta["name"])
        self.reporter.event(
            f"trial {name}: job {meta['name']} {LOST_BY_CONTROLLER} (Pending, {symptom(job, group, pods)}, "
            f"no pods for {duration(lasted)}): deleted; attempt {attempt} resumes from its checkpoint"
        )

    def _delete_replaced(self, jobs: list[dict[str, Any]], latest: dict[str, dict[str, Any]]) -> None:
        """A lost job whose replacement exists but whose delete did not go through (the API
        server went out in between) is deleted now: it must not sit in the queue for ever."""
        for job in jobs:
            meta = _meta(job)
            trial = (meta.get("labels") or {}).get(labels.TRIAL)
            newer = latest.get(trial or "")
            if (
                newer is None
                or _meta(newer).get("name") == meta.get("name")
                or (meta.get("uid") or meta.get("name")) in self._deleted
            ):
                continue
            replaced = (_meta(newer).get("annotations") or {}).get(labels.REQUEUED_BECAUSE) == LOST_BY_CONTROLLER
            if replaced and attempt_of(newer) == attempt_of(job) + 1 and volcano_phase(job) in WAITING_PHASES:
                self.cluster.delete(self.kind, meta["name"], meta.get("namespace") or self.study.namespace)
                self._deleted.add(meta.get("uid") or meta["name"])
