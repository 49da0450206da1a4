"""A closed-loop search (`strategy.kind: tpe|gp|cmaes|nsga2`) as a submit loop runs it, on
every backend: the sampler's side (core/search.py) with what the loop keeps of it.

The loop owns one `ClosedLoop`. On its first cycle `rebuild` builds the sampler from the
search's history as the backend reads it from the cluster (`seen`: each trial's parameters
and index, its state and result; Kubernetes: from its jobs, backends/kubernetes/search/
closedloop.py; Slurm and YARN: from the study's journal of asked trials and their
attempts, backends/batch/search.py) and from the study's `told` record, which outlives
jobs, pods and the scheduler's memory. Each cycle the loop asks it for as many new trials
as the policy admits beyond those already waiting, and tells it each trial that ended;
each told trial is written to the record as well.

A trial's name and index are fixed the moment it is asked (the name is the study's plus
a hash of its parameters, as for every strategy; the index counts the trials asked so
far).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from stratctl.core.search import Searcher, Told, values_of
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.trialstate import TrialState

Seen = Mapping[str, tuple[Trial, TrialState, Mapping[str, Any] | None]]  # trial -> (it, its state, its result)


def marked_trials(marks: Mapping[str, Mapping[str, Any]]) -> dict[str, Trial]:
    """Suspended trials (trial → its suspension mark), from the index and parameters their
    marks keep (backends/kubernetes/attempts/requeue.py: `identity`)."""
    out = {}
    for name, mark in marks.items():
        params, index = mark.get("params"), mark.get("index")
        if isinstance(params, dict) and isinstance(index, int):
            out[name] = Trial(index, name, MappingProxyType(params), name.rsplit("-", 1)[-1])
    return out


STEPS_KEPT = 100  # intermediate values the record keeps per ended trial (the latest steps)


def told_entry(
    trial: Trial, state: str, values: tuple[float, ...] | None, steps: Mapping[int, float] | None = None, **extra: Any
) -> dict[str, Any]:
    """What the record keeps of a told trial (key `told`): its intermediate values as
    [[step, value], ...] (the latest STEPS_KEPT), for the pruner of a later loop."""
    entry: dict[str, Any] = {"index": trial.index, "params": dict(trial.params), "state": state}
    if values is not None:
        entry["values"] = list(values)
    if steps:
        entry["steps"] = [[step, float(f"{steps[step]:.6g}")] for step in sorted(steps)[-STEPS_KEPT:]]
    entry.update(extra)
    return entry


def steps_of_entry(entry: Mapping[str, Any]) -> dict[int, float]:
    out = {}
    for pair in entry.get("steps") or []:
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int) and isinstance(pair[1], int | float):
            out[pair[0]] = float(pair[1])
    return out


def outcome(
    state: TrialState, result: Mapping[str, Any] | None, study: Study
) -> tuple[str, tuple[Any, ...] | None] | None:
    """How a trial in `state` is told: ("complete", values), ("failed", None), or None while it runs.

    A trial that succeeded without a number for every objective in its result is told as
    failed: the sampler learns nothing from it, and it still counts against the budget."""
    if state is TrialState.SUCCEEDED:
        values = values_of(result, study)
        return ("complete", values) if values is not None else ("failed", None)
    if state is TrialState.FAILED:
        return "failed", None
    return None


class ClosedLoop:
    def __init__(self, study: Study):
        self.study = study
        self.searcher: Searcher | None = None
        self.told: dict[str, dict[str, Any]] = {}  # trial -> record entry (key `told`)
        self.missing_values: list[str] = []  # trials that succeeded without the objective's metrics

    @property
    def started(self) -> bool:
        return self.searcher is not None

    @property
    def remaining(self) -> int:
        """Trials of the budget not asked yet."""
        return self.searcher.remaining if self.searcher is not None else (self.study.strategy.trials or 0)

    def rebuild(
        self,
        seen: Seen,
        told: Mapping[str, Mapping[str, Any]],
        marks: Mapping[str, Mapping[str, Any]] = {},
    ) -> list[Trial]:
        """The search's trials so far, in the order they were asked, with the sampler built
        from them. `seen`: each trial the cluster shows, with its state and result;
        `told`: the record's told trials; `marks`: its suspended trials (drained: no job)."""
        trials: dict[str, Trial] = {}
        history: dict[str, Told] = {}
        for name, trial in marked_trials(marks).items():  # running, as far as the search is concerned
            trials[name] = trial
            history[name] = Told(name, trial.params, "running")
        for name, entry in told.items():
            params = entry.get("params")
            index = entry.get("index")
            if not isinstance(params, dict) or not isinstance(index, int):
                continue
            trial = Trial(index, name, MappingProxyType(params), name.rsplit("-", 1)[-1])
            values = entry.get("values")
            state = str(entry.get("state")) if entry.get("state") in ("complete", "failed", "pruned") else "failed"
            values = tuple(float(v) for v in values) if isinstance(values, list) and state == "complete" else None
            trials[name] = trial
            history[name] = Told(
                name,
                trial.params,
                state if values is not None or state != "complete" else "failed",
                values,
                steps_of_entry(entry),
            )
            self.told[name] = dict(entry)
        for name, (of_cluster, state, result) in seen.items():
            if name in trials and name not in marks:
                continue
            said = outcome(state, result, self.study)
            trials[name] = of_cluster
            history[name] = Told(name, of_cluster.params, said[0] if said else "running", said[1] if said else None)
            if said is not None:
                self.told[name] = told_entry(of_cluster, *said)
        ordered = sorted(trials.values(), key=lambda t: t.index)
        self.searcher = Searcher(self.study, [history[t.name] for t in ordered])
        return ordered

    def spent(self) -> None:
        """The space has no point left that is not a trial already: the budget is what was asked."""
        assert self.searcher is not None
        self.searcher.budget = self.searcher.size

    def ask(self, n: int, next_index: int) -> list[Trial]:
        """Up to `n` new trials, indexed from `next_index`."""
        assert self.searcher is not None, "rebuild first"
        return [
            Trial(next_index + i, name, MappingProxyType(params), name.rsplit("-", 1)[-1])
            for i, (name, params) in enumerate(self.searcher.ask(n))
        ]

    def tell(
        self,
        trial: Trial,
        state: TrialState,
        result: Mapping[str, Any] | None,
        steps: Mapping[int, float] | None = None,
    ) -> dict[str, Any] | None:
        """A trial ended: tell the sampler, and return its record entry (None if it has not
        ended, or was told before). `steps`: its intermediate values, as last read."""
        if trial.name in self.told or self.searcher is None:
            return None
        said = outcome(state, result, self.study)
        if said is None:
            return None
        if state is TrialState.SUCCEEDED and said[0] == "failed":
            self.missing_values.append(trial.name)
        self.searcher.tell(trial.name, *said)
        self.told[trial.name] = entry = told_entry(trial, *said, steps)
        return entry

    def report(self, trial: Trial, steps: Mapping[int, float]) -> bool:
        """A running trial's intermediate values so far; whether the pruner stops it."""
        return self.searcher is not None and trial.name not in self.told and self.searcher.report(trial.name, steps)

    def prune(self, trial: Trial, steps: Mapping[int, float], gpu_seconds: float, at: float) -> dict[str, Any]:
        """Tell the sampler the trial was pruned; its record entry (its last value kept as
        `value`, its GPU time as `gpu_seconds`, the wall time as `at`)."""
        assert self.searcher is not None
        self.searcher.tell(trial.name, "pruned")
        last = max(steps)
        metric = self.study.objectives[0].metric
        self.told[trial.name] = entry = told_entry(
            trial,
            "pruned",
            None,
            steps,
            step=last,
            value=steps[last],
            result={metric: steps[last], "step": last},
            gpu_seconds=round(gpu_seconds, 1),
            at=round(at, 3),
        )
        return entry
