"""Ranking trials by a result metric: `status --sort`, `status --best`, submit's best trial
(pure over the rows every backend fills)."""

from __future__ import annotations

from stratctl.errors import UsageError
from stratctl.run.rows import TrialRow
from stratctl.trialstate import TrialState


def sort_trials(rows: list[TrialRow], metric: str | None) -> list[TrialRow]:
    """Best first by a result metric: `loss` lowest first, `-accuracy` highest first.

    Trials without the metric (not finished, or not reporting it) come last, in name order.
    A metric no trial reports is a usage error (a typo, most likely) naming those that exist.
    """
    if not metric:
        return sorted(rows, key=lambda r: (r.study, r.trial))
    descending = metric.startswith("-")
    name = metric.lstrip("-+")
    known = metrics_of(rows)
    if name not in known and not any(name in (row.result or {}) for row in rows):  # `--sort step` still sorts
        reported = ", ".join(known) if known else "none yet (no trial has reported a result)"
        raise UsageError(f"--sort {metric}: no trial reports a metric {name!r}; metrics reported: {reported}")

    def key(row: TrialRow) -> tuple[int, float, str, str]:
        value = (row.result or {}).get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return (1, 0.0, row.study, row.trial)
        return (0, -value if descending else value, row.study, row.trial)

    return sorted(rows, key=key)


# Result keys that say where a value was taken, not how good a trial is: a pruned trial's
# result is its last intermediate value and the step it was reported at (closedloop.py).
NOT_METRICS = frozenset({"step"})


def metrics_of(rows: list[TrialRow]) -> list[str]:
    """The result metrics the trials report, in the order they first appear (not `step`)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row.result or {}:
            if key not in NOT_METRICS:
                seen.setdefault(key, None)
    return list(seen)


LOWER_IS_BETTER = ("loss", "err", "mse", "mae", "perplexity", "regret", "latency", "cost")


def default_ranking(rows: list[TrialRow]) -> str | None:
    """How to rank trials when nobody said: by the first numeric metric they report, lowest
    first when its name says it is a loss or an error, else highest first (`sort_trials`'s
    spelling: `loss`, `-accuracy`); None when no trial reports a number."""
    for name in metrics_of(rows):
        values = [(r.result or {}).get(name) for r in rows]
        if any(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return name if any(word in name.lower() for word in LOWER_IS_BETTER) else f"-{name}"
    return None


def best_of(rows: list[TrialRow], ranking: str | None) -> tuple[TrialRow, str] | None:
    """The best succeeded trial of `rows` by the ranking (else a guess from the metrics reported)."""
    rows = [r for r in rows if r.state == TrialState.SUCCEEDED.value]
    ranking = ranking or default_ranking(rows)
    if not ranking:
        return None
    name = ranking.lstrip("-+")
    ranked = [r for r in sort_trials(rows, ranking) if isinstance((r.result or {}).get(name), int | float)]
    return (ranked[0], ranking) if ranked else None
