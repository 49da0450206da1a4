"""The quasi-random strategy's Sobol' points: identical to SciPy's, without SciPy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import qmc

from stratctl.core import sobol


def _scipy(dims: int, n: int, seed: int) -> list[list[float]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return qmc.Sobol(d=dims, scramble=True, seed=seed).random(n).tolist()


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 2**32 + 5, 2**70 + 11])
def test_the_random_bits_are_numpys(seed):
    assert sobol._seed_sequence(seed, 8) == np.random.SeedSequence(seed).generate_state(8).tolist()
    bits = sobol._Bits(seed)
    assert [bits.next() for _ in range(999)] == np.random.default_rng(seed).integers(
        0, 2, size=999, dtype=np.uint32
    ).tolist()


@pytest.mark.parametrize(
    "dims, n, seed",
    [
        (1, 1, 0),
        (1, 7, 3),
        (2, 64, 0),
        (3, 32, 7),
        (4, 100, 42),
        (5, 1000, 123456789),
        (13, 257, 2**40 + 1),
        (sobol.MAX_DIMS, 65, 9),
    ],
)
def test_points_are_exactly_scipys(dims, n, seed):
    assert sobol.points(dims, n, seed) == _scipy(dims, n, seed)


def test_more_dimensions_than_the_table_still_match():
    assert sobol.points(sobol.MAX_DIMS + 2, 9, 5) == _scipy(sobol.MAX_DIMS + 2, 9, 5)


def test_no_points():
    assert sobol.points(3, 0, 1) == []


def test_a_negative_seed_is_a_located_problem(tmp_path):
    from stratctl.core.space import expand
    from stratctl.errors import StudyError
    from tests.unit.studies import MINIMAL, load

    study = load(tmp_path, MINIMAL.replace("kind: random, seed: 3", "kind: quasi-random, seed: -3"))
    with pytest.raises(StudyError) as e:
        expand(study)
    [p] = e.value.problems
    assert (p.line, p.message) == (6, "strategy.seed: the quasi-random strategy needs a seed of 0 or more (got -3)")
