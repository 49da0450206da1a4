"""Fakes at the boundaries for unit tests: virtual time (a clock that only moves when something
sleeps), a non-random rng, and a console that renders to text."""

from __future__ import annotations

import io

from rich.console import Console


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


def text(renderable) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(renderable)
    return console.file.getvalue()
