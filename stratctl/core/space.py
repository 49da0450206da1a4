"""The search space: which trials a study expands to, deterministically.

The same study file (and seed) always gives the same trials in the same order with the
same names, so re-running `submit` after a crash finds the trials it already created.
A trial's name is the study name plus a short hash of its parameters; combinations that
come out twice are one trial.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from stratctl.core import sobol
from stratctl.core.digest import param_hash
from stratctl.core.distributions import Choice, IntRange, grid_size, in_grid
from stratctl.core.spec import Study
from stratctl.errors import Problem, StudyError

DEFAULT_LIMIT = 100_000


@dataclass(frozen=True)
class Trial:
    index: int
    name: str  # DNS-1123 label: "<study>-<param hash>"
    params: Mapping[str, Any]
    param_hash: str


def attempt_name(trial: Trial, attempt: int) -> str:
    """The job name of an attempt: the trial name, then `-a1`, `-a2`, ... for re-submissions."""
    return trial.name if attempt == 0 else f"{trial.name}-a{attempt}"


def size(study: Study) -> int:
    """How many combinations the strategy draws (before duplicates are merged), computed
    from the space alone so that a grid of 10^9 is refused without being built."""
    grid = [p for p in study.space.values() if study.strategy.kind == "grid" or in_grid(p)]
    n = math.prod(grid_size(p) for p in grid)
    if study.strategy.kind != "grid" and len(grid) < len(study.space):
        n *= study.strategy.trials or 0
    return n


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """Keep the cyclic garbage collector out of the building of many acyclic objects.

    Trials and manifests are trees: the collector finds nothing in them, yet with 10^6
    fresh dicts it runs hundreds of passes, a third of the time of a 10,000-trial
    render, and one more long pass when re-enabled. So it is paused meanwhile, and what
    was built (the results, meant to live on) is moved to the permanent generation
    (gc.freeze) rather than rescanned by later collections. Reference counting still
    frees all of it as usual.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.enable()


def expand(study: Study, limit: int = DEFAULT_LIMIT) -> list[Trial]:
    """The study's trials, in a stable order, duplicates merged; refuses more than `limit`.

    A closed-loop search (`strategy.closed_loop`) chooses its trials as results come in:
    its expansion is the trials it would ask first (core/search.py: `first`)."""
    if study.strategy.closed_loop:
        from stratctl.core.search import first  # Optuna is imported only for such studies

        return [
            Trial(i, name, MappingProxyType(params), name.rsplit("-", 1)[-1])
            for i, (name, params) in enumerate(first(study))
        ]
    with bulk():
        return _expand(study, limit)


def _expand(study: Study, limit: int) -> list[Trial]:
    n = size(study)
    if n > limit:
        field = ("strategy",) if study.strategy.kind == "grid" else ("strategy", "trials")
        raise StudyError(
            [
                _problem(
                    study,
                    field,
                    f"the study expands to {n:,} trials, above the limit of {limit:,}; "
                    "narrow the space or lower strategy.trials",
                )
            ]
        )
    trials: list[Trial] = []
    seen: dict[str, Mapping[str, Any]] = {}
    for params in _combinations(study):
        h = param_hash(params)
        if h in seen:
            if seen[h] != params:  # two different combinations, one hash: never silently merge
                raise StudyError([_problem(study, ("space",), f"parameter hash collision ({h}); rename a parameter")])
            continue
        seen[h] = params
        trials.append(Trial(len(trials), f"{study.name}-{h}", MappingProxyType(params), h))
    return trials


def corners(study: Study) -> list[Trial]:
    """Two trials at the space's far corners (every parameter at its low end, then at its
    high end): what a template renders of any point lies between them, so a check that
    holds for both (and for the first trials) holds for the trials a search asks later."""
    out = []
    for i, u in enumerate((0.0, 1.0 - 1e-9)):
        params = {k: _plain(_sampler(p)(u)) for k, p in study.space.items()}
        h = param_hash(params)
        out.append(Trial(-1 - i, f"{study.name}-{h}", MappingProxyType(params), h))
    return out


def _problem(study: Study, path: tuple[Any, ...], message: str) -> Problem:
    locate = getattr(study, "problem", None)
    if locate is not None:
        found: Problem = locate(path, message)
        return found
    return Problem(str(study.source or "<study>"), None, None, message)


def _combinations(study: Study) -> Iterator[dict[str, Any]]:
    kind = study.strategy.kind
    names = list(study.space)
    gridded = [k for k in names if kind == "grid" or in_grid(study.space[k])]
    sampled = [k for k in names if k not in gridded]
    points = itertools.product(*(list(study.space[k].grid_values()) for k in gridded))
    if not sampled:
        for point in points:
            yield {k: _plain(v) for k, v in zip(gridded, point)}
        return
    count = study.strategy.trials or 0
    if kind == "random":
        rng = random.Random(study.strategy.seed)
        draws: Sequence[Sequence[float]] | None = None
    else:
        rng = None
        if study.strategy.seed < 0:
            raise StudyError(
                [
                    _problem(
                        study,
                        ("strategy", "seed"),
                        "strategy.seed: the quasi-random strategy "
                        f"needs a seed of 0 or more (got {study.strategy.seed})",
                    )
                ]
            )
        draws = _quasi_random(len(sampled), count, study.strategy.seed)
    samplers = [(k, _sampler(study.space[k])) for k in sampled]
    uniform = rng.random if rng is not None else None
    for point in points:
        fixed = {k: _plain(v) for k, v in zip(gridded, point)}
        for i in range(count):
            if draws is not None:
                units = draws[i]
            else:
                assert uniform is not None  # drawn at random: the generator is there
                units = [uniform() for _ in samplers]
            drawn = {k: sample(u) for (k, sample), u in zip(samplers, units)}
            params = {**fixed, **drawn}
            yield {k: params[k] for k in names}  # file order, whatever was gridded


def _quasi_random(dims: int, n: int, seed: int) -> list[list[float]]:
    # Sobol's balance is best at powers of two; any n is still a low-discrepancy set.
    return sobol.points(dims, n, seed)


def _sampler(param: Any) -> Callable[[float], Any]:
    """A function mapping u in [0, 1) onto the parameter's distribution."""
    if isinstance(param, Choice):
        values = [_plain(v) for v in param.values]
        n = len(values)
        return lambda u: values[min(int(u * n), n - 1)]
    if isinstance(param, IntRange):
        low, step, n = param.low, param.step, param.size
        return lambda u: low + step * min(int(u * n), n - 1)
    low, high = param.low, param.high
    if param.type == "loguniform":
        lo, span, exp = math.log(low), math.log(high) - math.log(low), math.exp
        return lambda u: min(max(exp(lo + span * u), low), high)
    return lambda u: low + (high - low) * u


def _plain(value: Any) -> Any:
    # Keep the hash stable: only JSON scalars, never numpy types.
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    return float(value)
