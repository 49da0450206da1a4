"""The checks that a study's fields agree with each other, made once every field is valid.

A closed-loop search needs an objective and chooses every value itself; a grid needs
points for every parameter; Slurm and YARN run a command, and a batch/v1 Job one task that
is never restarted in place. Each check raises the error of the field a user should fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stratctl.core.distributions import SINGLE_OBJECTIVE, Choice, IntRange, Objective, Param, Pruner, Strategy, missing
from stratctl.core.model import invalid as _bad
from stratctl.core.trialspec import TrialSpec


def check_search(
    strategy: Strategy, objectives: Sequence[Objective], pruner: Pruner | None, space: Mapping[str, Param]
) -> None:
    """The strategy, objectives, pruner and space agree: a closed-loop search has its
    objective and chooses every value itself; a grid has points for every parameter."""
    kind = strategy.kind
    if strategy.closed_loop:
        if not objectives:
            raise _bad(
                "objective",
                "strategy {kind!r} chooses trials from results: it needs 'objective' "
                "(e.g. objective: {{metric: loss, direction: minimize}})",
                field="strategy.kind",
                kind=kind,
            )
        needs = missing(kind)
        if needs:
            raise _bad("strategy_needs", needs, field="strategy.kind")
        if kind in SINGLE_OBJECTIVE and len(objectives) > 1:
            raise _bad(
                "objective",
                "strategy {kind!r} optimises one objective; {n} are given (use tpe or nsga2 for several)",
                field="objective",
                kind=kind,
                n=len(objectives),
            )
        if pruner is not None and len(objectives) > 1:
            raise _bad(
                "pruner",
                "a pruner judges one objective's intermediate values; {n} objectives are given",
                field="pruner",
                n=len(objectives),
            )
        for name, p in space.items():
            if p.grid:
                raise _bad(
                    "grid",
                    "strategy {kind!r} chooses every value of {name!r} itself: remove 'grid'",
                    field=f"space.{name}.grid",
                    kind=kind,
                    name=name,
                )
    if pruner is not None and not strategy.closed_loop:
        raise _bad(
            "pruner",
            "a pruner stops trials of a closed-loop search: use strategy kind tpe, gp, cmaes or nsga2 (got {kind!r})",
            field="pruner",
            kind=kind,
        )
    if strategy.kind == "grid":
        for name, p in space.items():
            if not isinstance(p, Choice | IntRange) and not p.grid:
                raise _bad(
                    "grid",
                    "the grid strategy needs 'grid: N' points for continuous parameter {name!r}",
                    field=f"space.{name}",
                    name=name,
                )


def check_workload(backend: str, workload: str, trial: TrialSpec, templates_dir: str | None) -> None:
    """The trial can run as the backend and workload run it: a command on Slurm and YARN,
    one task and restart_policy Never for a batch/v1 Job."""
    if backend in ("slurm", "yarn"):
        # several tasks: YARN's gang AM asks for containers of each task's own size, Slurm runs a
        # heterogeneous job of one component a task
        for i, t in enumerate(trial.tasks):
            if not (t.command or trial.command):
                one = len(trial.tasks) == 1
                raise _bad(
                    "batch_command",
                    "backend {backend} runs trial.command on the nodes (there is no image "
                    "entrypoint): set trial.command{task}",
                    field="trial" if one else f"trial.tasks.{i}",
                    backend=backend,
                    task="" if one else f" or the command of task {t.name!r}",
                )
    if workload == "batch" and len(trial.tasks) != 1:
        raise _bad(
            "batch_tasks", "workload 'batch' runs one pod template: exactly one task allowed", field="trial.tasks"
        )
    if workload == "batch" and trial.restart_policy != "Never" and trial.template is None and templates_dir is None:
        # the bundled batch template ends an attempt whose pod was preempted with a pod
        # failure policy, which the API server accepts only with restartPolicy Never
        raise _bad(
            "batch_restart_policy",
            "workload 'batch' needs restart_policy Never (its Job fails when a pod "
            "is preempted, so the trial resumes as its next attempt: a podFailurePolicy, which Kubernetes "
            "allows only with restartPolicy Never); got {policy!r}",
            field="trial.restart_policy",
            policy=trial.restart_policy,
        )
