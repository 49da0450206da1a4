"""The rows every backend's `status`, `wait`, `drain` and `resume` fill and every view
draws: a trial, a study, a namespace's snapshot, what drain or resume did (pure data)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from stratctl.trialstate import TrialState

ORDER = [
    s.value
    for s in (
        TrialState.WAITING,
        TrialState.PENDING,
        TrialState.RUNNING,
        TrialState.PREEMPTED,
        TrialState.RETRYING,
        TrialState.SUSPENDED,
        TrialState.SUCCEEDED,
        TrialState.PRUNED,
        TrialState.FAILED,
    )
]


@dataclass
class TrialRow:
    study: str
    trial: str
    state: str
    attempt: int
    params: dict[str, Any] = field(default_factory=dict)
    created: float | None = None  # of the latest attempt
    job: str = ""
    phase: str = ""  # of the latest attempt: Volcano's phase, or Pending/Running/Complete/Failed of a batch/v1 Job
    pending: str = ""  # why the gang is not running
    result: dict[str, Any] | None = None
    preemptions: int = 0
    failures: int = 0  # failed attempts, retried or not
    gpu_seconds: float = 0.0
    gpu_seconds_lost: float = 0.0
    checkpoint: str = ""
    podgroup: str = ""  # of the latest attempt (Volcano names it <job>-<uid>)
    requeued: str = ""  # why the latest attempt replaced the one before (e.g. lost by the job controller)
    index: int | None = None  # the trial's place in the study's expansion
    started: float | None = None  # when the latest attempt's gang started running
    finished: float | None = None  # when the latest attempt ended
    exit_code: int | None = None  # of a container of the latest attempt that exited non-zero
    reason: str = ""  # why a failed trial failed: the container's reason, and why it was given up
    queue: str = (
        ""  # the queue of the latest attempt ("" when its job does not say: a batch/v1 Job of a one-queue study)
    )
    queued: bool = False  # pending in its block (merged submissions) for its turn: not in flight


@dataclass
class StudyRow:
    study: str
    critical: bool
    drained: bool
    trials: int
    states: dict[str, int]
    in_flight: int
    target: int | None
    decision: str
    attempts: int
    preemptions: int
    gpu_hours: float
    gpu_hours_lost: float
    as_of: float | None = None  # when the submit loop computed it (None: just now, by status)
    failures: int = 0
    api: str = ""  # the submit loop's note while the API quota pushes back (fresh, else "")
    started: float | None = None  # the first trial's creation
    finished: float | None = None  # the last trial's end, once every trial has ended
    breaker: str = ""  # why the submit loop's etcd breaker drained the study ("" when it does not)
    # what pruning saved: each pruned trial's GPU time short of the mean of the trials that ran to the end
    gpu_hours_saved: float = 0.0
    driver: str = ""  # who drives the study now (its live driver mark: "pod X on N", "host pid P"), read by status

    @property
    def done(self) -> bool:
        """Every trial ended (succeeded, pruned or failed, given up): nothing more will change."""
        return ended_count(self.states) >= self.trials > 0


def ended_count(states: dict[str, int]) -> int:
    return sum(states.get(s.value, 0) for s in (TrialState.SUCCEEDED, TrialState.PRUNED, TrialState.FAILED))


@dataclass
class Snapshot:
    namespace: str
    taken_at: float
    studies: list[StudyRow]
    trials: list[TrialRow]
    total_trials: int | None = None  # rows the studies have when `trials` holds only the first ones

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "taken_at": self.taken_at,
            "studies": [asdict(s) for s in self.studies],
            "trials": [asdict(t) for t in self.trials],
        }


@dataclass
class Outcome:
    """What drain or resume did to one study."""

    study: str
    critical: bool = False
    skipped: str = ""  # why nothing was done
    suspended: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # still suspended: a submit loop will resume them
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
