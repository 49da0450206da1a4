"""The plan of a study: the trials it expands to and what they will cost, as data, a
table or JSON. Nothing here touches a cluster."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from stratctl.core.contract import Rendezvous
from stratctl.core.cost import Estimate, estimate
from stratctl.core.merging import merging
from stratctl.core.render import Renderer, validate
from stratctl.core.space import Trial, size
from stratctl.core.spec import Study


@dataclass(frozen=True)
class Plan:
    study: Study
    trials: Sequence[Trial]
    drawn: int  # combinations drawn by the strategy, before duplicates were merged
    estimate: Estimate
    seconds: Sequence[float] | None = None  # each trial's expected duration, when they differ
    shapes: Sequence[tuple[int, ...]] | None = None  # each trial's GPUs per pod, when shapes differ
    gangs: Sequence[int] | None = None  # each trial's pods that must start together, when shapes differ

    @property
    def duplicates(self) -> int:
        return self.drawn - len(self.trials)


def make_plan(path: str | Path, rendezvous_for: Callable[[Study], Rendezvous | None]) -> Plan:
    """Load, expand and render-check a study (with the rendezvous step `rendezvous_for`
    chooses for its backend, as stratctl.backends.rendezvous_for does), and estimate its cost."""
    study, trials = validate(path, rendezvous_for)
    seconds = shapes = gangs = None
    if study.cost.per_trial or study.varying_shape:
        renderer = Renderer(study, rendezvous=rendezvous_for(study))
        if study.cost.per_trial:
            seconds = [renderer.expected_seconds(t) for t in trials]
        if study.varying_shape:
            shapes = [renderer.shape(t) for t in trials]
            gangs = [renderer.study_for(t).gang_size for t in trials]
    gpus = None if shapes is None else [sum(s) for s in shapes]
    cost = estimate(study, trials, seconds, gpus)
    if study.strategy.closed_loop:  # the first asks shown; the budget costed, as the first asks average
        budget = study.strategy.trials or 0
        scale = budget / len(trials) if trials else 0.0
        cost = replace(
            cost,
            trials=budget,
            gpu_hours=cost.gpu_hours * scale,
            money=None if cost.money is None else cost.money * scale,
        )
        return Plan(study, trials, len(trials), cost, seconds, shapes, gangs)
    return Plan(study, trials, size(study), cost, seconds, shapes, gangs)


def members(study: Study, pods: str, gang: str) -> str:
    """What one trial is, in its backend's words: its pods and, when they differ, how many
    of them must start together (Volcano's minAvailable: a log collector may not hold the
    gang); a job of tasks on Slurm, an application of containers on YARN."""
    if study.backend == "slurm":
        return f"one job of {pods} tasks"
    if study.backend == "yarn":
        return f"one application of {pods} containers"
    return f"a gang of {pods} pods" if gang == pods else f"{pods} pods, a gang of {gang} that must start together"


def _span(values: Sequence[int]) -> str:
    low, high = min(values), max(values)
    return f"{low}" if low == high else f"{low}–{high}"


def _objectives(study: Study) -> str:
    return ", ".join(f"{o.direction} {o.metric}" for o in study.objectives)


def _value(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def grid(plan: Plan, max_rows: int | None = 50) -> tuple[str, list[tuple[str, bool]], list[list[str]]]:
    """The trials as a table's data: its title, each column's (header, numeric), the shown rows."""
    s = plan.study
    title = f"study {s.name}: {len(plan.trials)} trials"
    if s.strategy.closed_loop:
        title = (
            f"study {s.name}: up to {s.strategy.trials} trials chosen from results ({s.strategy.kind}, "
            f"objective {_objectives(s)}); the first {len(plan.trials)} it asks"
        )
    columns = [("#", True), ("trial", False), *((name, True) for name in s.space)]
    if plan.shapes is not None:
        columns += [("pods", True), ("GPUs", True)]
    if plan.seconds is not None:
        columns.append(("expected", True))
    shown = plan.trials if max_rows is None else plan.trials[:max_rows]
    rows = []
    for i, t in enumerate(shown):
        shape = [str(len(plan.shapes[i])), str(sum(plan.shapes[i]))] if plan.shapes is not None else []
        expected = [_duration(plan.seconds[i])] if plan.seconds is not None else []
        rows.append([str(t.index), t.name, *(_value(t.params[k]) for k in s.space), *shape, *expected])
    return title, columns, rows


def table(plan: Plan, max_rows: int | None = 50) -> Group:
    """The plan for a terminal: the trials' table, then the notes (`notes`)."""
    title, columns, rows = grid(plan, max_rows)
    trials = Table(title=title, title_justify="left")
    for header, numeric in columns:
        trials.add_column(header, justify="right" if numeric else "left", no_wrap=header == "trial")
    for row in rows:
        trials.add_row(*row)
    return Group(trials, *(Text(line) for line in notes(plan, len(rows))))


def notes(plan: Plan, shown: int) -> list[str]:
    """The lines under the trials' table: what was left out, where and how the trials run, the cost."""
    s, e = plan.study, plan.estimate
    lines = []
    if shown < len(plan.trials):
        lines.append(f"… {len(plan.trials) - shown} more trials (use --max-rows 0 or -o json to see all)")
    if plan.duplicates:
        lines.append(
            f"{plan.drawn} combinations drawn, {plan.duplicates} duplicates merged: {len(plan.trials)} distinct trials"
        )
    lines.append(_where(s))
    if plan.shapes is not None:
        pods = [len(shape) for shape in plan.shapes]
        one = members(s, _span(pods), _span(plan.gangs or pods))
        tasks = ", ".join(
            f"{t.name}×{t.replicas if isinstance(t.replicas, int) else 'by trial'}" for t in s.trial.tasks
        )
        lines.append(
            f"each trial: {one} ({tasks}), "
            f"{e.gpus_text} by trial, expected {_duration(e.expected_seconds)}"
            + (" on average" if plan.seconds is not None else "")
        )
        cost = (
            f"cost: {e.gpu_hours:,.2f} GPU-hours = the sum of each trial's GPUs × its expected duration × "
            f"retry factor {e.retry_factor:g}"
        )
    else:
        one = members(s, str(sum(t.pods for t in s.trial.tasks)), str(s.gang_size))
        lines.append(
            f"each trial: {one} ({', '.join(f'{t.name}×{t.replicas}' for t in s.trial.tasks)}), "
            f"{e.gpus_per_trial} GPUs, expected {_duration(e.expected_seconds)}"
            + (" on average" if plan.seconds is not None else "")
        )
        per_trial = (
            f"{_duration(e.expected_seconds)} (mean)" if plan.seconds is not None else _duration(e.expected_seconds)
        )
        cost = (
            f"cost: {e.gpu_hours:,.2f} GPU-hours = {e.gpus_per_trial} GPUs × {per_trial} × "
            f"{e.trials} trials × retry factor {e.retry_factor:g}"
        )
    how = merging(s)
    if s.merge != "off" or s.backend == "slurm" or how.could:
        blocks = _merge(plan)["blocks"]
        lines.append(how.why + (f" ({blocks} block{'s' if blocks > 1 else ''} for these trials)" if blocks else ""))
    if e.money is not None:
        cost += f" ≈ {e.money:,.2f} {e.currency} at {s.cost.gpu_hour_price:g} {e.currency}/GPU-hour"
    lines.append(cost)
    return lines


def _where(s: Study) -> str:
    """Where and how the trials run, in the backend's own words."""
    if s.backend == "slurm":  # where it runs, in Slurm's words: a job of N tasks in a partition
        return (
            f"strategy {s.strategy.kind} (seed {s.strategy.seed}); backend slurm; partition "
            f"{','.join(s.queues) if s.queue != 'default' else s.slurm.partition or '(the default)'}; "
            f"time limit {_duration(s.slurm.minutes * 60)}; "
            f"critical {str(s.critical).lower()}"
        )
    if s.backend == "yarn":  # in YARN's words: an application of N containers in a queue
        return (
            f"strategy {s.strategy.kind} (seed {s.strategy.seed}); backend yarn; queue "
            f"{' → '.join(s.queues) if s.queue != 'default' else s.yarn.queue}"
            f"{'; node label ' + s.yarn.node_label if s.yarn.node_label else ''}; critical {str(s.critical).lower()}"
        )
    return (
        f"strategy {s.strategy.kind} (seed {s.strategy.seed}); workload {s.workload}; "
        f"queue {' → '.join(s.queues)}; "
        f"priority class {s.priority_class or '-'}; critical {str(s.critical).lower()}"
    )


def as_json(plan: Plan) -> dict[str, Any]:
    return {
        "study": plan.study.name,
        "namespace": plan.study.namespace,
        "spec_hash": plan.study.spec_hash,
        "strategy": plan.study.strategy.model_dump(),
        "objective": [o.model_dump() for o in plan.study.objectives],
        "drawn": plan.drawn,
        "duplicates": plan.duplicates,
        "gang_size": None if plan.shapes is not None else plan.study.gang_size,
        "trials": [
            {
                "index": t.index,
                "name": t.name,
                "params": dict(t.params),
                **({"pods": len(plan.shapes[i]), "gpus": sum(plan.shapes[i])} if plan.shapes is not None else {}),
                **({"expected_seconds": plan.seconds[i]} if plan.seconds is not None else {}),
            }
            for i, t in enumerate(plan.trials)
        ],
        "estimate": plan.estimate.as_dict(),
        "merge": _merge(plan),
    }


def _merge(plan: Plan) -> dict[str, Any]:
    """How the study's first attempts are sent (core/merging.py); `blocks`: how many at
    least (a block of fewer trials when their scripts would outgrow one object), None for a
    search that asks its trials as it goes."""
    how = merging(plan.study)
    known = how.merged and not plan.study.strategy.closed_loop
    return {"merged": how.merged, "why": how.why, "blocks": -(-len(plan.trials) // how.block) if known else None}


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g}h"
    if seconds >= 60:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
