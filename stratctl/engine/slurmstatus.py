"""`stratctl status STUDY_FILE` of a Slurm study: its trials as Slurm and their output
directories show them, in the same rows as a Kubernetes study's (engine/summary.py), so
every output format of `status` works unchanged."""

from __future__ import annotations

import json
import time
from pathlib import Path

from stratctl.engine.slurmloop import trial_state
from stratctl.engine.status import Snapshot
from stratctl.engine.summary import StudyRow, TrialRow
from stratctl.slurm.commands import Slurm
from stratctl.slurm.state import latest, read_marks
from stratctl.study.space import attempt_name, expand
from stratctl.study.spec import Study
from stratctl.trialstate import TrialState


def _result(directory: Path) -> dict | None:
    try:
        value = json.loads((directory / "result.json").read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def snapshot(study: Study, slurm: Slurm | None = None, workdir: Path | None = None, now: float | None = None) -> Snapshot:
    now = time.time() if now is None else now
    output = (workdir or Path(".")) / study.slurm.output_dir / study.name
    seen = latest((slurm or Slurm()).jobs(), study.name, read_marks(output))
    rows = []
    for trial in expand(study):
        attempt = seen.get(trial.name)
        state = trial_state(attempt, study.retries.max_failures) if attempt else TrialState.WAITING
        number = attempt.attempt if attempt else 0
        rows.append(TrialRow(
            study=study.name, trial=trial.name, state=state.value, attempt=number, params=dict(trial.params),
            job=attempt_name(trial, number), phase=attempt.slurm_state if attempt else "",
            pending=attempt.reason if attempt and state is TrialState.PENDING else "",
            result=_result(output / trial.name), preemptions=attempt.restarts if attempt else 0,
            failures=number + (state in (TrialState.FAILED, TrialState.RETRYING)) if attempt else 0,
            index=trial.index, exit_code=attempt.exit_code if attempt and attempt.exit_code else None,
            queue=study.slurm.partition or ""))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    studied = StudyRow(
        study=study.name, critical=study.critical, drained=counts.get(TrialState.SUSPENDED.value, 0) > 0,
        trials=len(rows), states=counts,
        in_flight=counts.get(TrialState.PENDING.value, 0) + counts.get(TrialState.RUNNING.value, 0),
        target=None, decision="", attempts=sum(r.attempt + 1 for r in rows if r.state != TrialState.WAITING.value),
        preemptions=sum(r.preemptions for r in rows), gpu_hours=0.0, gpu_hours_lost=0.0,
        failures=sum(r.failures for r in rows))
    return Snapshot(f"slurm:{study.slurm.partition or 'default'}", now, [studied], rows)
