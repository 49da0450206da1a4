"""Requeue: carry out recovery's decisions against the cluster.

Creates a trial's next attempt after a preemption, a suspension or a failure (rendered
with resume=1, the same checkpoint location, the totals of earlier attempts carried as
annotations), or marks a trial given up. The
submit loop calls `Requeue.step` once per cycle; `stratctl resume` calls
`submit_attempt` directly. Names are deterministic, so two launchers doing the same
resubmission create it once: a 409 with the same spec hash is success.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from stratctl import labels
from stratctl.kube.cluster import CONFIGMAP, EVENT
from stratctl.errors import AlreadyExists, ClusterError, NotFound, SpecConflict, Unreachable, transient
from stratctl.kube.record import parse_record, record_name, suspended_of
from stratctl.engine.recovery import Carried, Kind, Limits, carried, effective_state, next_actions, usage, view_of
from stratctl.kube.state import TrialState, classify, classify_attempt, podgroup_name, preemptions, spec_hash_of

def carry_forward(job: dict, now: float, state: TrialState | None = None, suspended: bool = False) -> Carried:
    """The totals the next attempt carries: the earlier ones' plus this job's."""
    before = carried(job)
    state = state or classify(job)
    used = usage(job, now, state)
    return Carried(
        preemptions=before.preemptions + preemptions(job, state),
        gpu_seconds=before.gpu_seconds + used.gpu_seconds,
        gpu_seconds_lost=before.gpu_seconds_lost + used.gpu_seconds_lost,
        suspensions=before.suspensions + (1 if suspended else 0),
        failures=before.failures + (1 if state is TrialState.FAILED else 0),
    )


def carried_of_mark(mark: dict) -> Carried:
    return Carried(
        int(mark.get("preemptions") or 0),
        float(mark.get("gpu_seconds") or 0),
        float(mark.get("gpu_seconds_lost") or 0),
        int(mark.get("suspensions") or 0),
        int(mark.get("failures") or 0),
    )


def create_attempt(cluster, manifests: list[dict], namespace: str, dry_run: bool = False,
                   created: Callable[[dict], None] | None = None) -> str:
    """Create every manifest of one attempt; 'created', or 'existing' when any was there.

    Exactly once: a 409 is success when the object there carries the same spec hash (a
    rerun, or another launcher, created it); a different hash is a SpecConflict. `created`
    is told of each object the server returned."""
    outcome = "created"
    for manifest in manifests:
        meta = manifest["metadata"]
        try:
            obj = cluster.create(manifest, dry_run=dry_run)
        except AlreadyExists:
            kind = (manifest["apiVersion"], manifest["kind"])
            there = cluster.get(kind, meta["name"], meta.get("namespace") or namespace)
            ours = meta["labels"][labels.SPEC_HASH]
            if spec_hash_of(there) != ours:
                raise SpecConflict(
                    f"{manifest['kind']} {meta['name']} exists with spec hash {spec_hash_of(there)}, "
                    f"the study renders {ours}: delete it or rename the study"
                ) from None
            outcome = "existing"
            continue
        if created is not None and obj and not dry_run:
            created(obj)
    return outcome


def submit_attempt(cluster, renderer, trial, attempt: int, carry: Carried, namespace: str,
                   annotations: dict[str, str] | None = None, created: Callable[[dict], None] | None = None) -> str:
    """Create attempt `attempt` of `trial`, resuming from its checkpoint; 'created' or 'existing'.

    `annotations` are added to the carried totals (why it was requeued); `created` is told
    of each object the server returned, as in `create_attempt`."""
    manifests = renderer.render(trial, attempt=attempt, resume=True)
    for manifest in manifests:
        meta = manifest.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **carry.annotations(), **(annotations or {})}
    return create_attempt(cluster, manifests, namespace, created=created)


class Requeue:
    """The submit loop's recovery step: preempted, suspended and failed trials come back."""

    def __init__(self, cluster, renderer, study, trials: dict, kind: tuple[str, str], reporter,
                 clock: Callable[[], float] = time.time):
        self.cluster = cluster
        self.renderer = renderer
        self.study = study
        self.trials = trials
        self.kind = kind
        self.reporter = reporter
        self.clock = clock
        self.limits = Limits(max_preemptions=study.retries.max_preemptions, max_failures=study.retries.max_failures)
        self._evictions: dict[str, list[dict]] = {}  # ended job's uid -> Evict events on its PodGroup

    def _record(self, drained: bool) -> tuple[dict[str, dict], bool]:
        """The suspension marks and the drained flag, from one read of the study record.

        `drain` sets the flag before it writes marks and deletes jobs, so a loop that sees
        a mark (or a job gone) must judge it by a flag at least as fresh: the loop's own
        copy may be older. Without a record, the loop's flag stands."""
        try:
            cm = self.cluster.get(CONFIGMAP, record_name(self.study.name), self.study.namespace)
        except NotFound:
            return {}, drained
        return suspended_of(cm), parse_record(cm).drained

    def _state(self, job: dict, state: TrialState) -> TrialState:
        """The loop classified from the job alone; an ended Volcano job may still have been
        evicted (a policy that aborts on PodEvicted): ask its PodGroup's events, once."""
        if state is not TrialState.FAILED or not job.get("apiVersion", "").startswith("batch.volcano.sh/"):
            return state
        uid = (job.get("metadata") or {}).get("uid", "")
        if uid not in self._evictions:
            try:
                self._evictions[uid], _ = self.cluster.list(
                    EVENT, self.study.namespace,
                    field_selector=f"involvedObject.name={podgroup_name(job)},reason=Evict",
                )
            except ClusterError:
                return state
        return classify_attempt(job, events=self._evictions[uid])

    def step(self, states: dict[str, TrialState], latest: dict[str, dict], drained: bool,
             record: dict | None = None) -> dict[str, TrialState]:
        """Update the loop's trial states (preempted, suspended, retrying, given up) and act on them.

        A trial left RETRYING, PREEMPTED or SUSPENDED is not finished: the loop goes on
        until its next attempt exists (a drained study holds it, a failed create is tried
        again next cycle). Whether the study is drained is read from its record with the
        marks (`record`: the loop's latest read of it, else read here); `drained` (the
        loop's copy) counts only when there is no record.
        """
        marks, drained = self._record(drained) if record is None else (suspended_of(record), parse_record(record).drained)
        views = {}
        for name, state in states.items():
            job = latest.get(name)
            mark = marks.get(name)
            if job is None and mark is None:
                continue
            if job is not None and mark is None and state not in (TrialState.PREEMPTED, TrialState.FAILED):
                continue
            real = self._state(job, state) if job is not None else state
            view = view_of(name, job, mark["attempt"] if mark else None, real)
            views[name] = view
            states[name] = effective_state(view, self.limits)
        for action in next_actions(list(views.values()), self.limits, drained):
            name = action.trial
            job = latest.get(name)
            if action.kind is Kind.GIVE_UP:
                self.cluster.patch(self.kind, job["metadata"]["name"],
                                   {"metadata": {"annotations": {labels.GIVEN_UP: action.reason}}}, self.study.namespace)
                self.reporter.event(f"trial {name}: given up, {action.reason}")
                states[name] = TrialState.FAILED
                continue
            if name not in self.trials:
                continue  # a trial of another version of the study
            mark = marks.get(name)
            if job is not None and (mark is None or mark["attempt"] < int(job["metadata"]["labels"][labels.ATTEMPT])):
                carry = carry_forward(job, self.clock(), views[name].state)
            else:
                carry = carried_of_mark(mark or {})
            try:
                submit_attempt(self.cluster, self.renderer, self.trials[name], action.attempt, carry,
                               self.study.namespace)
            except (ClusterError, SpecConflict) as exc:
                if transient(exc) or isinstance(exc, Unreachable):
                    raise  # the API server is out, not this trial: the loop waits for it
                self.reporter.event(f"trial {name}: cannot resubmit attempt {action.attempt}: {exc}")
                continue
            self.reporter.event(f"trial {name}: attempt {action.attempt} resumes from its checkpoint, {action.reason}")
            states[name] = TrialState.PENDING
        return states
