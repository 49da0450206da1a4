"""Decisions about how many trials may be in flight: pure functions of what was observed.

`decide(observed, now) -> Decision`. The submit loop calls it every cycle and acts on the
result; nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Observed:
    """One cycle's view of the study and the cluster."""

    in_flight: int  # trials created and not finished
    pending: int  # of those, gangs not yet scheduled
    waiting: int  # trials not yet created
    drained: bool = False  # the study record says hold
    throttled_until: float = 0.0  # clock time before which the API server asked for quiet


@dataclass(frozen=True)
class Decision:
    target: int  # trials allowed in flight
    hold: bool  # admit nothing new this cycle
    reason: str

    def admit(self, observed: Observed) -> int:
        """How many new trials to create now."""
        if self.hold:
            return 0
        return max(0, min(observed.waiting, self.target - observed.in_flight))


@dataclass
class StaticPolicy:
    """A fixed cap on trials in flight (what Katib's parallelTrialCount does)."""

    cap: int

    def decide(self, observed: Observed, now: float) -> Decision:
        if observed.drained:
            return Decision(self.cap, True, "study drained")
        if observed.throttled_until > now:
            return Decision(self.cap, True, f"API server asked to wait {observed.throttled_until - now:.1f}s")
        return Decision(self.cap, False, f"static cap {self.cap}")
