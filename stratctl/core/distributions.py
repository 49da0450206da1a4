"""The search space's distributions (`choice`, `uniform`, `loguniform`, `int`) and the
strategy that draws from them."""

from __future__ import annotations

import importlib.util
import math
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from stratctl.core import sandbox
from stratctl.core.model import Model as _Model
from stratctl.core.model import invalid as _bad

Scalar = bool | int | float | str


class Choice(_Model):
    """One of a list of values; enumerable, so usable in a grid."""

    type: Literal["choice"]
    values: list[Scalar] = Field(min_length=1)
    grid: bool = False

    @field_validator("values")
    @classmethod
    def _plain(cls, values: list[Scalar]) -> list[Scalar]:
        for v in values:
            if isinstance(v, str) and sandbox.is_template(v):
                raise _bad("template_value", "parameter values may not contain template delimiters: {v!r}", v=v)
            if isinstance(v, float) and not math.isfinite(v):
                raise _bad("not_finite", "parameter values must be finite numbers")
        return values

    def grid_values(self) -> list[Scalar]:
        return list(self.values)


class Uniform(_Model):
    """A float drawn uniformly from [low, high]; `grid: N` gives N evenly spaced points."""

    type: Literal["uniform"]
    low: float = Field(allow_inf_nan=False)
    high: float = Field(allow_inf_nan=False)
    grid: int | None = Field(default=None, ge=2, le=100_000, strict=True)

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.low >= self.high:
            raise _bad("bounds", "low ({low}) must be below high ({high})", field="low", low=self.low, high=self.high)
        return self

    def grid_values(self) -> list[float]:
        n = self.grid or 0
        return [self.low + (self.high - self.low) * i / (n - 1) for i in range(n)]


class LogUniform(Uniform):
    """A positive float whose logarithm is uniform in [log low, log high]."""

    type: Literal["loguniform"]  # type: ignore[assignment]

    @model_validator(mode="after")
    def _positive(self) -> Self:
        if self.low <= 0:
            raise _bad("bounds", "loguniform needs low > 0 (got {low})", field="low", low=self.low)
        return self

    def grid_values(self) -> list[float]:
        n = self.grid or 0
        lo, hi = math.log(self.low), math.log(self.high)
        return [math.exp(lo + (hi - lo) * i / (n - 1)) for i in range(n)]


class IntRange(_Model):
    """An integer in [low, high] (both included) on a `step` lattice starting at low."""

    type: Literal["int"]
    low: int
    high: int
    step: int = Field(default=1, ge=1)
    grid: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.low > self.high:
            raise _bad(
                "bounds", "low ({low}) must not be above high ({high})", field="low", low=self.low, high=self.high
            )
        return self

    @property
    def size(self) -> int:
        return (self.high - self.low) // self.step + 1

    def grid_values(self) -> range:
        return range(self.low, self.high + 1, self.step)


Param = Annotated[Choice | Uniform | LogUniform | IntRange, Field(discriminator="type")]


def grid_size(param: Choice | Uniform | LogUniform | IntRange) -> int:
    """How many values a parameter contributes to a grid (computed, never materialised)."""
    if isinstance(param, Choice):
        return len(param.values)
    if isinstance(param, IntRange):
        return param.size
    return param.grid or 0


def in_grid(param: Choice | Uniform | LogUniform | IntRange) -> bool:
    return bool(param.grid)


#: Strategies that choose each trial from the results of finished ones (core/search.py).
CLOSED_LOOP = ("tpe", "gp", "cmaes", "nsga2")
#: Of those, the ones that optimise one objective only.
SINGLE_OBJECTIVE = ("cmaes",)
#: What each needs beyond the default install: (module, what to install), Optuna first.
_NEEDS = {
    "tpe": (("optuna", "stratctl[search]"),),
    "nsga2": (("optuna", "stratctl[search]"),),
    "cmaes": (("optuna", "stratctl[search]"), ("cmaes", "stratctl[search]")),
    "gp": (("optuna", "stratctl[search]"), ("torch", "stratctl[gp]"), ("scipy", "stratctl[gp]")),
}


def missing(kind: str) -> str | None:
    """What to install for strategy `kind`, or None when everything it needs is importable."""
    for module, extra in _NEEDS.get(kind, ()):
        if importlib.util.find_spec(module) is None:
            return f"strategy {kind!r} needs the Python package {module!r}: pip install '{extra}'"
    return None


class Strategy(_Model):
    kind: Literal["grid", "random", "quasi-random", "tpe", "gp", "cmaes", "nsga2"]
    seed: int = 0
    trials: int | None = Field(default=None, ge=1)

    @property
    def closed_loop(self) -> bool:
        """Whether trials are asked of a sampler as results come in (not expanded up front)."""
        return self.kind in CLOSED_LOOP

    @model_validator(mode="after")
    def _trials(self) -> Self:
        if self.kind == "grid" and self.trials is not None:
            raise _bad("grid_trials", "the grid strategy takes every combination; remove 'trials'", field="trials")
        if self.kind != "grid" and self.trials is None:
            raise _bad("missing_trials", "strategy {kind!r} needs 'trials' (how many to sample)", kind=self.kind)
        return self


class Objective(_Model):
    """A result metric the search optimises: `{metric: loss, direction: minimize}`."""

    metric: str = Field(min_length=1)
    direction: Literal["minimize", "maximize"] = "minimize"


class Pruner(_Model):
    """Stops a closed-loop search's trials early from their intermediate values (`stratctl
    report`): Optuna's median, successive-halving (ASHA) or Hyperband pruner."""

    kind: Literal["median", "successive-halving", "hyperband"]
    # median: trials that end before any is judged, and steps of a trial before it is
    startup_trials: int = Field(default=5, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    # successive-halving and hyperband: the steps a trial gets before its first judgement,
    # the steps a whole trial runs (hyperband), and the share kept at each rung (1 in N)
    min_steps: int = Field(default=1, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    reduction_factor: int = Field(default=3, ge=2)

    @model_validator(mode="after")
    def _fields(self) -> Self:
        if self.kind == "hyperband" and self.max_steps is None:
            raise _bad(
                "max_steps",
                "the hyperband pruner needs 'max_steps' (the steps a whole trial reports)",
                field="max_steps",
            )
        if self.max_steps is not None and self.max_steps < self.min_steps:
            raise _bad(
                "max_steps",
                "max_steps ({a}) is below min_steps ({b})",
                field="max_steps",
                a=self.max_steps,
                b=self.min_steps,
            )
        return self
