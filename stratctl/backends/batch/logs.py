"""`stratctl logs` of a study on a batch scheduler (Slurm, YARN): what a trial's latest
attempt printed, from the log files its attempts leave in the study directory
(backends/batch/scheduler.py `study_directory`): on Slurm the job's `--output`, on YARN each
container's copy (templates/yarn-task.sh.j2). The scheduler names the files
(`log_files`); here the trial is found, its files read, and followed while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from stratctl.backends.batch.scheduler import Scheduler
from stratctl.backends.batch.search import study_trials
from stratctl.backends.batch.status import snapshot
from stratctl.core.space import Trial, attempt_name
from stratctl.core.spec import Study
from stratctl.errors import UsageError
from stratctl.run.ranking import sort_trials


def trial_of(study: Study, name: str) -> Trial:
    """The study's trial of this name (or index), or a one-line refusal saying how to list them."""
    for trial in study_trials(study):
        if name in (trial.name, str(trial.index)):
            return trial
    raise UsageError(
        f"study {study.name} has no trial {name} (`stratctl status {study.name} -o name` lists its trials)"
    )


def best_trial(study: Study, scheduler: Scheduler, sort: str) -> Trial:
    """The best trial by a result metric, as `status --sort` shows it first."""
    rows = [r for r in sort_trials(snapshot(study, scheduler).trials, sort) if r.result]
    if not rows:
        raise UsageError(f"no trial of study {study.name} has reported a result yet: name a trial")
    return trial_of(study, rows[0].trial)


def sources(study: Study, scheduler: Scheduler, trial: Trial, task: str | None) -> list[tuple[str, Path]]:
    """The log files of the trial's latest attempt, each with the prefix its lines get
    (empty for a single file); a trial that has not started yet is refused in one line."""
    attempt = scheduler.attempts().get(trial.name)
    number = attempt.attempt if attempt else 0
    files = scheduler.log_files(trial.name, attempt_name(trial, number))  # type: ignore[attr-defined]
    if task is not None:
        if files and all(prefix == "" for prefix, _ in files):
            raise UsageError(f"--task: {scheduler.title} writes one log for a trial's whole job; leave --task out")
        files = [(prefix, path) for prefix, path in files if prefix.rsplit("-", 1)[0] == task]
    if not files:
        state = attempt.state.value if attempt else "waiting (not submitted yet)"
        raise UsageError(f"trial {trial.name} of study {study.name} has logged nothing yet: it is {state}")
    return files if len(files) > 1 else [("", files[0][1])]


def lines(
    found: list[tuple[str, Path]],
    tail: int | None = None,
    follow: bool = False,
    running: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = 1.0,
) -> Iterator[tuple[str, str]]:
    """(prefix, line) of each file, its last `tail` lines only when given; with `follow`,
    the lines written later too, until the attempt no longer runs and nothing more comes."""
    offsets: dict[Path, int] = {}
    for prefix, path in found:
        data = _read(path, 0)
        offsets[path] = len(data)
        text = data.decode("utf-8", "replace").splitlines()
        for line in text[-tail:] if tail else ([] if tail == 0 else text):
            yield prefix, line
    while follow:
        still = running()
        sleep(interval)
        grew = False
        for prefix, path in found:
            data = _read(path, offsets[path])
            if not data:
                continue
            end = data.rfind(b"\n") + 1  # whole lines only: the rest comes with the next read
            if not end:
                continue
            offsets[path] += end
            grew = True
            for line in data[:end].decode("utf-8", "replace").splitlines():
                yield prefix, line
        if not still and not grew:
            return


def _read(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return b""
