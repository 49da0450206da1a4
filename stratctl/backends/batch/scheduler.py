"""The backend seam: where a study's trials run, and what each scheduler family must do.

A study says its backend (`backend: kubernetes | slurm | yarn`). Everything above the seam is
shared: the study core (load, expand, render every attempt the same way, STRATCTL_*
environment included), the adaptive policy (run/policy.py), the token bucket and retry
policy (run/throttle.py), the recovery rules (a failure counts against
`retries.max_failures`, a preemption never does, and resumes from the checkpoint), and the
displays (`status` rows, the submit summary).

Two shapes of backend sit below it:

- **Kubernetes** (stratctl/backends/kubernetes/; the shared cycle's steps in loop/controller.py):
  attempts are Volcano Jobs or batch/v1 Jobs with their PodGroups, the study record is a
  ConfigMap, the cluster is watched. What only a Kubernetes cluster offers (queue
  fallback, PodGroup salvage, the closed-loop search, the breaker's drain, packing) joins
  the shared cycle as its capabilities (run/cycle.py, backends/kubernetes/loop/features.py).
- **Batch schedulers that run an attempt as one job** (Slurm, YARN): they implement the
  `Scheduler` protocol below, and the same cycle, one `status`, one `drain`/`resume` run
  them all (this package: loop.py, status.py, drain.py). A new scheduler family
  is a new `Scheduler` and a line in `scheduler_for`, nothing else.

`is_attempt_backend` is how the CLI tells them apart. A study on a batch scheduler keeps
what the scheduler forgets (ended jobs, after MinJobAge or max-completed-applications) in
its study directory, `study_directory`: `<output_dir>/<study>`, a relative `output_dir`
resolved against the study file's directory as `templates_dir` is, never against the
working directory, so a submit from anywhere finds the same trials (exactly once). The
study is known by its name through the catalog (catalog.py); a Kubernetes study by its record
in the cluster.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from stratctl.attempt import Attempt
from stratctl.core.space import Trial
from stratctl.core.spec import Study

KUBERNETES = "kubernetes"


class Scheduler(Protocol):
    """What a batch scheduler does for the attempt loop. Every call may raise the errors of
    stratctl.errors: `Unavailable` (no answer: back off and retry), `Throttled` (a submit
    limit: pressure), `Invalid` (the verdict on that one call)."""

    kind: str  # the study's `backend:` value
    title: str  # its name in messages (`Slurm`)
    controller: str  # what answers its requests, in messages (`Slurm controller`, `YARN ResourceManager`)
    create_command: str  # what creates an attempt, as the submit summary counts it (`sbatch`)
    limit_words: str  # what a refusal to create is called there (`submit limits`)
    calls_word: str  # what its calls are, in the submit summary (`commands`, `requests`)

    @property
    def where(self) -> str: ...  # the cluster as `status` names it (`slurm:research`)

    @property
    def queue(self) -> str: ...  # where the study's attempts queue (a partition, a queue)

    # observe
    def attempts(self, marks: bool = True) -> dict[str, Attempt]: ...  # trial name -> its latest attempt
    def free_gpus(self) -> list[int]: ...  # free GPUs of each usable node
    def result(self, trial: str) -> dict[str, Any] | None: ...  # what the trial's attempt wrote as its result

    # create, exactly once: `prepare` names the attempt deterministically, `find` looks it up
    def prepare(self, trial: Trial, number: int) -> Any: ...
    def check(self, trial: Trial) -> None: ...  # build the first attempt without sending it
    def create(self, prepared: Any) -> None: ...
    def find(self, prepared: Any) -> bool: ...

    # suspend (drain) and bring back (resume)
    def hold(self, attempt: Attempt) -> None: ...  # a pending attempt: kept from starting
    def stop(self, attempt: Attempt) -> None: ...  # a running attempt: stopped, kept to resume
    def release(self, attempt: Attempt) -> None: ...
    def drained(self) -> bool: ...
    def set_drained(self, on: bool) -> None: ...

    # give up (run/recovery.py): the trial is failed, its attempt ended if it still runs or waits
    def give_up(self, attempt: Attempt, reason: str) -> None: ...
    def given_up(self) -> dict[str, str]: ...  # trial -> why it was given up

    # its driver (`submit --in-cluster`, run/driver.py): who holds the study's mark
    def driver_gone(self, holder: str) -> bool: ...  # the holder is known dead: its mark is taken at once
    def driver(self) -> int | None: ...  # the study's driver job in the cluster, queued or running
    def stop_driver(self) -> list[int]: ...  # those cancelled (`delete`)

    # counters for the submit summary
    @property
    def calls(self) -> int: ...

    @property
    def sent(self) -> dict[str, int]: ...  # commands or requests sent, by kind

    @property
    def refused(self) -> dict[str, int]: ...  # of those, refused for a limit


class Moving(Protocol):
    """What a scheduler adds for queue fallback by moves (YARN; moves.py): moving an attempt
    that has not started to another of the study's queues. Slurm needs none: it takes a
    study's partitions whole (`--partition=a,b`) and starts each job where it can."""

    @property
    def queues(self) -> tuple[str, ...]: ...  # the study's queues, in order

    def move(self, attempt: Attempt, queue: str) -> None: ...
    def room(self, queue: str) -> int | None: ...  # GPUs the queue may still take (None: not said)


class Searching(Protocol):
    """What a scheduler adds for a closed-loop search's pruner (backends/batch/search.py):
    a running attempt's intermediate values, and stopping one the pruner judges. Results
    come through `Scheduler.result`, as for every study.

    - Slurm: `stratctl.trial.report()` appends to `report.jsonl` in the trial's directory on
      the cluster's shared filesystem; a pruned attempt is cancelled (`scancel`: SIGTERM,
      then SIGKILL after the cluster's KillWait).
    - YARN: no shared filesystem is assumed; reports and the result travel through YARN
      itself (the gang AM, read through the ResourceManager); a pruned application is killed."""

    def reports(self, attempt: Attempt, metric: str) -> dict[int, float]: ...  # step -> value, so far
    def prune(self, attempt: Attempt) -> None: ...  # stop it now: SIGTERM, then its grace; never resumed


def is_attempt_backend(study: Study) -> bool:
    return study.backend != KUBERNETES


def study_directory(study: Study, base: Path | str | None = None) -> Path:
    """Where a study on a batch scheduler keeps its trials' logs, marks and results, and the
    study as submitted: `<output_dir>/<study>`, absolute. A relative `output_dir` is
    resolved against the study file's directory (`base`, when given, instead: tests)."""
    stated = study.slurm.output_dir if study.backend == "slurm" else study.yarn.output_dir
    root = Path(base).expanduser() / stated if base is not None else study.file_relative(stated)
    return Path(os.path.abspath(root.expanduser())) / study.name


def cwd_directory(study: Study) -> Path | None:
    """Where stratctl before the study-directory rule put the study (its `output_dir`
    resolved against the working directory), when that differs from `study_directory`."""
    stated = study.slurm.output_dir if study.backend == "slurm" else study.yarn.output_dir
    if Path(stated).expanduser().is_absolute():
        return None
    old = Path(os.path.abspath(stated)) / study.name
    return None if old == study_directory(study) else old
