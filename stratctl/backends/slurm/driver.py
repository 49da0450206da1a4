"""A Slurm study's driver (`submit --in-cluster`): its submit loop, run as one small batch job.

The job, `stratctl-driver-<study>`, is one task of one CPU, `--requeue`d when preempted or
its node fails, with the `--timeout` given to submit as its time limit (one minute more, so
that the loop ends by itself first; none given: the partition's default), in the study's
partition, account and QOS (script.py's `placement`, as its attempts). It runs
`<python> -m stratctl submit <study file> --take-over <flags>` with the python that ran
the command, by its absolute path: stratctl and the study file must be where the nodes see
them, at the same paths (a shared filesystem, as the study directory already is). Its
script and its log are in the study directory's `.driver/`.

`send` returns once that job holds the study's mark (backends/batch/driverfile.py), which
names it `slurm job <id> on <node>` (run/driver.py `identity`); a driver job that ended or
cannot start is said at once. A job Slurm starts again (requeued) takes the mark at once:
as the same driver on the same node, or because the job its mark names no longer runs
there (`holder_gone`), as any next driver does.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratctl.backends.batch.driverfile import FileStore
from stratctl.backends.batch.scheduler import study_directory
from stratctl.backends.slurm.commands import Listed, Slurm
from stratctl.backends.slurm.script import placement
from stratctl.core.spec import Study
from stratctl.errors import ClusterError, StratctlError, UsageError
from stratctl.run.driver import SLURM_JOB, gone

DRIVER = ".driver"  # in the study directory: the driver's script and logs
STARTUP = 120.0  # seconds the driver job may take to hold its study (queued, started, study checked)
# squeue's states of a job that ended, or is ending
ENDED = frozenset(
    {
        "COMPLETED",
        "COMPLETING",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
# why a pending job will never start by itself
STUCK = frozenset(
    {
        "PartitionTimeLimit",
        "PartitionNodeLimit",
        "PartitionDown",
        "PartitionInactive",
        "PartitionConfig",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",
        "QOSNotAllowed",
        "BadConstraints",
        "DependencyNeverSatisfied",
    }
)


def job_name(study: str) -> str:
    return f"stratctl-driver-{study}"


@dataclass(frozen=True)
class DriverScript:
    """The driver job as sbatch is given it."""

    name: str
    options: tuple[str, ...]  # its #SBATCH options
    text: str


def script(study: Study, python: str, flags: Sequence[str], timeout: float | None, directory: Path) -> DriverScript:
    """The driver's batch script (pure): `directory` is the study directory, `timeout` the
    seconds of submit's `--timeout`, if given."""
    if study.source is None:
        raise UsageError("--in-cluster on Slurm runs the study file where the driver job runs: give it as a file")
    name = job_name(study.name)
    options = [
        f"--job-name={name}",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--requeue",
        f"--output={directory / DRIVER}/driver-%j.log",
        "--open-mode=append",  # a requeued job goes on in the same log
    ]
    if timeout is not None:
        options.append(f"--time={math.ceil(timeout / 60) + 1}")
    options += placement(study)
    command = [python, "-m", "stratctl", "submit", str(Path(study.source).resolve()), "--take-over", *flags]
    text = "\n".join(
        [
            "#!/bin/bash",
            f"# The driver of study {study.name} (`stratctl submit --in-cluster`): its submit loop.",
            *(f"#SBATCH {option}" for option in options),
            "export PYTHONUNBUFFERED=1",
            'echo "stratctl driver: slurm job $SLURM_JOB_ID on $SLURMD_NODENAME, '
            'restart ${SLURM_RESTART_COUNT:-0}, $(date -u +%FT%TZ)"',
            "exec " + " ".join(shlex.quote(word) for word in command),
            "",
        ]
    )
    return DriverScript(name, tuple(options), text)


@dataclass(frozen=True)
class Driven:
    """Where a study's driver runs: its job and node, as its mark names them."""

    job: int
    node: str
    log: str  # its log file
    kept: bool = False  # the driver job that already drove the study (or was about to), left as it was

    def line(self, study: str) -> str:
        how = "already driven" if self.kept else "driven"
        return (
            f"study {study} is {how} by slurm job {self.job} on node {self.node}; "
            f"`stratctl status {study}` follows it, `stratctl logs {study} --driver` shows its output"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "node": self.node, "log": self.log, "kept": self.kept}

    def version_warning(self) -> str | None:
        return None  # the driver runs this python, and so this stratctl


def send(
    slurm: Slurm,
    study: Study,
    flags: Sequence[str],
    timeout: float | None = None,
    python: str = sys.executable,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    startup: float = STARTUP,
) -> Driven:
    """Submit the study's driver job, unless one is queued or running already (then that one
    is waited for), and wait until it holds the study."""
    directory = study_directory(study)
    found = running(slurm, study.name)
    if found is None:
        made = script(study, python, flags, timeout, directory)
        (directory / DRIVER).mkdir(parents=True, exist_ok=True)  # sbatch opens the log there
        (directory / DRIVER / "driver.sh").write_text(made.text)  # what was sent, for whoever looks
        job = slurm.submit(made.text)
    else:
        job = found.job
    node = _held(slurm, study.name, job, directory, wall, sleep, startup)
    return Driven(job, node, str(directory / DRIVER / f"driver-{job}.log"), kept=found is not None)


def _held(
    slurm: Slurm,
    study: str,
    job: int,
    directory: Path,
    wall: Callable[[], float],
    sleep: Callable[[float], None],
    startup: float,
) -> str:
    """The node of driver job `job` once it holds the study's mark; raises when the job ended
    or cannot start, or did not take the study within `startup` seconds."""
    store = FileStore(directory)
    prefix = f"{SLURM_JOB}{job} on "
    started = wall()
    checked = started - 2.0
    while True:
        mark, _ = store.read()
        now = wall()
        # the job's mark, and the job running where it says: not the mark of its run that
        # was killed, before Slurm started it again
        held = mark is not None and mark.holder.startswith(prefix) and mark.live(now)
        if held and mark is not None and not holder_gone(slurm, mark.holder):
            return mark.holder.removeprefix(prefix)
        if now - checked >= 2.0:
            checked = now
            state = _check(slurm, study, job, directory)
        if now - started > startup:
            raise ClusterError(
                f"the driver of study {study} (slurm job {job}) did not take it within {startup:.0f} s: it is "
                f"{state}; it drives the study once it runs (`squeue -j {job}`), `scancel {job}` withdraws it"
            )
        sleep(0.5)


def _check(slurm: Slurm, study: str, job: int, directory: Path) -> str:
    """The driver job's state and reason, for a message; raises when it ended, or waits for
    what will not come by itself (then it is cancelled)."""
    listed = slurm.listed(f"--jobs={job}")
    if not listed:
        raise ClusterError(f"slurm job {job} (the driver of study {study}) is gone: cancelled meanwhile?")
    found = listed[-1]
    said = f"{found.state} ({found.reason})" if found.reason not in ("", "None") else found.state
    if found.state in ENDED:
        log = directory / DRIVER / f"driver-{job}.log"
        raise ClusterError(f"slurm job {job}, the driver of study {study}, ended {said} before it drove it{_tail(log)}")
    if found.state == "PENDING" and found.reason in STUCK:
        slurm.cancel(job)
        raise ClusterError(
            f"slurm job {job}, the driver of study {study}, cannot start: {found.reason} (the study's slurm: "
            "partition, account or qos, or --timeout as its time limit); it was cancelled"
        )
    return said


def _tail(log: Path, lines: int = 5) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return f" (no log at {log})"
    return f"; its log {log} ends: " + " | ".join(text) if text else f" (its log {log} is empty)"


def running(slurm: Slurm, study: str) -> Listed | None:
    """The study's driver job of this user that is queued or running, if any (the newest)."""
    active = [j for j in slurm.listed("--me", f"--name={job_name(study)}") if j.state not in ENDED]
    return active[-1] if active else None


def holder_gone(slurm: Slurm, holder: str) -> bool:
    """Whether the driver `holder` is known to be dead: for a Slurm job, the job is gone, not
    running, or running on another node than its mark says (Slurm started it again
    elsewhere); for any other holder, run/driver.py's `gone`. A controller that does not
    answer says nothing: the holder is alive until its mark expires."""
    if not holder.startswith(SLURM_JOB):
        return gone(holder)
    job, _, node = holder.removeprefix(SLURM_JOB).partition(" on ")
    if not job.isdigit():
        return False
    try:
        listed = slurm.listed(f"--jobs={job}")
    except StratctlError:
        return False
    return not listed or listed[-1].state != "RUNNING" or listed[-1].nodes != node


def log_files(directory: Path) -> list[Path]:
    """The driver jobs' logs in a study directory, oldest first."""
    return sorted((directory / DRIVER).glob("driver-*.log"), key=lambda p: p.stat().st_mtime)


def stop(
    slurm: Slurm,
    study: str,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    patience: float = 15.0,
) -> list[int]:
    """Cancel the study's queued or running driver jobs (`stratctl delete`): their ids, once
    none runs any more (or `patience` seconds passed), so that no cycle of theirs writes
    into the study directory after `delete` removed it."""
    stopped = []
    for found in slurm.listed("--me", f"--name={job_name(study)}"):
        if found.state not in ENDED:
            slurm.cancel(found.job)
            stopped.append(found.job)
    deadline = wall() + patience
    while stopped and running(slurm, study) is not None and wall() < deadline:
        sleep(0.5)
    return stopped
