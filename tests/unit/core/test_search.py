"""Closed-loop strategies (core/search.py): the study fields, and the Searcher's asks
rebuilt from a history as the cluster would show it."""

from __future__ import annotations

import importlib.util

import pytest

from stratctl.core import distributions
from stratctl.core.distributions import missing
from stratctl.core.search import Searcher, Told, values_of
from tests.unit.studies import load, problems

TPE = """\
name: tpe
namespace: ns
space:
  x: {type: uniform, low: -5, high: 5}
  opt: {type: choice, values: [adam, sgd]}
strategy: {kind: tpe, trials: 12, seed: 1}
objective: {metric: loss, direction: minimize}
trial:
  image: busybox
  tasks: [{name: w, replicas: 1}]
"""


def with_(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


# ---------------------------------------------------------------- the study fields


def test_a_closed_loop_strategy_needs_an_objective(tmp_path):
    text = with_(TPE, "objective: {metric: loss, direction: minimize}\n", "")
    assert problems(tmp_path, text) == [
        "study.yaml:6:18: strategy.kind: strategy 'tpe' chooses trials from results: it needs 'objective' "
        "(e.g. objective: {metric: loss, direction: minimize})"
    ]


def test_cmaes_takes_one_objective_and_metrics_are_not_repeated(tmp_path):
    two = with_(
        TPE,
        "objective: {metric: loss, direction: minimize}",
        "objective: [{metric: loss}, {metric: latency, direction: maximize}]",
    )
    assert problems(tmp_path, with_(two, "kind: tpe", "kind: cmaes")) == [
        "study.yaml:7:12: objective: strategy 'cmaes' optimises one objective; 2 are given (use tpe or nsga2 "
        "for several)"
    ]
    assert load(tmp_path, with_(two, "kind: tpe", "kind: nsga2")).objectives[1].direction == "maximize"
    same = with_(TPE, "objective: {metric: loss, direction: minimize}", "objective: [{metric: loss}, {metric: loss}]")
    assert problems(tmp_path, same) == ["study.yaml:7:38: objective.1.metric: metric 'loss' is listed twice"]


def test_a_closed_loop_strategy_refuses_grid_points(tmp_path):
    text = with_(TPE, "x: {type: uniform, low: -5, high: 5}", "x: {type: uniform, low: -5, high: 5, grid: 3}")
    assert problems(tmp_path, text) == [
        "study.yaml:4:46: space.x.grid: strategy 'tpe' chooses every value of 'x' itself: remove 'grid'"
    ]


def test_an_unknown_direction_is_located(tmp_path):
    text = with_(TPE, "direction: minimize", "direction: lowest")
    assert problems(tmp_path, text) == ["study.yaml:7:38: objective.direction: must be one of 'minimize' or 'maximize'"]
    assert problems(tmp_path, with_(TPE, "objective: {metric: loss, direction: minimize}", "objective: []")) == [
        "study.yaml:7:12: objective: give a metric ({metric: loss, direction: minimize}) or a non-empty list of them"
    ]
    assert problems(
        tmp_path, with_(TPE, "objective: {metric: loss, direction: minimize}", "objective: [{metric: loss}, 4]")
    ) == ["study.yaml:7:29: objective.1: expected a mapping like {metric: loss, direction: minimize}, got 4"]


def test_missing_packages_are_named_with_what_to_install(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    gone = {"optuna", "torch"}
    monkeypatch.setattr(
        distributions.importlib.util, "find_spec", lambda name, *a: None if name in gone else real(name, *a)
    )
    assert missing("tpe") == "strategy 'tpe' needs the Python package 'optuna': pip install 'stratctl[search]'"
    # refused when the study is read: located, so validate, plan and submit say it before anything
    assert problems(tmp_path, TPE) == [
        "study.yaml:6:18: strategy.kind: strategy 'tpe' needs the Python package 'optuna': "
        "pip install 'stratctl[search]'"
    ]
    gone.discard("optuna")
    assert missing("tpe") is None
    assert missing("gp") == "strategy 'gp' needs the Python package 'torch': pip install 'stratctl[gp]'"
    assert missing("random") is None


def test_values_of_reads_each_objective_from_a_result(tmp_path):
    study = load(
        tmp_path,
        with_(
            TPE,
            "objective: {metric: loss, direction: minimize}",
            "objective: [{metric: loss}, {metric: acc, direction: maximize}]",
        ),
    )
    assert values_of({"loss": 0.5, "acc": 1, "other": "x"}, study) == (0.5, 1.0)
    assert values_of({"loss": 0.5}, study) is None  # one missing: not a result of this search
    assert values_of({"loss": float("nan"), "acc": 1}, study) is None
    assert values_of({"loss": True, "acc": 1}, study) is None
    assert values_of(None, study) is None


# ---------------------------------------------------------------- asking


def test_parallel_asks_differ_and_the_budget_holds(tmp_path):
    study = load(tmp_path, TPE)
    searcher = Searcher(study, [])
    first = searcher.ask(5)
    assert len(first) == 5 and len({name for name, _ in first}) == 5
    assert all(name.startswith("tpe-") for name, _ in first)
    assert all(-5 <= p["x"] <= 5 and p["opt"] in ("adam", "sgd") and list(p) == ["x", "opt"] for _, p in first)
    assert len(searcher.ask(100)) == 7 and searcher.remaining == 0 and searcher.ask(1) == []


def test_a_rebuilt_searcher_continues_without_asking_an_existing_trial(tmp_path):
    study = load(tmp_path, TPE)
    done = [Told(f"tpe-done{i}", {"x": float(i), "opt": "adam"}, "complete", (float(i * i),)) for i in range(3)]
    one = Searcher(study, done)
    asked = one.ask(4)
    # the loop died after creating those four: the next loop sees them running
    running = [Told(name, params, "running") for name, params in asked]
    two = Searcher(study, done + running)
    assert two.size == 7 and two.remaining == 5
    again = two.ask(5)
    assert len(again) == 5
    assert not {name for name, _ in again} & ({name for name, _ in asked} | {t.name for t in done})
    # the same history asks the same trials (deterministic), a longer one others
    assert Searcher(study, done).ask(4) == asked
    # a trial that was running when the searcher was rebuilt is told as it ends
    two.tell(asked[0][0], "complete", (0.25,))
    two.tell(asked[0][0], "complete", (9.0,))  # told once only
    two.tell("tpe-done0", "failed")  # ended before the rebuild: stays as it was
    frozen = {t.number: t for t in two.optuna_study.trials}
    assert frozen[3].value == 0.25 and frozen[0].value == 0.0 and frozen[0].state.name == "COMPLETE"


def test_a_spent_discrete_space_asks_no_more(tmp_path):
    text = with_(TPE, "x: {type: uniform, low: -5, high: 5}", "x: {type: int, low: 0, high: 1}")
    searcher = Searcher(load(tmp_path, text), [])
    asked = searcher.ask(12)
    assert sorted((p["x"], p["opt"]) for _, p in asked) == [(0, "adam"), (0, "sgd"), (1, "adam"), (1, "sgd")]
    assert searcher.remaining == 8 and searcher.ask(1) == []


def test_trials_of_an_earlier_space_count_against_the_budget_without_being_learnt(tmp_path):
    study = load(tmp_path, TPE)
    old = [
        Told("tpe-old", {"x": 50.0, "opt": "adam"}, "complete", (0.0,)),
        Told("tpe-gone", {"y": 1}, "complete", (0.0,)),
    ]
    searcher = Searcher(study, old)
    assert searcher.remaining == 10
    states = [t.state.name for t in searcher.optuna_study.trials]
    assert states == ["FAIL", "FAIL"]


def test_tpe_learns_from_what_it_is_told(tmp_path):
    text = with_(TPE, "trials: 12", "trials: 40")
    text = with_(text, "opt: {type: choice, values: [adam, sgd]}", "opt: {type: choice, values: [a]}")
    bests = []
    for seed in range(1, 6):
        searcher = Searcher(load(tmp_path, with_(text, "seed: 1", f"seed: {seed}")), [])
        best = float("inf")
        for _ in range(10):  # four at a time, as a loop with four in flight would ask
            for name, params in searcher.ask(4):
                loss = (params["x"] - 2.0) ** 2
                best = min(best, loss)
                searcher.tell(name, "complete", (loss,))
        assert searcher.remaining == 0
        bests.append(best)
    # 40 uniform draws on [-5, 5] come within 0.005 of the minimum (|x - 2| < 0.071) with
    # odds of 43%, so all five seeds by chance with odds of 1.5%
    assert all(best < 0.005 for best in bests), bests


@pytest.mark.parametrize("kind", ["nsga2", "cmaes"])
def test_the_other_samplers_ask_and_learn(tmp_path, kind):
    assert missing(kind) is None  # the [test] extra brings optuna and cmaes
    text = with_(TPE, "kind: tpe", f"kind: {kind}")
    text = with_(text, "opt: {type: choice, values: [adam, sgd]}", "y: {type: int, low: 0, high: 10}")
    searcher = Searcher(load(tmp_path, text), [])
    for _ in range(3):
        for name, params in searcher.ask(4):
            assert isinstance(params["y"], int) and isinstance(params["x"], float)
            searcher.tell(name, "complete", (params["x"] ** 2 + params["y"],))
    assert searcher.remaining == 0
    assert [t.state.name for t in searcher.optuna_study.trials].count("COMPLETE") == 12


def test_failed_and_pruned_trials_are_told_as_such(tmp_path):
    searcher = Searcher(load(tmp_path, TPE), [])
    (a, _), (b, _), (c, _) = searcher.ask(3)
    searcher.tell(a, "failed")
    searcher.tell(b, "pruned")
    searcher.tell(c, "complete", (1.5,))
    searcher.tell("tpe-unknown", "complete", (0.0,))  # not asked here: nothing to tell
    assert [(t.state.name, t.value) for t in searcher.optuna_study.trials] == [
        ("FAIL", None),
        ("PRUNED", None),
        ("COMPLETE", 1.5),
    ]


MEDIAN = TPE.replace(
    "objective: {metric: loss, direction: minimize}\n",
    "objective: {metric: loss, direction: minimize}\npruner: {kind: median, startup_trials: 2}\n",
)


def test_the_median_pruner_stops_a_trial_worse_than_the_median_at_its_step(tmp_path):
    searcher = Searcher(load(tmp_path, MEDIAN), [])
    (a, _), (b, _), (c, _), (d, _) = searcher.ask(4)
    for name, curve in ((a, [1.0, 0.5, 0.3]), (b, [1.0, 0.6, 0.4])):
        assert not searcher.report(name, dict(enumerate(curve)))
        searcher.tell(name, "complete", (curve[-1],))
    assert not searcher.report(c, {0: 0.9, 1: 0.45})  # better than the median so far: goes on
    assert searcher.report(d, {0: 1.5})  # worse than both at step 0: stopped
    assert not searcher.report(d, {0: 1.5})  # nothing new: no new verdict
    searcher.tell(d, "pruned")
    assert [t.state.name for t in searcher.optuna_study.trials][3] == "PRUNED"


def test_intermediate_values_survive_a_rebuild(tmp_path):
    study = load(tmp_path, MEDIAN)
    done = [
        Told(f"tpe-done{i}", {"x": float(i), "opt": "adam"}, "complete", (0.3 + i / 10,), {0: 1.0, 1: 0.5})
        for i in range(2)
    ]
    running = Told("tpe-run", {"x": 4.0, "opt": "sgd"}, "running", None, {0: 2.0})
    searcher = Searcher(study, [*done, running])
    assert searcher.optuna_study.trials[0].intermediate_values == {0: 1.0, 1: 0.5}
    # the running trial's step 0 was reported before the rebuild: a later step decides
    assert searcher.report("tpe-run", {0: 2.0, 1: 3.0})


@pytest.mark.parametrize(
    "pruner, problem",
    [
        (
            "{kind: hyperband}",
            "study.yaml:8:1: pruner.max_steps: the hyperband pruner needs 'max_steps' (the steps a "
            "whole trial reports)",
        ),
        (
            "{kind: hyperband, min_steps: 5, max_steps: 2}",
            "study.yaml:8:52: pruner.max_steps: max_steps (2) is below min_steps (5)",
        ),
        (
            "{kind: mean}",
            "study.yaml:8:16: pruner.kind: must be one of 'median', 'successive-halving' or 'hyperband' "
            "(did you mean 'median'?)",
        ),
    ],
)
def test_pruner_fields_are_checked(tmp_path, pruner, problem):
    assert problems(tmp_path, MEDIAN.replace("{kind: median, startup_trials: 2}", pruner)) == [problem]


def test_a_pruner_needs_a_closed_loop_search_and_one_objective(tmp_path):
    random = MEDIAN.replace("kind: tpe, trials: 12, seed: 1", "kind: random, trials: 12, seed: 1")
    assert problems(tmp_path, random) == [
        "study.yaml:8:9: pruner: a pruner stops trials of a closed-loop search: use strategy kind tpe, gp, cmaes or "
        "nsga2 (got 'random')"
    ]
    two = MEDIAN.replace(
        "objective: {metric: loss, direction: minimize}",
        "objective: [{metric: loss}, {metric: acc, direction: maximize}]",
    )
    assert problems(tmp_path, two) == [
        "study.yaml:8:9: pruner: a pruner judges one objective's intermediate values; 2 objectives are given"
    ]
