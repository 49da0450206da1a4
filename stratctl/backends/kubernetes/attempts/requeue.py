"""Requeue: carry out recovery's decisions against the cluster.

Creates a trial's next attempt after a preemption, a suspension or a failure (rendered
with resume=1, the same checkpoint location, the totals of earlier attempts carried as
annotations), or marks a trial given up. The
submit loop calls `Requeue.step` once per cycle; `stratctl resume` calls
`submit_attempt` directly. Names are deterministic, so two launchers doing the same
resubmission create it once: a 409 with the same spec hash is success.

Whether an attempt that ended without completing was preempted is read from the job
first (`state.classify`), then from the pods the loop's pod mirror saw disrupted
(`signals.disruptions`, deleted ones included), and only when those cannot tell (no
mirror, or one that started after the job) from the scheduler's `Evict` events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, EVENT, POD, PODGROUP
from stratctl.backends.kubernetes.objects.jobview import PARKED, Carried, carried, trial_of_job, usage, view_of
from stratctl.backends.kubernetes.objects.record import parse_record, record_name, suspended_of, suspended_patch
from stratctl.backends.kubernetes.objects.state import (
    attempt_of,
    classify,
    classify_attempt,
    ended_at,
    is_batch,
    podgroup_name,
    preemptions,
    run_starts,
    spec_hash_of,
    timestamp,
)
from stratctl.errors import AlreadyExists, ClusterError, NotFound, SpecConflict, Unreachable, transient
from stratctl.run.recovery import Action, Kind, Limits, TrialView, effective_state, next_actions
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.backends.kubernetes.attempts.placement import Placing
    from stratctl.core.render import Renderer
    from stratctl.core.space import Trial
    from stratctl.core.spec import Study
    from stratctl.run.progress import Reporter

# The pod mirror has seen every pod of a job created this long after its last list (a
# margin for the clocks of this machine and the API server).
CLOCK_SKEW = 5.0
# ... and has had time to deliver the last pod updates before the job's end: the pods and
# the job come by different watches, in no guaranteed order.
SETTLE = 3.0
# A disrupted pod still there (not terminated) this long past its deletion time: no kubelet
# will finish it (a lost node). A batch/v1 Job whose pod failure policy waits for the pod to
# fail would wait forever, the pod and its gang holding their GPUs.
STUCK_AFTER = 15.0


def carry_forward(
    job: dict[str, Any],
    now: float,
    state: TrialState | None = None,
    suspended: bool = False,
    started: float | None = None,
) -> Carried:
    """The totals the next attempt carries: the earlier ones' plus this job's (`started`:
    when a batch/v1 Job's first pod started, see `jobview.usage`)."""
    before = carried(job)
    state = state or classify(job)
    used = usage(job, now, state, started)
    return Carried(
        preemptions=before.preemptions + preemptions(job, state),
        gpu_seconds=before.gpu_seconds + used.gpu_seconds,
        gpu_seconds_lost=before.gpu_seconds_lost + used.gpu_seconds_lost,
        suspensions=before.suspensions + (1 if suspended else 0),
        failures=before.failures + (1 if state is TrialState.FAILED else 0),
    )


class Disrupted(Protocol):
    """The pods the loop saw disrupted, by their job's uid (watch/disruptions.py)."""

    def of(self, uid: str) -> list[dict[str, Any]]: ...

    def stuck(self, uid: str, now: float, after: float) -> list[dict[str, Any]]: ...


class PodSignals(Protocol):
    """What the recovery steps read of the loop's pod watch (watch/capacity.py's
    `ClusterSignals`), when the loop watches pods."""

    @property
    def disruptions(self) -> Disrupted: ...

    def pod_starts(self) -> dict[str, float]: ...

    def pods_complete_since(self) -> float | None: ...


def pod_starts(
    cluster: Cluster, namespace: str, study: str, kind: tuple[str, str], signals: PodSignals | None = None
) -> dict[str, float] | None:
    """Job uid → when its first pod started, which a batch/v1 Job does not record (see
    `jobview.usage`): from the loop's pod mirror when it has one, else from one list of the
    study's pods; None for Volcano Jobs (they record it) or when the pods cannot be read."""
    if signals is not None:
        return signals.pod_starts()
    if kind != BATCH_JOB:
        return None
    try:
        pods, _ = cluster.list(POD, namespace, label_selector=f"{labels.STUDY}={study}")
    except ClusterError:
        return None
    return run_starts(pods)


def identity(job: dict[str, Any]) -> dict[str, Any]:
    """The trial's index and parameters, as its job carries them: kept in its suspension
    mark, so a trial a closed-loop search asked can come back once its job is gone."""
    trial = trial_of_job(job)
    return {"index": trial.index, "params": dict(trial.params)} if trial is not None else {}


def mark_of(job: dict[str, Any], carry: Carried, by: str = "", state: str = "") -> dict[str, Any]:
    """The suspension mark (objects/record.py) of a trial whose attempt `job` is ended
    without its next one: that attempt, the totals the next carries, who ended it (`by`,
    when not a user's `drain`), how (`state`: jobview.PARKED for a preemption) and the
    trial's index and parameters."""
    return {
        "attempt": attempt_of(job),
        "preemptions": carry.preemptions,
        "gpu_seconds": round(carry.gpu_seconds),
        "gpu_seconds_lost": round(carry.gpu_seconds_lost),
        "suspensions": carry.suspensions,
        "failures": carry.failures,
        **({"by": by} if by else {}),
        **({"state": state} if state else {}),
        **identity(job),
    }


def carried_of_mark(mark: dict[str, Any]) -> Carried:
    return Carried(
        int(mark.get("preemptions") or 0),
        float(mark.get("gpu_seconds") or 0),
        float(mark.get("gpu_seconds_lost") or 0),
        int(mark.get("suspensions") or 0),
        int(mark.get("failures") or 0),
    )


def create_attempt(
    cluster: Cluster,
    manifests: list[dict[str, Any]],
    namespace: str,
    dry_run: bool = False,
    created: Callable[[dict[str, Any]], None] | None = None,
) -> str:
    """Create every manifest of one attempt; 'created', or 'existing' when any was there.

    Exactly once: a 409 is success when the object there carries the same spec hash (a
    rerun, or another launcher, created it); a different hash is a SpecConflict. `created`
    is told of each object the server returned. An object owned by one created before it
    (a batch/v1 Job's headless Service) gets its owner's uid, which only the server knows."""
    outcome = "created"
    uids: dict[tuple[str, str, str], str] = {}  # (apiVersion, kind, name) -> uid, of this attempt's objects
    for manifest in manifests:
        manifest = owned(manifest, uids)
        meta = manifest["metadata"]
        key = (manifest["apiVersion"], manifest["kind"], meta["name"])
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
            uids[key] = (there.get("metadata") or {}).get("uid", "")
            outcome = "existing"
            continue
        uids[key] = ((obj or {}).get("metadata") or {}).get("uid", "")
        if created is not None and obj and not dry_run:
            created(obj)
    return outcome


def owned(manifest: dict[str, Any], uids: dict[tuple[str, str, str], str]) -> dict[str, Any]:
    """`manifest` with the uid of each owner reference left empty filled in from `uids`
    (a copy; the rendered manifest stays as rendered)."""
    refs = (manifest.get("metadata") or {}).get("ownerReferences")
    if not refs or all(ref.get("uid") for ref in refs):
        return manifest
    filled = [
        {**ref, "uid": ref.get("uid") or uids.get((ref.get("apiVersion"), ref.get("kind"), ref.get("name")), "")}
        for ref in refs
    ]
    return {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": filled}}


def submit_attempt(
    cluster: Cluster,
    renderer: Renderer | Placing,
    trial: Trial,
    attempt: int,
    carry: Carried,
    namespace: str,
    annotations: dict[str, str] | None = None,
    created: Callable[[dict[str, Any]], None] | None = None,
) -> str:
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

    def __init__(
        self,
        cluster: Cluster,
        renderer: Renderer | Placing,
        study: Study,
        trials: dict[str, Any],
        kind: tuple[str, str],
        reporter: Reporter,
        clock: Callable[[], float] = time.time,
        signals: PodSignals | None = None,
    ) -> None:
        self.cluster = cluster
        self.renderer = renderer
        self.study = study
        self.trials = trials
        self.kind = kind
        self.reporter = reporter
        self.clock = clock  # the wall clock: compared with the API server's times
        self.signals = signals  # engine.signals.ClusterSignals, when the loop watches pods
        self.limits = Limits(max_preemptions=study.retries.max_preemptions, max_failures=study.retries.max_failures)
        self._verdicts: dict[str, TrialState] = {}  # ended job's uid -> PREEMPTED or FAILED, once decided
        self._stuck: dict[str, str] = {}  # uid of a batch job to end once its next attempt exists -> why
        self._ending: dict[str, tuple[str, str]] = {}  # uid of a batch job to delete -> (name, why)
        self._deleted: set[str] = set()  # uids of the stuck jobs deleted (a listing may show them a while yet)

    def _record(self, drained: bool) -> tuple[dict[str, dict[str, Any]], bool]:
        """The suspension marks and whether the study is held (drained by a user or by the
        etcd breaker), from one read of the study record.

        `drain` sets the flag before it writes marks and deletes jobs, so a loop that sees
        a mark (or a job gone) must judge it by a flag at least as fresh: the loop's own
        copy may be older. Without a record, the loop's flag stands."""
        try:
            cm = self.cluster.get(CONFIGMAP, record_name(self.study.name), self.study.namespace)
        except NotFound:
            return {}, drained
        return suspended_of(cm), parse_record(cm).held

    def _state(self, job: dict[str, Any], state: TrialState) -> TrialState | None:
        """The loop classified from the job alone; an attempt that ended FAILED may still
        have been evicted (a policy that aborts on PodEvicted, a batch/v1 Job without the
        bundled pod failure policy): decided once per job, None while it cannot be yet."""
        if state is not TrialState.FAILED:
            return state
        uid = (job.get("metadata") or {}).get("uid", "")
        if uid not in self._verdicts:
            verdict = self._ended(job)
            if verdict is None:
                return None
            self._verdicts[uid] = verdict
        return self._verdicts[uid]

    def _ended(self, job: dict[str, Any]) -> TrialState | None:
        """PREEMPTED or FAILED: what the pod mirror saw, else the PodGroup's Evict events;
        None when undecided (the pods may still tell, or the events could not be read)."""
        uid = (job.get("metadata") or {}).get("uid", "")
        if self.signals is not None:
            if classify_attempt(job, pods=self.signals.disruptions.of(uid)) is TrialState.PREEMPTED:
                return TrialState.PREEMPTED
            since = self.signals.pods_complete_since()
            created = timestamp((job.get("metadata") or {}).get("creationTimestamp"))
            if since is not None and created is not None and since + CLOCK_SKEW < created:
                # every pod of the job was watched, and none was seen disrupted
                return TrialState.FAILED if self.clock() - (ended_at(job) or 0.0) >= SETTLE else None
        try:
            events, _ = self.cluster.list(
                EVENT,
                self.study.namespace,
                field_selector=f"involvedObject.name={podgroup_name(job)},reason=Evict",
            )
        except ClusterError:
            return None
        return classify_attempt(job, events=events)

    def _ends_stuck(self, job: dict[str, Any], state: TrialState) -> bool:
        """A running batch/v1 attempt whose disrupted pod outlived its deletion time (see
        STUCK_AFTER) is preempted; the loop ends it once its next attempt exists."""
        if not (state.in_flight and is_batch(job) and self.signals is not None):
            return False
        uid = (job.get("metadata") or {}).get("uid", "")
        stuck = self.signals.disruptions.stuck(uid, self.clock(), STUCK_AFTER)
        if stuck:
            pod = stuck[0]["metadata"]["name"]
            self._stuck[uid] = f"pod {pod} was preempted but had not terminated {STUCK_AFTER:g}s after its deletion"
        return bool(stuck)

    def step(
        self,
        states: dict[str, TrialState],
        latest: dict[str, dict[str, Any]],
        drained: bool,
        record: dict[str, Any] | None = None,
        room: int | None = None,
    ) -> dict[str, TrialState]:
        """Update the loop's trial states (preempted, suspended, retrying, given up) and act on them.

        A trial left RETRYING, PREEMPTED or SUSPENDED is not finished: the loop goes on
        until its next attempt exists (a drained study holds it, a failed create is tried
        again next cycle). Whether the study is drained is read from its record with the
        marks (`record`: the loop's latest read of it, else read here); `drained` (the
        loop's copy) counts only when there is no record. `room`: how many next attempts may
        go now under the cap (None: any); the others stay due, holding their place, and go
        in a later cycle, as trials end.
        """
        marks, drained = self._record(drained) if record is None else (suspended_of(record), parse_record(record).held)
        self._end_stuck()
        views = self._views(states, latest, marks)
        read: dict[str, dict[str, Any]] = {}

        def starts() -> dict[str, Any]:
            """When each job's first pod started, read once and only when first needed."""
            if "pods" not in read:
                namespace, name = self.study.namespace, self.study.name
                read["pods"] = pod_starts(self.cluster, namespace, name, self.kind, self.signals) or {}
            return read["pods"]

        given_up: set[str] = set()
        for action in next_actions(list(views.values()), self.limits, drained):
            name = action.trial
            if action.kind is Kind.GIVE_UP:
                self._give_up(action, latest.get(name))
                states[name] = TrialState.FAILED
                given_up.add(name)
            elif name in self.trials:  # else a trial of another version of the study
                if room is not None and room <= 0:
                    continue  # the cap is full: due next cycle, its place held (TrialState.owed)
                if self._resubmit(action, latest.get(name), marks.get(name), views, starts):
                    states[name] = TrialState.PENDING
                    room = None if room is None else room - 1
        self._park_stuck({n: job for n, job in latest.items() if n not in given_up}, starts)
        return states

    def _park_stuck(self, latest: dict[str, dict[str, Any]], starts: Callable[[], dict[str, Any]]) -> None:
        """End the stuck attempts whose next attempt did not go this cycle (the study held:
        drained, yielding to a higher-priority gang, or its cap full), marking their trials
        in the study record first.

        A stuck attempt's pods keep their GPUs until its Job goes, and a held study makes no
        next attempt: waiting for one would keep those GPUs from the very gang the study
        yields to, which waits for them. The mark (as `drain` writes one, its state
        PARKED) holds the trial's place and its totals, this preemption included; the loop
        makes the next attempt from it once the study has room. The marks go in before the
        jobs go, as `drain`'s do: a loop that sees a job gone sees its mark."""
        parked = {
            name: job
            for name, job in latest.items()
            if (meta := job.get("metadata") or {}).get("uid", "") in self._stuck
            and not (meta.get("annotations") or {}).get(labels.GIVEN_UP)  # its job says it is given up: kept
            and not (meta.get("labels") or {}).get(labels.IN_BLOCK)  # a block's trial: the block holds its place
        }
        if not parked:
            return
        try:
            cm = self.cluster.get(CONFIGMAP, record_name(self.study.name), self.study.namespace)
        except NotFound:
            return  # no record to hold their place: they wait for their next attempts
        marks = suspended_of(cm)
        for name, job in parked.items():
            started = starts().get(job["metadata"]["uid"])
            carry = carry_forward(job, self.clock(), TrialState.PREEMPTED, started=started)
            marks[name] = mark_of(job, carry, state=PARKED)
        self.cluster.patch(CONFIGMAP, record_name(self.study.name), suspended_patch(marks), self.study.namespace)
        for job in parked.values():
            uid = job["metadata"]["uid"]
            why = f"{self._stuck.pop(uid)}; its trial's next attempt waits for room"
            self._ending[uid] = (job["metadata"]["name"], why)
        self._end_stuck()

    def _views(
        self, states: dict[str, TrialState], latest: dict[str, dict[str, Any]], marks: dict[str, dict[str, Any]]
    ) -> dict[str, TrialView]:
        """Each trial's view for `next_actions`, from its latest job and its suspension mark;
        updates `states` to the state the loop shows (RETRYING while a preemption is not
        decided yet)."""
        views = {}
        for name, state in states.items():
            job = latest.get(name)
            mark = marks.get(name)
            if job is None and mark is None:
                continue
            if job is not None and mark is not None and mark.get("state") == PARKED:
                self._end_parked(job, mark)
            if job is not None and mark is None and state not in (TrialState.PREEMPTED, TrialState.FAILED):
                if not self._ends_stuck(job, state):
                    continue
                state = TrialState.PREEMPTED
            real = self._state(job, state) if job is not None else state
            if real is None:  # not decided yet whether it was preempted: holds its next attempt
                states[name] = TrialState.RETRYING
                continue
            view = view_of(name, job, mark["attempt"] if mark else None, real, mark=mark)
            views[name] = view
            states[name] = effective_state(view, self.limits)
        return views

    def _give_up(self, action: Action, job: dict[str, Any] | None) -> None:
        """Mark the trial's latest job given up, with why."""
        assert job is not None  # a trial is given up for what its latest job went through
        name, key = job["metadata"]["name"], labels.GIVEN_UP
        block = (job["metadata"].get("labels") or {}).get(labels.IN_BLOCK)
        if block:  # a trial's view read from its block (blocks.py): said on the block, by index
            name, key = block, f"{labels.GIVEN_UP}.{name.rsplit('-', 1)[-1]}"
        self.cluster.patch(self.kind, name, {"metadata": {"annotations": {key: action.reason}}}, self.study.namespace)
        self.reporter.event(f"trial {action.trial}: given up, {action.reason}")

    def _resubmit(
        self,
        action: Action,
        job: dict[str, Any] | None,
        mark: dict[str, Any] | None,
        views: dict[str, TrialView],
        starts: Callable[[], dict[str, Any]],
    ) -> bool:
        """Create the trial's next attempt, carrying its GPU time forward from its latest job
        (or from its suspension mark when that is newer); whether it was created."""
        name = action.trial
        if job is not None and (mark is None or mark["attempt"] < int(job["metadata"]["labels"][labels.ATTEMPT])):
            carry = carry_forward(
                job, self.clock(), views[name].state, started=starts().get(job["metadata"].get("uid"))
            )
        else:
            carry = carried_of_mark(mark or {})
        try:
            submit_attempt(self.cluster, self.renderer, self.trials[name], action.attempt, carry, self.study.namespace)
        except (ClusterError, SpecConflict) as exc:
            if transient(exc) or isinstance(exc, Unreachable):
                raise  # the API server is out, not this trial: the loop waits for it
            self.reporter.event(f"trial {name}: cannot resubmit attempt {action.attempt}: {exc}")
            return False
        saved = self.study.checkpoint.location
        how = "resumes from its checkpoint" if saved else "starts over (the study has no checkpoint.location)"
        self.reporter.event(f"trial {name}: attempt {action.attempt} {how}, {action.reason}")
        uid = (job or {}).get("metadata", {}).get("uid")
        if uid in self._stuck and job is not None:
            self._ending[uid] = (job["metadata"]["name"], self._stuck.pop(uid))
            self._end_stuck()
        return True

    def _end_parked(self, job: dict[str, Any], mark: dict[str, Any]) -> None:
        """A job a PARKED mark covers is still there (the loop that marked it stopped before
        it deleted the job): deleted next, as it would have been."""
        uid = job["metadata"].get("uid", "")
        if attempt_of(job) <= mark["attempt"] and uid not in self._ending and uid not in self._deleted:
            why = "its trial was marked preempted (its pod never terminated) and its next attempt waits for room"
            self._ending[uid] = (job["metadata"]["name"], why)

    def _end_stuck(self) -> None:
        """Delete the stuck attempts whose next attempt exists, so their pods go and free their
        GPUs (what the job controller does once the pod fails); a failed delete is retried."""
        for uid, (name, why) in list(self._ending.items()):
            try:
                self.cluster.delete(self.kind, name, self.study.namespace)
                self.cluster.delete(PODGROUP, name, self.study.namespace)
            except ClusterError as exc:
                self.reporter.event(f"job {name}: cannot delete it yet ({exc}); {why}")
                continue
            del self._ending[uid]
            self._deleted.add(uid)
            self.reporter.event(f"job {name} deleted: {why}")
