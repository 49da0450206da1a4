"""What recovery reads from a trial's Kubernetes jobs: its view (`view_of`, what the
shared recovery rules of run/recovery.py decide on), the totals of its earlier attempts
carried as annotations on its latest job (`Carried`), and the GPU time an attempt used
and lost (`usage`: from the Volcano Job alone, or from a batch/v1 Job and the time its
first pod started).

A trial is a sequence of attempts (Volcano Jobs or batch/v1 Jobs named by
`space.attempt_name`); `requeue.py` carries out the rules' decisions against the cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.objects.gpus import job_gpus
from stratctl.backends.kubernetes.objects.state import (
    attempt_of,
    classify,
    ended_at,
    is_batch,
    preemptions,
    timestamp,
    transition,
    volcano_phase,
)
from stratctl.run.recovery import TrialView
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.core.space import Trial


@dataclass(frozen=True)
class Carried:
    """Totals of a trial's earlier attempts, carried as annotations on its latest job."""

    preemptions: int = 0
    gpu_seconds: float = 0.0
    gpu_seconds_lost: float = 0.0
    suspensions: int = 0
    failures: int = 0

    def annotations(self) -> dict[str, str]:
        return {
            labels.PREEMPTIONS: str(self.preemptions),
            labels.FAILURES: str(self.failures),
            labels.GPU_SECONDS: f"{self.gpu_seconds:.0f}",
            labels.GPU_SECONDS_LOST: f"{self.gpu_seconds_lost:.0f}",
            labels.SUSPENSIONS: str(self.suspensions),
        }


def carried(job: dict[str, Any] | None) -> Carried:
    notes = ((job or {}).get("metadata") or {}).get("annotations") or {}

    def number(key: str) -> float:
        try:
            return float(notes.get(key) or 0)
        except ValueError:
            return 0.0

    return Carried(
        int(number(labels.PREEMPTIONS)),
        number(labels.GPU_SECONDS),
        number(labels.GPU_SECONDS_LOST),
        int(number(labels.SUSPENSIONS)),
        int(number(labels.FAILURES)),
    )


# ------------------------------------------------------------------ GPU accounting


@dataclass(frozen=True)
class Usage:
    gpu_seconds: float = 0.0
    gpu_seconds_lost: float = 0.0


ENDED = ("Completed", "Failed", "Aborted", "Terminated")


def usage(job: dict[str, Any], now: float, state: TrialState | None = None, started: float | None = None) -> Usage:
    """GPU time of this attempt's current (or last) run, and how much of it preemption lost.

    A run lasts from the job's last transition to Running until it ended (or now). A run
    ended by preemption is counted lost as a whole: an upper bound, since what survives
    in the last checkpoint is not lost; stratctl cannot see the trial's storage.
    Volcano keeps only the latest transition of each phase, so runs restarted in place
    before the current one are counted as preemptions but not as time.

    A batch/v1 Job records no such transition: `started` is when its first pod started
    (`state.run_starts`), None when no pod of it is known to have started (none has, or
    they are gone: then no time is counted). `job` may be a slim job carrying `gpus`.
    """
    state = state or classify(job)
    gpus = job["gpus"] if "gpus" in job else job_gpus(job)
    if is_batch(job):
        return _batch_usage(job, now, state, started, gpus)
    started = timestamp(transition(job, "Running"))
    if started is None:
        return Usage()
    restarting = timestamp(transition(job, "Restarting"))
    if restarting is not None and restarting >= started:
        # the latest run ended in a restart (an eviction) and none has started since
        seconds = (restarting - started) * gpus
        return Usage(seconds, seconds)
    if state.finished or state is TrialState.PREEMPTED or volcano_phase(job) in ENDED:
        ended = timestamp(((job.get("status") or {}).get("state") or {}).get("lastTransitionTime")) or now
    else:
        ended = now
    seconds = max(0.0, ended - started) * gpus
    return Usage(seconds, seconds if state is TrialState.PREEMPTED else 0.0)


def _batch_usage(job: dict[str, Any], now: float, state: TrialState, started: float | None, gpus: int) -> Usage:
    if started is None:
        return Usage()
    ended = ended_at(job) or now
    seconds = max(0.0, ended - started) * gpus
    return Usage(seconds, seconds if state is TrialState.PREEMPTED else 0.0)


# ------------------------------------------------------------------ the view recovery decides on


def trial_of_job(job: dict[str, Any]) -> Trial | None:
    """The trial a job is an attempt of, as its labels and annotations say (None when unreadable)."""
    from stratctl.core.space import Trial  # the study model only when a trial is read: `status` loads none

    meta = job.get("metadata") or {}
    name = (meta.get("labels") or {}).get(labels.TRIAL)
    notes = meta.get("annotations") or {}
    try:
        params = json.loads(notes.get(labels.PARAMS) or "")
        index = int(notes.get(labels.TRIAL_INDEX) or "")
    except ValueError:
        return None
    if not name or not isinstance(params, dict):
        return None
    return Trial(index, name, MappingProxyType(params), name.rsplit("-", 1)[-1])


# A mark's "state" when the submit loop, not `drain`, ended the attempt: a preempted
# attempt whose pods outlived their deletion, ended while its study was held (requeue.py).
PARKED = TrialState.PREEMPTED.value


def view_of(
    trial: str,
    job: dict[str, Any] | None,
    suspended_attempt: int | None,
    state: TrialState | None = None,
    mark: dict[str, Any] | None = None,
) -> TrialView:
    """A trial's view from its latest job (None: none in the cluster) and the record's
    suspension mark (the attempt `drain` deleted, if any). A mark that says the attempt
    was preempted (`PARKED`, with the totals it carries) makes the view a preemption."""
    if mark is not None and mark.get("state") == PARKED and (job is None or mark["attempt"] >= attempt_of(job)):
        return TrialView(
            trial,
            mark["attempt"],
            TrialState.PREEMPTED,
            int(mark.get("preemptions") or 0),
            failures=int(mark.get("failures") or 0),
        )
    if job is None:
        if suspended_attempt is None:
            return TrialView(trial, -1, TrialState.WAITING)
        return TrialView(trial, suspended_attempt, TrialState.SUSPENDED)
    attempt = attempt_of(job)
    if suspended_attempt is not None and suspended_attempt >= attempt:
        # drain deleted this attempt; the job may still be terminating
        state = TrialState.SUSPENDED
    state = state or classify(job)
    notes = (job.get("metadata") or {}).get("annotations") or {}
    before = carried(job)
    return TrialView(
        trial,
        attempt,
        state,
        before.preemptions + preemptions(job, state),
        given_up=bool(notes.get(labels.GIVEN_UP)),
        failures=before.failures + (1 if state is TrialState.FAILED else 0),
    )
