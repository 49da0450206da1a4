"""Trial expansion: deterministic names and sane distributions."""

from __future__ import annotations

import math
import re
import statistics

import pytest

from stratctl.core.digest import param_hash
from stratctl.core.space import Trial, attempt_name, expand, size
from stratctl.errors import StudyError
from tests.unit.studies import MINIMAL, load

DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def study_with(tmp_path, space: str, strategy: str = "{kind: random, seed: 1, trials: 2000}", name: str = "tiny"):
    text = f"""\
name: {name}
space:
{space}
strategy: {strategy}
trial: {{image: busybox}}
"""
    return load(tmp_path, text)


def test_same_file_and_seed_give_the_same_trials(tmp_path):
    a = expand(load(tmp_path, MINIMAL))
    b = expand(load(tmp_path, MINIMAL))
    assert a == b
    assert [t.name for t in a] == [t.name for t in b]


def test_another_seed_gives_other_trials(tmp_path):
    a = expand(load(tmp_path, MINIMAL))
    b = expand(load(tmp_path, MINIMAL.replace("seed: 3", "seed: 4")))
    assert {t.name for t in a}.isdisjoint({t.name for t in b})


def test_names_are_study_plus_param_hash_and_fit_with_attempts(tmp_path):
    study = study_with(tmp_path, "  x: {type: uniform, low: 0, high: 1}", name="a" * 40)
    for t in expand(study)[:50]:
        assert t.name == f"{study.name}-{param_hash(t.params)}"
        assert DNS.match(t.name)
        assert len(attempt_name(t, 999)) <= 63
        assert DNS.match(attempt_name(t, 12))


def test_attempt_names():
    t = Trial(0, "s-0123456789", {"x": 1}, "0123456789")
    assert attempt_name(t, 0) == "s-0123456789"
    assert attempt_name(t, 1) == "s-0123456789-a1"
    assert attempt_name(t, 17) == "s-0123456789-a17"


def test_param_hash_ignores_key_order():
    assert param_hash({"a": 1, "b": 0.5}) == param_hash({"b": 0.5, "a": 1})
    assert param_hash({"a": 1}) != param_hash({"a": 2})
    assert param_hash({"a": 1}) != param_hash({"a": "1"})


def test_uniform_stays_in_bounds_and_spreads(tmp_path):
    xs = [t.params["x"] for t in expand(study_with(tmp_path, "  x: {type: uniform, low: -2, high: 3}"))]
    assert all(-2 <= x <= 3 for x in xs)
    assert abs(statistics.mean(xs) - 0.5) < 0.15
    assert min(xs) < -1.9 and max(xs) > 2.9


def test_loguniform_is_uniform_in_log_space(tmp_path):
    xs = [t.params["x"] for t in expand(study_with(tmp_path, "  x: {type: loguniform, low: 1.0e-5, high: 1.0e-1}"))]
    assert all(1e-5 <= x <= 1e-1 for x in xs)
    decades = [sum(1 for x in xs if 10 ** (k - 5) <= x < 10 ** (k - 4)) for k in range(4)]
    # each of the 4 decades holds about a quarter of the samples
    assert all(400 < n < 600 for n in decades), decades


def test_int_respects_step_and_covers_the_lattice(tmp_path):
    xs = [
        t.params["x"]
        for t in expand(
            study_with(tmp_path, "  x: {type: int, low: 3, high: 19, step: 4}", "{kind: random, seed: 1, trials: 200}")
        )
    ]
    # 200 draws from 5 values: duplicates are merged into one trial each
    assert sorted(xs) == [3, 7, 11, 15, 19]
    assert all(isinstance(x, int) for x in xs)


def test_choice_covers_every_value_and_keeps_types(tmp_path):
    study = study_with(
        tmp_path,
        "  x: {type: choice, values: [adam, 0.5, 3, true]}\n  y: {type: uniform, low: 0, high: 1}",
        "{kind: random, seed: 9, trials: 400}",
    )
    xs = [t.params["x"] for t in expand(study)]
    assert set(map(repr, xs)) == {"'adam'", "0.5", "3", "True"}


def test_duplicates_are_merged_and_counted(tmp_path):
    study = study_with(tmp_path, "  x: {type: choice, values: [a, b, c]}", "{kind: random, seed: 1, trials: 10}")
    trials = expand(study)
    assert size(study) == 10
    assert sorted(t.params["x"] for t in trials) == ["a", "b", "c"]
    assert [t.index for t in trials] == [0, 1, 2]


def test_grid_is_the_cartesian_product_in_file_order(tmp_path):
    study = study_with(
        tmp_path,
        "  a: {type: choice, values: [x, y]}\n"
        "  b: {type: int, low: 1, high: 3}\n"
        "  c: {type: uniform, low: 0, high: 1, grid: 3}",
        "{kind: grid}",
    )
    trials = expand(study)
    assert size(study) == len(trials) == 2 * 3 * 3
    assert [dict(t.params) for t in trials[:4]] == [
        {"a": "x", "b": 1, "c": 0.0},
        {"a": "x", "b": 1, "c": 0.5},
        {"a": "x", "b": 1, "c": 1.0},
        {"a": "x", "b": 2, "c": 0.0},
    ]


def test_loguniform_grid_is_evenly_spaced_in_log_space(tmp_path):
    study = study_with(tmp_path, "  lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2, grid: 3}", "{kind: grid}")
    assert [t.params["lr"] for t in expand(study)] == pytest.approx([1e-4, 1e-3, 1e-2])


def test_grid_parameters_cross_random_samples(tmp_path):
    study = study_with(
        tmp_path,
        "  seed: {type: choice, values: [1, 2, 3], grid: true}\n  lr: {type: uniform, low: 0, high: 1}",
        "{kind: random, seed: 5, trials: 4}",
    )
    trials = expand(study)
    assert len(trials) == size(study) == 12
    assert [t.params["seed"] for t in trials] == [1] * 4 + [2] * 4 + [3] * 4


def test_huge_grid_is_refused_without_being_built(tmp_path, monkeypatch):
    study = study_with(
        tmp_path, "\n".join(f"  p{i}: {{type: int, low: 1, high: 1000}}" for i in range(3)), "{kind: grid}"
    )
    assert size(study) == 10**9

    def enumerate_(*args):
        raise AssertionError("the grid was enumerated")

    monkeypatch.setattr("stratctl.core.space._combinations", enumerate_)
    with pytest.raises(StudyError) as e:
        expand(study)
    [p] = e.value.problems
    assert str(p).endswith(
        "study.yaml:6:11: the study expands to 1,000,000,000 trials, above the limit of 100,000; "
        "narrow the space or lower strategy.trials"
    )


def test_too_many_random_trials_point_at_the_trial_count(tmp_path):
    study = study_with(tmp_path, "  x: {type: uniform, low: 0, high: 1}", "{kind: random, seed: 1, trials: 200000}")
    with pytest.raises(StudyError) as e:
        expand(study)
    assert ":4:43: the study expands to 200,000 trials" in str(e.value)
    assert len(expand(study, limit=300_000)) == 200_000


def test_quasi_random_is_deterministic_and_even(tmp_path):
    space = "  x: {type: uniform, low: 0, high: 1}\n  y: {type: loguniform, low: 1, high: 100}"
    a = expand(study_with(tmp_path, space, "{kind: quasi-random, seed: 11, trials: 256}"))
    b = expand(study_with(tmp_path, space, "{kind: quasi-random, seed: 11, trials: 256}"))
    assert a == b
    xs = sorted(t.params["x"] for t in a)
    # a low-discrepancy set: every 1/16 bin of [0, 1) holds 16 ± 2 of the 256 points
    bins = [sum(1 for x in xs if k / 16 <= x < (k + 1) / 16) for k in range(16)]
    assert all(14 <= n <= 18 for n in bins), bins
    assert all(1 <= t.params["y"] <= 100 for t in a)


def test_quasi_random_differs_from_random(tmp_path):
    space = "  x: {type: uniform, low: 0, high: 1}"
    q = expand(study_with(tmp_path, space, "{kind: quasi-random, seed: 1, trials: 8}"))
    r = expand(study_with(tmp_path, space, "{kind: random, seed: 1, trials: 8}"))
    assert [t.name for t in q] != [t.name for t in r]


def test_params_are_plain_json_scalars(tmp_path):
    study = study_with(
        tmp_path,
        "  x: {type: uniform, low: 0, high: 1}\n  n: {type: int, low: 0, high: 9}",
        "{kind: quasi-random, seed: 1, trials: 8}",
    )
    for t in expand(study):
        assert type(t.params["x"]) is float and type(t.params["n"]) is int
        assert not math.isnan(t.params["x"])
