"""What a study will cost before it runs: GPU-hours, and money when a price is given.

GPU-hours = GPUs per trial × expected trial duration × trials × retry factor, the retry
factor accounting for attempts lost to failures and preemptions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stratctl.space import Trial
from stratctl.spec import Study


@dataclass(frozen=True)
class Estimate:
    trials: int
    gpus_per_trial: int
    gpu_hours: float
    money: float | None  # None without cost.gpu_hour_price
    expected_seconds: float  # of one trial
    retry_factor: float
    currency: str = "USD"

    def as_dict(self) -> dict:
        return {
            "trials": self.trials,
            "gpus_per_trial": self.gpus_per_trial,
            "expected_seconds": self.expected_seconds,
            "retry_factor": self.retry_factor,
            "gpu_hours": round(self.gpu_hours, 6),
            "money": None if self.money is None else round(self.money, 2),
            "currency": self.currency,
        }


def estimate(study: Study, trials: Sequence[Trial] | int) -> Estimate:
    n = trials if isinstance(trials, int) else len(trials)
    c = study.cost
    gpu_hours = study.gpus_per_trial * c.expected_seconds / 3600 * n * c.retry_factor
    money = None if c.gpu_hour_price is None else gpu_hours * c.gpu_hour_price
    return Estimate(n, study.gpus_per_trial, gpu_hours, money, c.expected_seconds, c.retry_factor, c.currency)
