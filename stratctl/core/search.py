"""Closed-loop search: the next trials chosen from the results of finished ones.

A study whose `strategy.kind` is `tpe`, `gp`, `cmaes` or `nsga2` is not expanded up
front: each cycle the submit loop asks a `Searcher` for as many trials as the policy
admits, and tells it each trial's result as it ends. The sampler is Optuna's (its
ask-and-tell interface), run in memory.

**The cluster is the source of truth.** No database: a `Searcher` is built from the
study's history as the cluster shows it (each trial's parameters from its jobs, its
result or failure from its pods and the study record), every time a loop starts. So a
loop killed with -9 and started again, on any machine, continues the same search: the
trials already created are in the history (finished ones with their values, the others
as running), none is asked again, and the budget (`strategy.trials`) counts them.

**Parallel asks differ.** Trials asked while others run would all land on the same
point if the sampler saw only finished trials. TPE runs with `constant_liar` (a running
trial counts as a bad result near its point, so the next ask goes elsewhere); the other
samplers see running trials as running. Each rebuild seeds the sampler with the study's
seed plus the size of the history, so a loop that restarts does not replay the random
draws of the one before it. A point that still comes out as an existing trial's (a
small discrete space) is asked again a few times, then the first point of the space not
tried yet is taken; the space is spent when there is none.

Optuna is an optional dependency (`pip install 'stratctl[search]'`; `gp` also needs
PyTorch and SciPy): a study that needs it without it installed is refused when it is
read, with the line that says what to install (`distributions.missing`).

`first(study)` is what `plan`, `render` and `validate` show of such a study: the trials
its search would ask first, from no history (what a first `submit` asks, with the same
seed, while nothing has ended).
"""

from __future__ import annotations

import itertools
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratctl.core.digest import param_hash
from stratctl.core.distributions import Choice, IntRange, LogUniform, grid_size
from stratctl.core.spec import Study

ASKS_PER_TRIAL = 8  # how often a point that is an existing trial's is asked again
SMALL = 100_000  # a discrete space of at most this many points is walked for one not tried yet


@dataclass(frozen=True)
class Told:
    """One trial of the history: its parameters and how it ended (or that it has not)."""

    name: str
    params: Mapping[str, Any]
    state: str  # "complete" | "failed" | "pruned" | "running"
    values: tuple[float, ...] | None = None  # one per objective, when complete
    steps: Mapping[int, float] = field(default_factory=dict)  # intermediate values (step → value)


def values_of(result: Mapping[str, Any] | None, study: Study) -> tuple[float, ...] | None:
    """The objective values in a trial's result, or None when one is missing or not a number."""
    if not result:
        return None
    out = []
    for objective in study.objectives:
        value = result.get(objective.metric)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return None
        out.append(float(value))
    return tuple(out)


class Searcher:
    """Asks the next trials of a closed-loop study, given its history so far."""

    def __init__(self, study: Study, history: Sequence[Told]):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self.study = study
        self.budget = study.strategy.trials or 0
        self.distributions = {name: _distribution(optuna, p) for name, p in study.space.items()}
        self.names: dict[str, int] = {}  # trial name -> Optuna trial number
        self._running: set[str] = set()  # trials not told yet (asked here, or running when rebuilt)
        seed = study.strategy.seed + len(history)
        directions = [o.direction for o in study.objectives]
        with warnings.catch_warnings():  # multivariate TPE is "experimental" in Optuna's words
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = _sampler(optuna, study.strategy.kind, seed)
        self.optuna_study = optuna.create_study(
            sampler=sampler, directions=directions, pruner=_pruner(optuna, study.pruner)
        )
        self._reported: dict[str, set[int]] = {}  # trial -> steps told to the pruner
        for told in history:
            self._add(told)

    @property
    def size(self) -> int:
        """Trials in the history (asked here included)."""
        return len(self.names)

    @property
    def remaining(self) -> int:
        return max(0, self.budget - self.size)

    def ask(self, n: int) -> list[tuple[str, dict[str, Any]]]:
        """Up to `n` new trials (name, params), never beyond the budget, never one that exists."""
        out: list[tuple[str, dict[str, Any]]] = []
        for _ in range(min(n, self.remaining)):
            asked = self._ask_new()
            if asked is None:  # the space has no point left that is not a trial already
                break
            out.append(asked)
        return out

    def tell(self, name: str, state: str, values: tuple[float, ...] | None = None) -> None:
        """A running trial ended: complete (with its values), failed or pruned. A trial
        not running here (unknown, or told already) is left as it is."""
        if name not in self._running:
            return
        self._running.discard(name)
        number = self.names[name]
        TrialState = self._optuna.trial.TrialState
        if state == "complete" and values is not None:
            self.optuna_study.tell(number, list(values) if len(values) > 1 else values[0])
        elif state == "pruned":
            self.optuna_study.tell(number, state=TrialState.PRUNED)
        else:
            self.optuna_study.tell(number, state=TrialState.FAIL)

    def report(self, name: str, steps: Mapping[int, float]) -> bool:
        """A running trial's intermediate values (step → value of the objective) so far;
        whether the pruner says to stop it now. Steps told before are not told again."""
        if name not in self._running or self.study.pruner is None:
            return False
        seen = self._reported.setdefault(name, set())
        new = sorted(step for step in steps if step not in seen)
        if not new:
            return False
        trial = self._trial(name)
        for step in new:
            trial.report(float(steps[step]), step)
            seen.add(step)
        return bool(trial.should_prune())

    def _trial(self, name: str) -> Any:
        """The live Optuna trial of a running trial (asked here or running when rebuilt)."""
        number = self.names[name]
        frozen = self.optuna_study.get_trials(deepcopy=False)[number]
        return self._optuna.trial.Trial(self.optuna_study, frozen._trial_id)

    def _ask_new(self) -> tuple[str, dict[str, Any]] | None:
        TrialState = self._optuna.trial.TrialState
        for _ in range(ASKS_PER_TRIAL):
            trial = self.optuna_study.ask(self.distributions)
            params = {name: _plain(trial.params[name]) for name in self.study.space}
            name = f"{self.study.name}-{param_hash(params)}"
            if name not in self.names:
                self.names[name] = trial.number
                self._running.add(name)
                return name, params
            # an existing trial's point: drop this ask, and try again
            self.optuna_study.tell(trial, state=TrialState.FAIL)
        unused = self._unused()
        if unused is None:
            return None
        # a small discrete space the sampler keeps coming back to: its first point not tried yet
        self.optuna_study.enqueue_trial(unused)
        trial = self.optuna_study.ask(self.distributions)
        name = f"{self.study.name}-{param_hash(unused)}"
        self.names[name] = trial.number
        self._running.add(name)
        return name, dict(unused)

    def _unused(self) -> dict[str, Any] | None:
        """The first point of a discrete space (every parameter a choice or an int) that is
        no trial yet, in grid order; None when every point is one, or the space is continuous
        or too large to walk."""
        space = self.study.space.values()
        if not all(isinstance(p, Choice | IntRange) for p in space) or math.prod(grid_size(p) for p in space) > SMALL:
            return None
        for point in itertools.product(*(p.grid_values() for p in space)):
            params = {name: _plain(v) for name, v in zip(self.study.space, point)}
            if f"{self.study.name}-{param_hash(params)}" not in self.names:
                return params
        return None

    def _add(self, told: Told) -> None:
        if told.name in self.names:
            return
        optuna = self._optuna
        TrialState = optuna.trial.TrialState
        params = {k: told.params[k] for k in self.study.space if k in told.params}
        distributions = {k: self.distributions[k] for k in params}
        if set(params) != set(self.distributions) or not all(_fits(self.study.space[k], v) for k, v in params.items()):
            # a trial of an earlier version of the space: counted, not learnt from
            state, values, params, distributions = "failed", None, {}, {}
        else:
            state, values = told.state, told.values
        if state == "complete" and values is not None:
            frozen = optuna.trial.create_trial(
                params=params, distributions=distributions, values=list(values), intermediate_values=dict(told.steps)
            )
        else:
            frozen = optuna.trial.create_trial(
                params=params,
                distributions=distributions,
                intermediate_values=dict(told.steps),
                state={"running": TrialState.RUNNING, "pruned": TrialState.PRUNED}.get(state, TrialState.FAIL),
            )
        self.optuna_study.add_trial(frozen)
        self.names[told.name] = self.optuna_study.get_trials(deepcopy=False)[-1].number
        if frozen.state == TrialState.RUNNING:
            self._running.add(told.name)
            self._reported[told.name] = set(frozen.intermediate_values)


def distributions(study: Study) -> dict[str, Any]:
    """Optuna's distribution of each parameter of the study's space."""
    import optuna

    return {name: _distribution(optuna, p) for name, p in study.space.items()}


def in_space(study: Study, params: Mapping[str, Any]) -> bool:
    """Whether `params` is a point of the study's space as it is now (every parameter, each in range)."""
    return set(params) == set(study.space) and all(_fits(study.space[k], v) for k, v in params.items())


def _distribution(optuna: Any, param: Any) -> Any:
    d = optuna.distributions
    if isinstance(param, Choice):
        return d.CategoricalDistribution([_plain(v) for v in param.values])
    if isinstance(param, IntRange):
        high = param.low + param.step * (param.size - 1)  # the lattice's last point
        return d.IntDistribution(param.low, high, step=param.step)
    return d.FloatDistribution(param.low, param.high, log=isinstance(param, LogUniform))


def _pruner(optuna: Any, pruner: Any) -> Any:
    p = optuna.pruners
    if pruner is None:
        return p.NopPruner()
    if pruner.kind == "median":
        return p.MedianPruner(n_startup_trials=pruner.startup_trials, n_warmup_steps=pruner.warmup_steps)
    if pruner.kind == "successive-halving":
        return p.SuccessiveHalvingPruner(min_resource=pruner.min_steps, reduction_factor=pruner.reduction_factor)
    return p.HyperbandPruner(
        min_resource=pruner.min_steps, max_resource=pruner.max_steps, reduction_factor=pruner.reduction_factor
    )


def _sampler(optuna: Any, kind: str, seed: int) -> Any:
    s = optuna.samplers
    if kind == "tpe":
        return s.TPESampler(seed=seed, constant_liar=True, multivariate=True, group=True)
    if kind == "nsga2":
        return s.NSGAIISampler(seed=seed)
    if kind == "cmaes":
        return s.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if kind == "gp":
        return s.GPSampler(seed=seed)
    raise ValueError(f"not a closed-loop strategy: {kind!r}")


def _fits(param: Any, value: Any) -> bool:
    """Whether a value of an earlier trial lies in the parameter's distribution now."""
    if isinstance(param, Choice):
        return any(value == v and type(value) is type(v) for v in param.values) or (
            isinstance(value, float) and value in [v for v in param.values if isinstance(v, int | float)]
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(param, IntRange):
        return isinstance(value, int) and param.low <= value <= param.high and (value - param.low) % param.step == 0
    return bool(param.low <= value <= param.high)


def _plain(value: Any) -> Any:
    """JSON scalars only (the parameter hash must not see numpy's types)."""
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value)


def first(study: Study) -> list[tuple[str, dict[str, Any]]]:
    """The trials a search asks first, before any has ended: as many as the study starts
    with in flight (`throttle.parallelism.initial`), within the budget."""
    return Searcher(study, []).ask(min(study.strategy.trials or 0, study.throttle.parallelism.initial))
