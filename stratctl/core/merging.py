"""Merged submissions (the study's `merge: off | auto`): whether a study's first attempts
go to the scheduler as blocks, one scheduler object for many trials, and why not (pure).

A block is one Slurm job array (`sbatch --array=0-N%K`): one array task per trial, its
throttle `K` kept to the adaptive target as the loop runs (`scontrol update ...
ArrayTaskThrottle`); on Kubernetes one batch/v1 Indexed Job, one index per trial, its
`parallelism` kept to the target (backends/kubernetes/blocks/blocks.py). A trial's next attempts
(after a failure) are single jobs as without merging; a preempted task or index runs again
inside its block.

`auto` merges when the trials allow it: they share one shape of one task of one process
(the common hyperparameter sweep) and the backend has arrays. A closed-loop search asks its
trials as results come in: the trials it asks in one cycle (as many as the policy admits)
go as one block (Kubernetes: an Indexed Job; Slurm: a job array, sent whole with the
tasks it runs), so it learns exactly what it would without merging.
"""

from __future__ import annotations

from dataclasses import dataclass

from stratctl.core.spec import Study

# how many trials one Slurm array carries at most: Slurm's default MaxArraySize is 1001
# (task ids 0-1000); a site's smaller limit is read from `scontrol show config`
SLURM_BLOCK = 1000
# how many trials one Indexed Job carries at most (fewer when their list or scripts would
# outgrow one object: backends/kubernetes/blocks/blocks.py)
KUBERNETES_BLOCK = 1000


@dataclass(frozen=True)
class Merging:
    """How a study's first attempts are sent."""

    merged: bool
    why: str  # said by `plan` and `submit`: how, or why not
    block: int = 0  # trials one block carries at most
    could: bool = False  # `merge: off`, but `auto` would merge these trials (what `plan` says)


def merging(study: Study) -> Merging:
    if study.merge == "off":
        auto = _auto(study)
        hint = f" (merge: auto would merge them: {auto.why.removeprefix('merged: ')})" if auto.merged else ""
        return Merging(False, f"merge: off: one scheduler object per trial{hint}", could=auto.merged)
    return _auto(study)


def _auto(study: Study) -> Merging:
    if study.backend == "yarn":
        return Merging(
            False,
            "merge: auto keeps one application per trial on YARN: YARN has no job arrays (an application "
            "is one ApplicationMaster and its containers, started and ended as one)",
        )
    tasks = study.trial.tasks
    if study.varying_shape:
        return Merging(False, "merge: auto: trials differ in shape, one job per trial")
    if len(tasks) != 1 or tasks[0].replicas != 1:
        return Merging(False, "merge: auto: a trial of several processes is a gang of its own, one job per trial")
    if study.backend == "kubernetes":
        return _kubernetes(study)
    if study.strategy.closed_loop:
        return Merging(
            True,
            "merged: the trials the search asks in one cycle (as many as the policy admits) go as one job array, "
            "one array task per trial; the pruner cancels one task",
            SLURM_BLOCK,
        )
    return Merging(
        True,
        f"merged: job arrays of up to {SLURM_BLOCK} trials, one array task per trial, the arrays' "
        "ArrayTaskThrottle kept to the adaptive target",
        SLURM_BLOCK,
    )


def _kubernetes(study: Study) -> Merging:
    if study.workload != "batch":
        return Merging(
            False,
            "merge: auto: a block is a batch/v1 Indexed Job: set workload: batch to merge (Volcano Jobs have no "
            "per-index completion), one Volcano Job per trial",
        )
    task = study.trial.tasks[0]
    if not (task.command or study.trial.command):
        return Merging(
            False,
            "merge: auto: the trial states no command: a block's pod runs each trial's own command line, so the "
            "image's entrypoint cannot be kept; one Job per trial",
        )
    if study.strategy.closed_loop:
        return Merging(
            True,
            "merged: the trials the search asks in one cycle (as many as the policy admits) go as one Indexed Job, "
            "one index per trial; the pruner stops one index",
            KUBERNETES_BLOCK,
        )
    return Merging(
        True,
        f"merged: Indexed Jobs of up to {KUBERNETES_BLOCK} trials, one index per trial, each Job's parallelism "
        "kept to the adaptive target",
        KUBERNETES_BLOCK,
    )


def checked_by_render(study: Study) -> bool:
    """Whether `validate` and `plan` must render the study's trials as `submit` does to tell
    that they can share blocks (merged on Kubernetes: their pods may differ in command line
    and environment alone)."""
    return study.backend == "kubernetes" and merging(study).merged
