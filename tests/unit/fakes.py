"""Fakes at the boundaries for unit tests: virtual time (a clock that only moves when something
sleeps), a non-random rng, a console that renders to text, and a reporter that keeps what
the loop said."""

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


class Events:
    """A reporter keeping the loop's event lines (and, given a clock, when each was said)."""

    def __init__(self, clock=None):
        self.lines: list[str] = []
        self.clock = clock
        self.at: dict[str, float] = {}

    def update(self, progress) -> None:
        pass

    def event(self, message: str) -> None:
        self.lines.append(message)
        if self.clock is not None:
            self.at[message] = self.clock()

    def about(self, words: str) -> list[str]:
        return [line for line in self.lines if words in line]


def one_cycle(loop, pool):
    """One cycle of an attempt backend's loop (run/cycle.py) on the test's worker pool: each
    trial's state as it left it."""
    loop._pool = pool
    loop.step()
    return loop.states
