"""The states of a trial, the same on every backend (Kubernetes, Slurm): each backend reads
them from its own objects (backends/kubernetes/objects/state.py, backends/slurm/state.py) and
everything above decides on them alone."""

from __future__ import annotations

from enum import StrEnum


class TrialState(StrEnum):
    WAITING = "waiting"  # not in the cluster yet
    PENDING = "pending"  # created, gang not yet scheduled
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # The attempt ended because its pods were evicted (preempted, reclaimed): not a
    # failure; the next attempt resumes it from its checkpoint (recovery.py).
    PREEMPTED = "preempted"
    # `stratctl drain` deleted the attempt; `stratctl resume` brings the trial back.
    SUSPENDED = "suspended"
    # The latest attempt failed and the trial has failures left (retries.max_failures):
    # its next attempt is due. Only recovery, which knows the limit, says so (recovery.py).
    RETRYING = "retrying"
    # A closed-loop search's pruner stopped the trial early (its intermediate values were
    # not going to win): not a failure; its job is deleted, its GPUs go to the next trial.
    PRUNED = "pruned"

    @property
    def finished(self) -> bool:
        return self in (TrialState.SUCCEEDED, TrialState.FAILED, TrialState.PRUNED)

    @property
    def in_flight(self) -> bool:
        return self in (TrialState.PENDING, TrialState.RUNNING)

    @property
    def owed(self) -> bool:
        """Ended with its next attempt due (failed with failures left, preempted): the trial
        comes back whatever the cap, so it holds its place under the cap until it does (else
        a new trial takes its place and the retry goes over the cap)."""
        return self in (TrialState.RETRYING, TrialState.PREEMPTED)
