"""Ranking trials by a result metric (`status --sort`, `--best`): what counts as a metric."""

from __future__ import annotations

import pytest

from stratctl.errors import UsageError
from stratctl.run.ranking import default_ranking, metrics_of, sort_trials
from stratctl.run.rows import TrialRow


def rows() -> list[TrialRow]:
    return [
        TrialRow("s", "s-a", "succeeded", 0, result={"loss": 0.3, "accuracy": 0.8}),
        TrialRow("s", "s-b", "pruned", 0, result={"loss": 0.9, "step": 4}),  # its last value and where it stopped
        TrialRow("s", "s-c", "succeeded", 0, result={"loss": 0.1, "accuracy": 0.9}),
    ]


def test_the_step_a_pruned_trial_stopped_at_is_not_a_reported_metric():
    assert metrics_of(rows()) == ["loss", "accuracy"]
    with pytest.raises(UsageError) as caught:
        sort_trials(rows(), "acuracy")
    assert str(caught.value) == "--sort acuracy: no trial reports a metric 'acuracy'; metrics reported: loss, accuracy"


def test_sorting_by_step_asked_for_by_name_still_works_and_is_never_guessed():
    assert [r.trial for r in sort_trials(rows(), "-step")][0] == "s-b"
    steps_first = [TrialRow("s", "s-p", "pruned", 0, result={"step": 2, "loss": 0.5})]
    assert default_ranking(steps_first) == "loss"
