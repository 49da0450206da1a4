"""`stratctl drain` and `resume` of a study on a batch scheduler (backends/batch/scheduler.py).

Drain holds, it does not cancel: a pending attempt is held, a running one is stopped and
kept held (on Slurm: `scontrol hold`, `scontrol requeuehold`, its restart count up);
`resume` releases them, and each resumes from its checkpoint. The scheduler itself keeps
what was held, so no marks are needed to find them again, and a held job keeps its place
and priority age in the queue, which a cancelled and resubmitted one would lose. The
study's drained flag tells a running submit loop to admit nothing new until `resume`
clears it. A critical study is never drained.
"""

from __future__ import annotations

from stratctl.backends.batch.scheduler import Scheduler
from stratctl.core.spec import Study
from stratctl.errors import Invalid
from stratctl.run.rows import Outcome
from stratctl.trialstate import TrialState


def drain(study: Study, scheduler: Scheduler) -> Outcome:
    if study.critical:
        return Outcome(study.name, critical=True, skipped="critical")
    scheduler.set_drained(True)
    outcome = Outcome(study.name)
    # Pending attempts are held first: stopping a running one frees its GPUs, and the
    # scheduler would start a pending one there before its hold came. One that started
    # meanwhile anyway is stopped by the second pass.
    for _ in range(2):
        seen = scheduler.attempts(marks=False)
        for state, act in ((TrialState.PENDING, scheduler.hold), (TrialState.RUNNING, scheduler.stop)):
            for trial, attempt in sorted(seen.items()):
                if attempt.state is not state:
                    continue
                try:
                    act(attempt)
                except Invalid:  # it started or ended between the list and the command: the next pass sees it
                    continue
                if trial not in outcome.suspended:
                    outcome.suspended.append(trial)
    outcome.suspended.sort()
    return outcome


def resume(study: Study, scheduler: Scheduler) -> Outcome:
    scheduler.set_drained(False)
    outcome = Outcome(study.name)
    for trial, attempt in sorted(scheduler.attempts(marks=False).items()):
        if attempt.state is TrialState.SUSPENDED:
            scheduler.release(attempt)
            outcome.resumed.append(trial)
    return outcome
