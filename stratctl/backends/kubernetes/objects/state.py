"""What state a trial is in, read from its workload object in the cluster alone.

Pure functions over the dicts the API returns, so they are tested on recorded objects.
A Volcano Job reports `status.state.phase`; a plain batch Job reports conditions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from stratctl import labels
from stratctl.trialstate import TrialState

VOLCANO_PHASES = {
    "Pending": TrialState.PENDING,
    "Inqueue": TrialState.PENDING,
    "Running": TrialState.RUNNING,
    "Restarting": TrialState.RUNNING,
    "Completing": TrialState.RUNNING,
    "Aborting": TrialState.RUNNING,
    "Terminating": TrialState.RUNNING,
    "Completed": TrialState.SUCCEEDED,
    "Failed": TrialState.FAILED,  # or PREEMPTED: see ended_by_eviction
    "Aborted": TrialState.FAILED,
    "Terminated": TrialState.FAILED,
}


def volcano_phase(job: dict[str, Any]) -> str:
    return ((job.get("status") or {}).get("state") or {}).get("phase") or "Pending"


def is_batch(job: dict[str, Any]) -> bool:
    """A batch/v1 Job (workload: batch), not a Volcano Job. Items of a list of built-in
    kinds come without apiVersion; those of a custom resource's list carry theirs."""
    return not (job.get("apiVersion") or "").startswith("batch.volcano.sh/")


def classify(job: dict[str, Any]) -> TrialState:
    """The state of one trial attempt from its Volcano Job or batch/v1 Job."""
    if not is_batch(job):
        state = VOLCANO_PHASES.get(volcano_phase(job), TrialState.PENDING)
        if state is TrialState.FAILED and restarted_out(job):
            return TrialState.PREEMPTED
        return state
    status = job.get("status") or {}
    if finished_condition(job, "Complete"):
        return TrialState.SUCCEEDED
    if finished_condition(job, "Failed"):
        return TrialState.PREEMPTED if failed_by_disruption(job) else TrialState.FAILED
    if "ready" in status:
        # `active` counts pods not yet on a node too: a gang Volcano has not placed is
        # active, so only ready pods tell that the trial runs (status.ready, k8s >= 1.24)
        return TrialState.RUNNING if status.get("ready") else TrialState.PENDING
    if status.get("active"):
        return TrialState.RUNNING
    return TrialState.PENDING


def finished_condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """A batch/v1 Job's `Complete` or `Failed` condition, when it is True."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            found: dict[str, Any] = condition
            return found
    return None


def failed_by_disruption(job: dict[str, Any]) -> bool:
    """A batch/v1 Job failed by its pod failure policy because a pod was disrupted.

    templates/batch-job.yaml.j2 fails the Job (action FailJob) when one of its pods has
    `DisruptionTarget=True`, the condition Volcano sets (reason PreemptionByScheduler)
    before it deletes a pod it preempts or reclaims. The job controller then writes
    reason `PodFailurePolicy` and a message naming the condition ("Pod NS/NAME has
    condition DisruptionTarget matching FailJob rule at index 0"), which stays on the
    Job: the evidence outlives the pods and the scheduler's events.
    """
    failed = finished_condition(job, "Failed") or {}
    return failed.get("reason") == "PodFailurePolicy" and "condition DisruptionTarget" in (failed.get("message") or "")


def ended_at(job: dict[str, Any]) -> float | None:
    """When the attempt ended (seconds since the epoch), None while it runs: a Volcano Job's
    last phase transition once ended, a batch/v1 Job's Complete or Failed condition."""
    if is_batch(job):
        end = finished_condition(job, "Complete") or finished_condition(job, "Failed")
        return timestamp(end.get("lastTransitionTime")) if end else None
    if volcano_phase(job) not in ("Completed", "Failed", "Aborted", "Terminated"):
        return None
    return timestamp(((job.get("status") or {}).get("state") or {}).get("lastTransitionTime"))


def phase_of(job: dict[str, Any]) -> str:
    """A one-word phase for people: Volcano's, or the state a batch/v1 Job's status tells."""
    if not is_batch(job):
        return volcano_phase(job)
    for kind in ("Complete", "Failed"):
        if finished_condition(job, kind):
            return kind
    return "Running" if classify(job) is TrialState.RUNNING else "Pending"


def trial_of(job: dict[str, Any]) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get(labels.TRIAL)


def attempt_of(job: dict[str, Any]) -> int:
    value = ((job.get("metadata") or {}).get("labels") or {}).get(labels.ATTEMPT, "0")
    return int(value) if str(value).isdigit() else 0


def spec_hash_of(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(labels.SPEC_HASH)


def latest_attempts(jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Trial base name → the job of its highest attempt (older attempts are history)."""
    latest: dict[str, dict[str, Any]] = {}
    for job in jobs:
        trial = trial_of(job)
        if trial is None:
            continue
        if trial not in latest or attempt_of(job) > attempt_of(latest[trial]):
            latest[trial] = job
    return latest


# ------------------------------------------------------------------ preemption evidence
#
# Volcano gives three signs that a trial's pods were taken away rather than failing:
# the job restarts (the default policy maps PodEvicted to RestartJob; once `maxRetry`
# restarts are used up the job goes Restarting -> Failed), the scheduler records an
# `Evict` event on the job's PodGroup, and it marks the pod `DisruptionTarget=True`
# (reason PreemptionByScheduler) just before deleting it.


def timestamp(text: str | None) -> float | None:
    """Seconds since the epoch from an RFC 3339 time as the API writes it."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def conditions(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's phase transitions, oldest first (Volcano keeps the latest of each phase)."""
    found = (job.get("status") or {}).get("conditions") or []
    return sorted(found, key=lambda c: timestamp(c.get("lastTransitionTime")) or 0.0)


def transition(job: dict[str, Any], phase: str) -> str | None:
    """When the job last entered `phase` (RFC 3339), if it did."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == phase:
            at: str | None = condition.get("lastTransitionTime")
            return at
    return None


def restarted_out(job: dict[str, Any]) -> bool:
    """Failed while restarting: Volcano's restarts (evictions) exhausted `maxRetry`."""
    if volcano_phase(job) != "Failed":
        return False
    phases = [c.get("status") for c in conditions(job)]
    return len(phases) >= 2 and phases[-1] == "Failed" and phases[-2] == "Restarting"


def restarts(job: dict[str, Any]) -> int:
    return int((job.get("status") or {}).get("retryCount") or 0)


def podgroup_name(job: dict[str, Any]) -> str:
    """The attempt's PodGroup: for a Volcano Job the one Volcano creates, `<job name>-<job
    uid>`; for a batch/v1 Job the one stratctl renders beside it, named like the job."""
    meta = job.get("metadata") or {}
    if is_batch(job):
        return meta.get("name") or ""
    return f"{meta.get('name')}-{meta.get('uid')}"


def disrupted_at(pod: dict[str, Any]) -> float | None:
    """When the pod was marked DisruptionTarget=True; None when it was not. A condition
    without a time counts as recent (infinity): it cannot have been survived earlier."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            when = timestamp(c.get("lastTransitionTime"))
            return float("inf") if when is None else when
    return None


def owner_uid(pod: dict[str, Any]) -> str | None:
    """The uid of the job that controls the pod (Volcano Job or batch/v1 Job); of a block's
    pod, its trial's view's (`<block uid>/<index>`, blocks.py)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            index = _block_index(pod)
            return ref.get("uid") if index is None else f"{ref.get('uid')}/{index}"
    return None


def job_of_pod(pod: dict[str, Any]) -> str | None:
    """The name of the job that made the pod, from the label its job controller sets; of a
    block's pod, its trial's view's (`<block>-<index>`, blocks.py)."""
    found = (pod.get("metadata") or {}).get("labels") or {}
    job = found.get("volcano.sh/job-name") or found.get("batch.kubernetes.io/job-name") or found.get("job-name")
    index = _block_index(pod)
    return job if index is None or job is None else f"{job}-{index}"


def _block_index(pod: dict[str, Any]) -> str | None:
    """A block's pod's completion index (its trial's place in the block); None for others."""
    meta = pod.get("metadata") or {}
    if labels.BLOCK not in (meta.get("labels") or {}):
        return None
    return (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")


def run_starts(pods: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Job uid → when the first of its pods started (`status.startTime`, set when the
    kubelet took the pod; pods that never reached a node have none).

    A batch/v1 Job records no time at which its pods ran (`status.startTime` is when the
    job controller first saw the Job, queueing included), and its PodGroup's `Scheduled`
    condition is rewritten with a new time whenever Volcano updates the group's status
    (as pods start and end), so neither tells when the gang started; the pods do. Volcano
    binds a gang's pods in one scheduling cycle, so the first start is the gang's.
    """
    starts: dict[str, float] = {}
    for pod in pods:
        uid, started = owner_uid(pod), timestamp((pod.get("status") or {}).get("startTime"))
        if uid and started is not None and started < starts.get(uid, float("inf")):
            starts[uid] = started
    return starts


def eviction_times(events: list[dict[str, Any]]) -> list[float]:
    """When `Evict` events happened (their last occurrence), for the objects they name."""
    out = []
    for event in events:
        if event.get("reason") == "Evict":
            when = (
                event.get("lastTimestamp")
                or event.get("eventTime")
                or (event.get("metadata") or {}).get("creationTimestamp")
            )
            at = timestamp(when)
            if at is not None:
                out.append(at)
    return out


def classify_attempt(
    job: dict[str, Any], pods: Sequence[dict[str, Any]] = (), events: Sequence[dict[str, Any]] = ()
) -> TrialState:
    """The state of one attempt from its job and what else the cluster says about it.

    `pods` are the attempt's pods (those still there, or the last state of deleted ones),
    `events` the events about its PodGroup or pods. An attempt that ended without
    completing is PREEMPTED when it was restarted out, or when a pod was disrupted or an
    eviction happened after the job last started running (an eviction before that was
    survived by an in-place restart, and the job then failed for its own reasons).
    """
    state = classify(job)
    if state is not TrialState.FAILED:
        return state
    started = timestamp(transition(job, "Running")) or 0.0
    if any(when is not None and when >= started for when in map(disrupted_at, pods)):
        return TrialState.PREEMPTED
    if any(when >= started for when in eviction_times(list(events))):
        return TrialState.PREEMPTED
    return state


def preemptions(job: dict[str, Any], state: TrialState | None = None) -> int:
    """How many times this attempt was preempted.

    Volcano's restart count (the default policies restart only on eviction), plus one
    when the attempt ended by an eviction that did not go through a restart (a job
    aborted on PodEvicted by a user policy).
    """
    state = state or classify(job)
    count = restarts(job)
    if state is TrialState.PREEMPTED and not restarted_out(job):
        count += 1
    return count


def trial_states(
    order: list[str], latest: dict[str, dict[str, Any]], finished: dict[str, str], unseen: set[str]
) -> dict[str, TrialState]:
    """Each trial's state: pruned when the record says the pruner stopped it; else its
    latest job's; else the record's, for a finished trial whose job was deleted (`cleanup:
    delete`); else pending, when created while the loop did not
    watch its jobs yet (`unseen`); else waiting."""
    states: dict[str, TrialState] = {}
    for name in order:
        if finished.get(name) == TrialState.PRUNED.value:  # stopped: what its job does after is the stop
            states[name] = TrialState.PRUNED
        elif name in latest:
            states[name] = classify(latest[name])
        elif name in finished:
            states[name] = TrialState(finished[name])
        else:
            states[name] = TrialState.PENDING if name in unseen else TrialState.WAITING
    return states
