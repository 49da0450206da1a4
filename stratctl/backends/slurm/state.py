"""What state each trial of a study is in on Slurm, from `squeue --json` and the files
its attempts leave in their output directories (pure, but for `read_marks`).

A job stratctl submitted carries the comment `stratctl:<study>/<trial>/<attempt>/<hash>`
(backends/slurm/script.py). While the controller remembers a job, its state is squeue's; once it
has forgotten it (MinJobAge after the end; there is no accounting to ask), the attempt's
files tell: `attempt-N.job` says it started, `attempt-N.exit` how it ended.

Preemption is not failure: with PreemptMode=REQUEUE Slurm puts a preempted job back in
the queue, the same job, its restart count up; its script resumes from the checkpoint.
Those restarts, over every attempt of the trial, are its preemptions (drain's requeues,
counted in `attempt-N.held`, left out; each start writes its restart count beside its
job id, so the earlier attempts' outlive the controller's memory). A job held by the user (`stratctl drain`) is
suspended, not pending.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from stratctl.attempt import Attempt
from stratctl.backends.slurm.blocks import ARRAY_LIMIT, BLOCK_MARK, QUEUED, task_ids
from stratctl.backends.slurm.script import parse_comment
from stratctl.trialstate import TrialState

STATES = {
    "PENDING": TrialState.PENDING,
    "CONFIGURING": TrialState.PENDING,
    "REQUEUED": TrialState.PENDING,
    "REQUEUE_HOLD": TrialState.PENDING,
    "REQUEUE_FED": TrialState.PENDING,
    "RESV_DEL_HOLD": TrialState.PENDING,
    "RUNNING": TrialState.RUNNING,
    "COMPLETING": TrialState.RUNNING,
    "RESIZING": TrialState.RUNNING,
    "SUSPENDED": TrialState.RUNNING,
    "STOPPED": TrialState.RUNNING,
    "SIGNALING": TrialState.RUNNING,
    "STAGE_OUT": TrialState.RUNNING,
    "COMPLETED": TrialState.SUCCEEDED,
    "FAILED": TrialState.FAILED,
    "TIMEOUT": TrialState.FAILED,
    "NODE_FAIL": TrialState.FAILED,
    "OUT_OF_MEMORY": TrialState.FAILED,
    "BOOT_FAIL": TrialState.FAILED,
    "DEADLINE": TrialState.FAILED,
    "CANCELLED": TrialState.FAILED,
    "PREEMPTED": TrialState.PREEMPTED,  # preempted and not requeued (PreemptMode=CANCEL): the next attempt resumes
}
HELD = ("JobHeldUser", "JobHeldAdmin")  # `scontrol hold` / `requeuehold`: drained
# why a pending job waits, in the words the adaptive policy reads
CAPACITY = (
    "Resources",
    "Priority",
    "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
)
UNSAID = ("NonZeroExitCode", "JobLaunchFailure")  # what squeue's reason of a job killed by a signal says
LIMITS = ("QOS", "Assoc", "MaxSubmit", "PartitionNodeLimit", "PartitionTimeLimit", "JobArrayTaskLimit")


class Mark(NamedTuple):
    """What one attempt's files say: its job id (it started), its exit status (it ended),
    and when (the files' modification times); Slurm's restart count at its last start, and
    how many of those restarts were drain's (`attempt-N.held`: SlurmScheduler.stop)."""

    job_id: int | None
    exit_code: int | None
    started: float | None = None
    ended: float | None = None
    restarts: int = 0
    held: int = 0

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended - self.started) if self.started is not None and self.ended is not None else 0.0


def _attempt(
    trial: str,
    attempt: int,
    state: TrialState,
    job_id: int | str | None,
    slurm_state: str = "",
    reason: str = "",
    restarts: int = 0,
    spec_hash: str = "",
    exit_code: int | None = None,
    started: float | None = None,
    ended: float | None = None,
) -> Attempt:
    pending = state is TrialState.PENDING
    return Attempt(
        trial,
        attempt,
        state,
        "" if job_id is None else str(job_id),
        slurm_state,
        reason,
        restarts,
        spec_hash,
        exit_code,
        waits_for_capacity=pending and reason in CAPACITY,
        waits_for_limits=pending and reason.startswith(LIMITS),
        started=started,
        ended=ended,
    )


def _time(value: Any) -> float | None:
    """A time of squeue's JSON (seconds since the epoch; 0 when unset; a {set, number} object in later Slurm)."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _number(value: Any) -> int | None:
    """An integer of squeue's JSON (a {set, number} object in later Slurm)."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def exit_of(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) of a job's `exit_code` or `derived_exit_code` in squeue's JSON.
    Slurm 22.05 gives the wait status: exit code = status >> 8, signal = status & 0x7f (768
    is exit 3, 9 is signal 9); later Slurm an object {status, return_code, signal: {id}}."""
    if isinstance(value, dict):
        sig = _number((value.get("signal") or {}).get("id"))
        if value.get("status") == "SIGNALED" or sig:
            return None, sig
        return _number(value.get("return_code")), None
    status = _number(value)
    if status is None:
        return None, None
    return (None, status & 0x7F) if status & 0x7F else (status >> 8 & 0xFF, None)


def signal_text(number: int) -> str:
    """`signal 9 (SIGKILL)`."""
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def ending(job: dict[str, Any]) -> tuple[int | None, str]:
    """How an ended job ended: its exit code, or None and the signal that killed it. The
    script exits 128+N when a task was killed by signal N (srun's exit status), which the
    job's derived exit code (the highest of its steps) shows as that signal."""
    code, sig = exit_of(job.get("exit_code"))
    if code is not None and code > 128:
        _, step = exit_of(job.get("derived_exit_code"))
        if step == code - 128:
            code, sig = None, step
    return code, "" if sig is None else signal_text(sig)


def of_job(job: dict[str, Any], study: str, blocks: dict[str, list[str]] | None = None) -> Attempt | None:
    """The attempt a squeue job stands for; None for a job of another study or not
    stratctl's (a task of a block: the trial at its index, `blocks`: read_blocks)."""
    named = parse_comment(job.get("comment"))
    if named is None or named[0] != study:
        return None
    _, trial, attempt, spec_hash = named
    job_id: str | int | None = job.get("job_id")
    block = ""
    if trial.startswith(BLOCK_MARK):  # one task of a block (a job array): the trial of its index
        block, index = trial[len(BLOCK_MARK) :], _number(job.get("array_task_id"))
        trials = (blocks or {}).get(block) or []
        if index is None or not 0 <= index < len(trials):
            return None
        trial, job_id = trials[index], f"{_number(job.get('array_job_id')) or job_id}_{index}"
    slurm_state = str(job.get("job_state") or "")
    reason = str(job.get("state_reason") or "")
    state = STATES.get(slurm_state, TrialState.PENDING)
    held = reason in HELD or slurm_state == "REQUEUE_HOLD" or job.get("priority") == 0  # a held job's priority is 0
    if held and (state is TrialState.PENDING or slurm_state == "COMPLETING"):  # COMPLETING: being requeued held
        state = TrialState.SUSPENDED
    ran = state in (TrialState.RUNNING, TrialState.SUCCEEDED, TrialState.FAILED, TrialState.PREEMPTED)
    ended = state in (TrialState.SUCCEEDED, TrialState.FAILED, TrialState.PREEMPTED)
    code, killed = ending(job) if ended else (None, "")
    if killed:  # the signal says why, better than squeue's JobLaunchFailure or NonZeroExitCode
        reason = killed if reason in ("None", "", *UNSAID) else f"{killed}; {reason}"
    found = _attempt(
        trial,
        attempt,
        state,
        job_id,
        slurm_state,
        "" if reason == "None" else reason,
        int(job.get("restart_cnt") or 0),
        spec_hash,
        code,
        started=_time(job.get("start_time")) if ran else None,  # a pending job's is a forecast
        ended=_time(job.get("end_time")) if ended else None,
    )  # a running job's is its time limit
    # the partition it started in (pending: every partition it may start in, `a,b`)
    found = replace(found, queue=str(job.get("partition") or ""))
    if not block:
        return found
    if (
        found.state is TrialState.PENDING and found.reason == ARRAY_LIMIT
    ):  # split from the remainder, e.g. held and released
        return replace(found, block=block, queued=True, waits_for_limits=False, reason=QUEUED)
    return replace(found, block=block)


def remainder(job: dict[str, Any], study: str, blocks: dict[str, list[str]], running: int) -> list[Attempt]:
    """The trials of a block whose tasks have not started, from the array's one pending
    record (`array_task_string`): as many as its throttle lets run besides the block's
    tasks `running`, pending for the reason squeue gives; the others queued in the block:
    not in flight, their turn kept by the array."""
    named = parse_comment(job.get("comment"))
    if named is None or named[0] != study or not named[1].startswith(BLOCK_MARK):
        return []
    block = named[1][len(BLOCK_MARK) :]
    trials = blocks.get(block) or []
    base = _number(job.get("array_job_id")) or _number(job.get("job_id"))
    throttle = _number(job.get("array_max_tasks")) or 0
    room = max(0, throttle - running) if throttle else len(trials)
    held = str(job.get("state_reason") or "") in HELD or job.get("priority") == 0
    reason = str(job.get("state_reason") or "")
    out = []
    for n, index in enumerate(i for i in task_ids(str(job.get("array_task_string") or "")) if i < len(trials)):
        queued = n >= room and not held
        why = QUEUED if queued else reason
        state = TrialState.SUSPENDED if held else TrialState.PENDING
        found = _attempt(trials[index], 0, state, f"{base}_{index}", "PENDING", why, spec_hash=named[3])
        out.append(
            replace(
                found,
                block=block,
                queued=queued,
                waits_for_capacity=found.waits_for_capacity and not queued,
                queue=str(job.get("partition") or ""),
            )
        )
    return out


def of_marks(trial: str, attempt: int, mark: Mark) -> Attempt:
    """An attempt the controller no longer lists, from its files: it started (job id), and
    ended with its exit status, or ended without its script finishing (cancelled, timed
    out, its node lost): failed."""
    if mark.exit_code is None:
        # when it ended is unknown: no run time is counted for it
        return _attempt(trial, attempt, TrialState.FAILED, mark.job_id, reason="ended without an exit status")
    return _attempt(
        trial,
        attempt,
        TrialState.SUCCEEDED if mark.exit_code == 0 else TrialState.FAILED,
        mark.job_id,
        exit_code=mark.exit_code,
        started=mark.started,
        ended=mark.ended,
    )


def _order(attempt: Attempt) -> tuple[int, int]:
    """Later attempts first, then the first job sent (a block's task: its array's)."""
    return attempt.attempt, -int(attempt.job.split("_")[0] or 0)


def latest(
    jobs: list[dict[str, Any]],
    study: str,
    marks: dict[str, dict[int, Mark]],
    blocks: dict[str, list[str]] | None = None,
) -> dict[str, Attempt]:
    """Each trial's latest attempt: from squeue where the controller lists it, else from
    the marks its attempts left (`read_marks`). Of two jobs of one attempt (a submit sent
    again after its answer was lost, where the lookup missed it) the first one counts.
    `blocks` (read_blocks): the trials of each block, whose tasks squeue lists by index."""
    seen: dict[str, Attempt] = {}
    blocks = blocks or {}
    rest = []  # the pending remainders of blocks: once their started tasks are counted
    for job in jobs:
        if job.get("array_task_string") and _number(job.get("array_task_id")) is None:
            rest.append(job)
            continue
        found = of_job(job, study, blocks)
        if found is None:
            continue
        have = seen.get(found.trial)
        if have is None or _order(found) > _order(have):
            seen[found.trial] = found
    for job in rest:
        named = parse_comment(job.get("comment")) or ("", "", 0, "")
        block = named[1][len(BLOCK_MARK) :]
        running = sum(1 for a in seen.values() if a.block == block and a.state is TrialState.RUNNING)
        for found in remainder(job, study, blocks, running):
            have = seen.get(found.trial)
            if have is None or _order(found) > _order(have):
                seen[found.trial] = found
    for trial, attempts in marks.items():
        if not attempts:
            continue
        number = max(attempts)
        if trial in seen and seen[trial].attempt >= number:
            continue
        seen[trial] = of_marks(trial, number, attempts[number])
    for trial, attempts in marks.items():  # the run time of the attempts before the latest
        if trial in seen:
            earlier = sum(m.seconds for n, m in attempts.items() if n < seen[trial].attempt)
            if earlier:
                seen[trial] = replace(seen[trial], earlier_seconds=earlier)
    return preempted(seen, jobs, study, marks, blocks)


def preempted(
    seen: dict[str, Attempt],
    jobs: list[dict[str, Any]],
    study: str,
    marks: dict[str, dict[int, Mark]],
    blocks: dict[str, list[str]] | None = None,
) -> dict[str, Attempt]:
    """Each latest attempt with its trial's preemptions: its own restarts and those of the
    trial's earlier attempts (squeue's count while it lists their jobs, else their marks'),
    drain's requeues (`held`) left out: Slurm counts them as restarts, they are no preemption."""
    listed: dict[tuple[str, int], int] = {}
    for job in jobs:
        found = of_job(job, study, blocks)  # a block's pending remainder: not started, no restarts
        if found is not None:
            key = (found.trial, found.attempt)
            listed[key] = max(listed.get(key, 0), int(job.get("restart_cnt") or 0))

    def restarts(trial: str, number: int) -> int:
        mark = marks.get(trial, {}).get(number)
        count = listed.get((trial, number), mark.restarts if mark else 0)
        return max(0, count - (mark.held if mark else 0))

    for trial, attempt in seen.items():
        own = restarts(trial, attempt.attempt)
        before = sum(restarts(trial, n) for n in range(attempt.attempt))
        if (own, before) != (attempt.restarts, attempt.preempted_before):
            seen[trial] = replace(attempt, restarts=own, preempted_before=before)
    return seen


def read_marks(directory: Path) -> dict[str, dict[int, Mark]]:
    """The attempt files under a study's output directory: trial → attempt → its Mark."""
    out: dict[str, dict[int, Mark]] = {}
    if not directory.is_dir():
        return out
    for trial_dir in directory.iterdir():
        if not trial_dir.is_dir() or trial_dir.name.startswith("."):
            continue
        attempts: dict[int, Mark] = {}
        for mark in trial_dir.glob("attempt-*.job"):
            number = mark.stem.split("-", 1)[1]
            if not number.isdigit():
                continue
            exit_file = trial_dir / f"attempt-{number}.exit"
            ended = exit_file.exists()
            started = _ints(mark)  # the job id and, since it writes it, Slurm's restart count
            attempts[int(number)] = Mark(
                started[0] if started else None,
                _int(exit_file) if ended else None,
                _mtime(mark),
                _mtime(exit_file) if ended else None,
                started[1] if len(started) > 1 else 0,
                _int(trial_dir / f"attempt-{number}.held") or 0,
            )
        if attempts:
            out[trial_dir.name] = attempts
    return out


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _ints(path: Path) -> list[int]:
    try:
        words = path.read_text().split()
    except OSError:
        return []
    out = []
    for word in words:
        if not word.isdigit():
            break
        out.append(int(word))
    return out


def _int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
