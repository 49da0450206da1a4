"""`stratctl delete` of a study on a batch scheduler (Slurm, YARN): its attempts still
pending, running or held are ended (Slurm: `scancel`; YARN: the application killed), its
study directory removed (its logs, attempt marks, results and the study as submitted;
kept with `--keep-record`), and the name forgotten (backends/batch/catalog.py).

As on Kubernetes, it refuses while a submit loop follows the study (its heartbeat,
backends/batch/following.py) unless `--force`, and asks for a confirmation on a terminal unless
`--yes`. A study's driver job (Slurm, `submit --in-cluster`) is cancelled first, and its
loop is no reason to refuse. Slurm and YARN list ended jobs for a while after (MinJobAge,
max-completed-applications): a submit of the same study meanwhile sees the cancelled ones.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratctl.backends.batch import catalog
from stratctl.backends.batch.following import follower
from stratctl.backends.batch.scheduler import Scheduler
from stratctl.core.spec import Study
from stratctl.errors import Invalid, StratctlError, UsageError


class Followed(StratctlError):
    """A running submit loop follows the study: deleting it under the loop would race it."""

    exit_code = UsageError.exit_code


@dataclass
class Removal:
    study: str
    backend: str
    directory: str
    ended: list[str] = field(default_factory=list)  # the scheduler's ids of the attempts ended
    kept_record: bool = False
    drivers: list[int] = field(default_factory=list)  # its driver jobs cancelled (`submit --in-cluster`)

    def as_dict(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "backend": self.backend,
            "ended": list(self.ended),
            "directory": self.directory,
            "kept_record": self.kept_record,
            "drivers": list(self.drivers),
        }


def check(
    study: Study,
    loop: dict[str, Any] | None,
    now: float,
    force: bool,
    yes: bool,
    interactive: bool,
    driver: int | None = None,
) -> bool:
    """Whether to ask for a confirmation before deleting (pure); raises when it may not go on.
    `loop`: the heartbeat of the submit loop following the study, if one does; `driver`:
    its driver job in the cluster, if one runs (`submit --in-cluster`): delete stops it, so
    its loop is no reason to refuse."""
    if loop is not None and not force and driver is None:
        where = f" on {loop.get('host')} (pid {loop.get('pid')})" if loop.get("host") else ""
        raise Followed(
            f"a submit loop{where} is following study {study.name} (heartbeat "
            f"{max(0, round(now - float(loop['at'])))} s ago): stop it first, or pass --force"
        )
    if yes:
        return False
    if not interactive:
        raise UsageError(f"deleting study {study.name} needs a confirmation: pass --yes")
    return True


def following(scheduler: Scheduler, now: float) -> dict[str, Any] | None:
    return follower(Path(scheduler.output), now)  # type: ignore[attr-defined]


def delete(study: Study, scheduler: Scheduler, keep_record: bool = False) -> Removal:
    directory = Path(scheduler.output)  # type: ignore[attr-defined]
    removal = Removal(study.name, study.backend, str(directory), kept_record=keep_record)
    scheduler.set_drained(True)  # a loop that starts meanwhile admits nothing
    removal.drivers = scheduler.stop_driver()  # its driver in the cluster first: it submits nothing more
    for _, attempt in sorted(scheduler.attempts(marks=False).items()):
        if attempt.job and not attempt.state.finished:
            try:
                scheduler.cancel(attempt)  # type: ignore[attr-defined]
            except Invalid:
                continue  # it ended between the list and the command
            removal.ended.append(attempt.job)
    entry = catalog.Entry(study.name, study.backend, str(directory))
    if not keep_record:
        shutil.rmtree(directory, ignore_errors=True)
        catalog.forget(entry)
    else:
        scheduler.set_drained(False)
    return removal
