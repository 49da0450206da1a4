"""Virtual time for unit tests: a clock that only moves when something sleeps."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start: float = 1000.0):
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 9))
        self.now += seconds


class MaxRng:
    """An rng whose uniform(a, b) is always b: the top of the jitter range, for exact schedules."""

    def uniform(self, a: float, b: float) -> float:
        return b
