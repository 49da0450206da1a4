"""The request pace: how fast, and how many at once, stratctl sends API requests (pure).

A submission is paced by two loops, each on its own signal. This one listens to what the
API server says about our *requests* — HTTP 429 (API Priority and Fairness rejecting past
the user's seats), its Retry-After, how long our own writes take — and sets the token
bucket's rate and the concurrency window. The other (`policy`) listens to the cluster
about *trials* (pending gangs, free GPUs, higher-priority gangs, the control plane's own
latency) and sets how many may be in flight. A 429 says "send requests more slowly"; it
says nothing about how many trials the GPUs can hold, and trials already running cost the
user's quota nothing.

The rules, in time passed in (nothing here reads a clock):

- **cut**, once per episode: the first 429 after the previous pause halves the rate (not
  below `floor` × qps) and closes the window to one request in flight. A priority level
  that rejects by concurrency has fewer seats than we used, and one request at a time can
  never collide with one of our own. 429s of requests already in flight when the first
  came back belong to the same episode.
- **pause, then probe**: after a cut nothing is sent for a pause — the Retry-After, but at
  most `pause` (1 s) after the first 429 in a row, doubling with each failed probe up to
  `pause_cap` (4 s) — then one request goes alone (the window is one): the probe. Why not
  the whole Retry-After: APF's is the priority level's, shared by every flow at that
  level; it doubles while rejections pile up (up to 32 s) and only comes down by one
  second per second in which something is rejected, so long after another tenant's storm
  every 429 still says 31–32 s (measured on the testbed: 40 s after a 20 s flood). Honoured
  by the whole client, each 429 silenced the submission for half a minute (issue 22). One
  probe every 4 s at most is nothing next to a storm, and sees its end within 4 s.
- **recover** on every answer: the rate climbs by qps/`recover` (back at qps after ten
  answered requests); the window grows by `growth`/size (one slot per ten windows' worth),
  but not back to the size that drew the last 429 until `calm` seconds pass without one.
- **one write at a time** while throttled (a 429 within `calm`): creates, patches and
  deletes go one by one even when the window lets reads run beside them.
- **slow writes**: a mutating request that took longer than `slow` is what a queueing
  priority level answers instead of a 429: it halves rate and window (at most once per
  `slow_every`), with no pause.
- **stalled**: seconds during which requests were refused and none was answered. The
  trial policy holds new admissions when that lasts (it never lowers the target for it).

With `qps <= 0` (no client-side rate limit) there is no rate to pace; the window still is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PaceConfig:
    qps: float  # the configured rate: the pace's ceiling; <= 0: no rate limit
    window: int  # the configured requests in flight: the window's ceiling
    decrease: float = 0.5
    floor: float = 0.1  # the lowest rate, as a share of qps
    recover: int = 10  # answered requests from the floor back to qps
    growth: float = 0.1  # window slots added per window's worth of answers
    pause: float = 1.0  # seconds, the first pause after a 429 (APF's smallest Retry-After)
    pause_cap: float = 4.0  # seconds, the longest pause before a probe
    calm: float = 30.0  # seconds without a 429 before the client counts as unthrottled
    slow: float = 1.0  # seconds: a write slower than this is congestion
    slow_every: float = 10.0  # seconds between two cuts for slow writes, at least
    memory: float = 60.0  # seconds of 429s kept for "N × 429 in the last minute"


@dataclass(frozen=True)
class PaceState:
    rate: float  # tokens per second now (0: unlimited)
    size: float  # requests in flight allowed now
    limit: int | None = None  # the window size that drew the last 429
    paused_until: float = -math.inf
    pause: float = 0.0  # the last pause as scheduled (doubles while probes fail)
    streak: int = 0  # 429 episodes since the last answer
    last_429: float = -math.inf
    last_answer: float = -math.inf
    refused_since: float | None = None  # first 429 since the last answer
    last_slow_cut: float = -math.inf
    recent: tuple[float, ...] = ()  # times of the 429s within `memory`


def initial(config: PaceConfig) -> PaceState:
    return PaceState(rate=max(0.0, config.qps), size=float(max(1, config.window)))


def refused(state: PaceState, config: PaceConfig, now: float, retry_after: float | None) -> PaceState:
    """A 429 (or 503 with Retry-After) came back at `now`."""
    recent = tuple(t for t in state.recent if now - t < config.memory) + (now,)
    since = state.refused_since if state.refused_since is not None else now
    state = replace(state, recent=recent, last_429=now, refused_since=since)
    if now < state.paused_until:  # a request already in flight when the episode began
        return state
    streak = state.streak + 1
    scheduled = config.pause if streak == 1 else min(config.pause_cap, state.pause * 2)
    pause = scheduled if retry_after is None else min(scheduled, max(0.0, retry_after))
    rate = max(config.floor * config.qps, state.rate * config.decrease) if config.qps > 0 else 0.0
    return replace(
        state, rate=rate, size=1.0, limit=int(state.size), paused_until=now + pause, pause=scheduled, streak=streak
    )


def answered(state: PaceState, config: PaceConfig, now: float, seconds: float, mutating: bool) -> PaceState:
    """A request sent through the pace got an answer (anything but a 429) after `seconds`."""
    state = replace(state, last_answer=now, streak=0, refused_since=None)
    if mutating and seconds > config.slow:
        if now - state.last_slow_cut < config.slow_every:
            return state
        rate = max(config.floor * config.qps, state.rate * config.decrease) if config.qps > 0 else 0.0
        return replace(state, rate=rate, size=max(1.0, state.size * config.decrease), last_slow_cut=now)
    rate = min(config.qps, state.rate + config.qps / config.recover) if config.qps > 0 else 0.0
    cap = float(max(1, config.window))
    if state.limit is not None and now - state.last_429 < config.calm:
        cap = min(cap, float(max(1, state.limit - 1)))  # the size that drew the 429 waits for calm
    size = state.size if state.size >= cap else min(cap, state.size + config.growth / state.size)
    return replace(state, rate=rate, size=size)


def throttled(state: PaceState, config: PaceConfig, now: float) -> bool:
    """A 429 within `calm`: writes go one at a time."""
    return now - state.last_429 < config.calm


def stalled(state: PaceState, now: float) -> float:
    """Seconds requests have been refused with none answered since (0 when one was)."""
    return 0.0 if state.refused_since is None else max(0.0, now - state.refused_since)


@dataclass(frozen=True)
class Pressure:
    """What the request pace is doing, for people: the panel, the study record, `status`."""

    throttled_last_minute: int = 0  # 429s received in the last minute
    qps: float | None = None  # the pace now; None: no rate limit
    configured_qps: float | None = None
    window: int = 1  # requests in flight allowed now
    serial_writes: bool = False  # writes go one at a time
    stalled: float = 0.0  # seconds refused with nothing answered
    slowing: bool = False  # holding requests back now: stalled, a 429 within `pause_cap`, or the rate below qps

    @property
    def tight(self) -> bool:
        """The API quota is pushing back (whether or not it is what limits the study)."""
        return self.throttled_last_minute > 0 or self.stalled > 0

    def describe(self) -> str:
        """`12 × 429 in the last minute, pacing requests at 3/s (configured 5/s), one request at a time`."""
        parts = [f"{self.throttled_last_minute} × 429 in the last minute"]
        if self.stalled >= 1:
            parts.append(f"nothing accepted for {self.stalled:.0f}s")
        if self.qps is not None:
            pace = f"pacing requests at {self.qps:.3g}/s"
            if self.configured_qps is not None and self.qps < self.configured_qps:
                pace += f" (configured {self.configured_qps:.3g}/s)"
            parts.append(pace)
        if self.window <= 1:
            parts.append("one request at a time")
        else:
            parts.append(
                f"up to {self.window} requests at a time" + (", one write at a time" if self.serial_writes else "")
            )
        return ", ".join(parts)


def pressure(state: PaceState, config: PaceConfig, now: float) -> Pressure:
    limited = config.qps > 0
    return Pressure(
        throttled_last_minute=sum(1 for t in state.recent if now - t < config.memory),
        qps=state.rate if limited else None,
        configured_qps=config.qps if limited else None,
        window=int(state.size),
        serial_writes=throttled(state, config, now),
        stalled=stalled(state, now),
        slowing=(
            stalled(state, now) > 0 or now - state.last_429 < config.pause_cap or (limited and state.rate < config.qps)
        ),
    )


def api_room(seen: Pressure | None, cycle: float) -> int | None:
    """Trials to admit in one cycle of `cycle` seconds while the pace holds requests back:
    what its rate sends in a cycle, at least one; None (any) while it does not, or without a
    client-side rate (`--qps 0` asked for none)."""
    if seen is None or not seen.slowing or not seen.qps:
        return None
    return max(1, int(seen.qps * cycle))
