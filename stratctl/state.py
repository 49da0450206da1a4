"""What state a trial is in, read from its workload object in the cluster alone.

Pure functions over the dicts the API returns, so they are tested on recorded objects.
A Volcano Job reports `status.state.phase`; a plain batch Job reports conditions.
"""

from __future__ import annotations

from enum import Enum

from stratctl import labels


class TrialState(str, Enum):
    WAITING = "waiting"  # not in the cluster yet
    PENDING = "pending"  # created, gang not yet scheduled
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (TrialState.SUCCEEDED, TrialState.FAILED)

    @property
    def in_flight(self) -> bool:
        return self in (TrialState.PENDING, TrialState.RUNNING)


VOLCANO_PHASES = {
    "Pending": TrialState.PENDING,
    "Inqueue": TrialState.PENDING,
    "Running": TrialState.RUNNING,
    "Restarting": TrialState.RUNNING,
    "Completing": TrialState.RUNNING,
    "Aborting": TrialState.RUNNING,
    "Terminating": TrialState.RUNNING,
    "Completed": TrialState.SUCCEEDED,
    "Failed": TrialState.FAILED,
    "Aborted": TrialState.FAILED,
    "Terminated": TrialState.FAILED,
}


def volcano_phase(job: dict) -> str:
    return ((job.get("status") or {}).get("state") or {}).get("phase") or "Pending"


def classify(job: dict) -> TrialState:
    """The state of one trial attempt from its Volcano Job or batch/v1 Job."""
    if job.get("apiVersion", "").startswith("batch.volcano.sh/"):
        return VOLCANO_PHASES.get(volcano_phase(job), TrialState.PENDING)
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return TrialState.SUCCEEDED
        if condition.get("type") == "Failed":
            return TrialState.FAILED
    if status.get("active") or status.get("ready"):
        return TrialState.RUNNING
    return TrialState.PENDING


def trial_of(job: dict) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get(labels.TRIAL)


def attempt_of(job: dict) -> int:
    value = ((job.get("metadata") or {}).get("labels") or {}).get(labels.ATTEMPT, "0")
    return int(value) if str(value).isdigit() else 0


def spec_hash_of(obj: dict) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(labels.SPEC_HASH)


def latest_attempts(jobs: list[dict]) -> dict[str, dict]:
    """Trial base name → the job of its highest attempt (older attempts are history)."""
    latest: dict[str, dict] = {}
    for job in jobs:
        trial = trial_of(job)
        if trial is None:
            continue
        if trial not in latest or attempt_of(job) > attempt_of(latest[trial]):
            latest[trial] = job
    return latest
