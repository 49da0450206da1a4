"""`stratctl drain` and `resume` of a Slurm study (a study FILE of backend slurm).

Drain holds, it does not cancel: a pending job of the study is held (`scontrol hold`), a
running one is requeued and held (`scontrol requeuehold`: Slurm stops it, puts it back in
the queue held, its restart count up); `resume` releases them, and each resumes from its
checkpoint (its script sees SLURM_RESTART_COUNT > 0). Slurm itself keeps what was held,
so no marks are needed to find them again, and a held job keeps its place and priority
age in the queue, which a cancelled and resubmitted one would lose. The study's `drained`
file (in its output directory) tells a running submit loop to admit nothing new until
`resume` removes it. A critical study is never drained.
"""

from __future__ import annotations

from pathlib import Path

from stratctl.engine.drain import Outcome
from stratctl.errors import Invalid
from stratctl.slurm.commands import Slurm
from stratctl.slurm.state import latest
from stratctl.study.spec import Study
from stratctl.trialstate import TrialState

MARK = "drained"


def output_of(study: Study, workdir: Path | None = None) -> Path:
    return (workdir or Path(".")) / study.slurm.output_dir / study.name


def drained(study: Study, workdir: Path | None = None) -> bool:
    return (output_of(study, workdir) / MARK).exists()


def drain(study: Study, slurm: Slurm | None = None, workdir: Path | None = None) -> Outcome:
    if study.critical:
        return Outcome(study.name, critical=True, skipped="critical")
    slurm = slurm or Slurm()
    out = output_of(study, workdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARK).write_text("drained by stratctl drain; `stratctl resume` removes this file\n")
    outcome = Outcome(study.name)
    # Pending jobs are held first: requeueing a running one frees its GPUs, and the
    # scheduler would start a pending job there before its hold came. One that started
    # meanwhile anyway is requeued held by the second pass.
    for _ in range(2):
        seen = latest(slurm.jobs(), study.name, {})
        for state in (TrialState.PENDING, TrialState.RUNNING):
            for trial, attempt in sorted(seen.items()):
                if attempt.state is not state:
                    continue
                try:
                    if state is TrialState.PENDING:
                        slurm.hold(attempt.job_id)
                    else:
                        slurm.requeue(attempt.job_id, hold=True)
                except Invalid:  # it started or ended between the list and the command: the next pass sees it
                    continue
                if trial not in outcome.suspended:
                    outcome.suspended.append(trial)
    outcome.suspended.sort()
    return outcome


def resume(study: Study, slurm: Slurm | None = None, workdir: Path | None = None) -> Outcome:
    slurm = slurm or Slurm()
    (output_of(study, workdir) / MARK).unlink(missing_ok=True)
    outcome = Outcome(study.name)
    for trial, attempt in sorted(latest(slurm.jobs(), study.name, {}).items()):
        if attempt.state is TrialState.SUSPENDED:
            slurm.release(attempt.job_id)
            outcome.resumed.append(trial)
    return outcome
