"""What a study will cost before it runs: GPU-hours, and money when a price is given.

GPU-hours = GPUs per trial × expected trial duration × trials × retry factor, the retry
factor accounting for attempts lost to failures and preemptions. When the expected
duration or the trial's shape is a template over the trial's values, each trial's GPUs ×
duration (rendered by `Renderer.shape` and `Renderer.expected_seconds`) are summed instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stratctl.core.space import Trial
from stratctl.core.spec import Study


@dataclass(frozen=True)
class Estimate:
    trials: int
    gpus_per_trial: int  # the largest trial's, when trials differ (then gpus_least is set)
    gpu_hours: float
    money: float | None  # None without cost.gpu_hour_price
    expected_seconds: float  # of one trial (the mean when trials differ)
    retry_factor: float
    currency: str = "USD"
    gpus_least: int | None = None  # the smallest trial's GPUs, when trials differ in shape

    @property
    def gpus_text(self) -> str:
        if self.gpus_least is None or self.gpus_least == self.gpus_per_trial:
            return f"{self.gpus_per_trial} GPUs"
        return f"{self.gpus_least}–{self.gpus_per_trial} GPUs"

    def as_dict(self) -> dict[str, Any]:
        return {
            "trials": self.trials,
            "gpus_per_trial": self.gpus_per_trial,
            **({"gpus_least": self.gpus_least} if self.gpus_least is not None else {}),
            "expected_seconds": self.expected_seconds,
            "retry_factor": self.retry_factor,
            "gpu_hours": round(self.gpu_hours, 6),
            "money": None if self.money is None else round(self.money, 2),
            "currency": self.currency,
        }


def estimate(
    study: Study,
    trials: Sequence[Trial] | int,
    seconds: Sequence[float] | None = None,
    gpus: Sequence[int] | None = None,
) -> Estimate:
    """`seconds`: each trial's expected duration, when the study's differs per trial;
    `gpus`: each trial's GPUs, when the study's shape differs per trial."""
    n = trials if isinstance(trials, int) else len(trials)
    c = study.cost
    total = sum(seconds) if seconds is not None else c.expected_seconds * n
    mean = total / n if seconds is not None and n else (0.0 if seconds is not None else c.expected_seconds)
    if gpus is None:
        gpu_seconds, most, least = study.gpus_per_trial * total, study.gpus_per_trial, None
    else:
        durations = seconds if seconds is not None else [c.expected_seconds] * n
        gpu_seconds = sum(g * s for g, s in zip(gpus, durations))
        most, least = max(gpus, default=0), min(gpus, default=0)
    gpu_hours = gpu_seconds / 3600 * c.retry_factor
    money = None if c.gpu_hour_price is None else gpu_hours * c.gpu_hour_price
    return Estimate(n, most, gpu_hours, money, mean, c.retry_factor, c.currency, least)
