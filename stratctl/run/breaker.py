"""The etcd breaker's hysteresis: when a study set to `throttle.on_breaker: drain` is
drained, and when it comes back.

A pure state machine fed one reading of etcd's latency (p99, seconds, from
Prometheus) per submit-loop cycle, with the loop's clock. It **trips** once the latency has
stayed above `high` for `persist` seconds unbroken: a spike of a few seconds is noise, and
a drain costs every running trial the work since its last checkpoint. Once tripped it
**clears** only when the latency has stayed below `low_ratio × high` for `clear` seconds
unbroken and the study has been drained for at least `min_drained` seconds. A reading
between the two thresholds breaks either streak (the dead band), so a recovery that wobbles
around the threshold resumes the study once, not back and forth. No reading (Prometheus
silent, or its answer stale) is no evidence either way: it breaks both streaks, so the
breaker neither trips nor clears on a missing signal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from stratctl.run.policy import AdaptiveConfig


@dataclass(frozen=True)
class BreakerConfig:
    high: float = AdaptiveConfig.etcd_high  # seconds: above it, the control plane is in trouble
    low_ratio: float = 0.8  # clears only below low_ratio × high
    persist: float = 10.0  # seconds above `high`, unbroken, before it trips
    clear: float = 30.0  # seconds below the low threshold, unbroken, before it clears
    min_drained: float = 60.0  # seconds drained at least, however soon the latency recovers

    @property
    def low(self) -> float:
        return self.high * self.low_ratio


@dataclass(frozen=True)
class BreakerState:
    tripped: bool = False
    since: float | None = None  # start of the unbroken streak that would move it (above high, or below low)
    tripped_at: float | None = None


def step(latency: float | None, config: BreakerConfig, state: BreakerState, now: float) -> BreakerState:
    """The breaker after one reading at clock time `now` (see the module docstring)."""
    if not state.tripped:
        if latency is None or latency <= config.high:
            return replace(state, since=None)
        since = now if state.since is None else state.since
        if now - since >= config.persist:
            return BreakerState(tripped=True, tripped_at=now)
        return replace(state, since=since)
    if latency is None or latency >= config.low:
        return replace(state, since=None)
    since = now if state.since is None else state.since
    assert state.tripped_at is not None  # set whenever it trips
    if now - since >= config.clear and now - state.tripped_at >= config.min_drained:
        return BreakerState()
    return replace(state, since=since)


def describe(latency: float | None, config: BreakerConfig, state: BreakerState, now: float) -> str:
    """Where the breaker stands, for the live panel: '' while it is closed and nothing moves it."""
    ms = "no reading" if latency is None else f"etcd p99 {latency * 1000:.0f}ms"
    if not state.tripped:
        if state.since is None:
            return ""
        return f"{ms} above {config.high * 1000:.0f}ms for {now - state.since:.0f}s; drains after {config.persist:.0f}s"
    assert state.tripped_at is not None  # set whenever it trips
    drained = now - state.tripped_at
    left = [
        f"{config.clear:.0f}s below {config.low * 1000:.0f}ms"
        + (f" ({now - state.since:.0f}s so far)" if state.since is not None else "")
    ]
    if drained < config.min_drained:
        left.append(f"{config.min_drained - drained:.0f}s more drained")
    return f"tripped {drained:.0f}s ago ({ms}); resumes after {' and '.join(left)}"
