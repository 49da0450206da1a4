"""One attempt of one trial as a batch scheduler shows it, the same on every backend that
runs an attempt as one scheduler job (Slurm, YARN): each backend reads it from its own
objects and the shared attempt loop (engine/attemptloop.py) decides on it alone."""

from __future__ import annotations

from dataclasses import dataclass

from stratctl.trialstate import TrialState


@dataclass(frozen=True)
class Attempt:
    trial: str
    attempt: int  # 0 for the first; each failure or preemption that needs a new job adds one
    state: TrialState
    job: str = ""  # the scheduler's id of it (a Slurm job id, a YARN application id)
    native_state: str = ""  # the scheduler's own word for its state (squeue's job_state)
    reason: str = ""  # why a pending attempt waits, in the scheduler's words
    restarts: int = 0  # times the scheduler itself requeued it (preemptions): never failures
    spec_hash: str = ""
    exit_code: int | None = None
    waits_for_capacity: bool = False  # pending for GPUs (resources, priority), not for a limit or a hold
    waits_for_limits: bool = False  # pending for a quota or submit limit the scheduler enforces
    started: float | None = None  # wall time its current run started (None before it runs)
    ended: float | None = None  # wall time it ended (None while pending or running)
    earlier_seconds: float = 0.0  # run time of the trial's earlier attempts (each failed or was lost)
    # of the earlier attempts, how many failed (None: all of them, as where a preemption
    # requeues the same job and only a failure makes a new attempt: Slurm) and how many
    # were preempted (where a preemption ends the attempt and the next one resumes: YARN)
    failures_before: int | None = None
    preempted_before: int = 0

    @property
    def failures(self) -> int:
        """Failed attempts of the trial before this one."""
        return self.attempt if self.failures_before is None else self.failures_before

    @property
    def preemptions(self) -> int:
        """Times the trial was preempted, this attempt included."""
        return self.restarts + self.preempted_before + (self.state is TrialState.PREEMPTED)

    def run_seconds(self, now: float) -> float:
        """How long this attempt has run (its current run, to `now` while it runs)."""
        if self.started is None:
            return 0.0
        return max(0.0, (self.ended if self.ended is not None else now) - self.started)
