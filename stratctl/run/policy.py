"""Decisions about how many trials may be in flight: pure functions of what was observed.

`decide(observed, config, state, now) -> Decision`. The submit loop calls it every cycle
and acts on the result; nothing here does I/O or reads a clock.

This is the trial loop: it listens to the cluster (pending gangs, free and fragmented
GPUs, higher-priority gangs) and to the control plane's health as the servers themselves
see it (etcd's latency as the API server sees it, Volcano's scheduling latency, from Prometheus). The API
server's answers to *our requests* — 429s, Retry-After, our own request latency — pace the
requests instead (`pace`, applied by `throttle`) and never move the target: a 429 says
"send requests more slowly", not "the GPUs hold fewer trials", and trials already running
put no load on the user's API quota. Cutting the target on 429s left a study on a one-seat
quota running one or two trials at a time on an idle cluster for its whole run (issue 22).
What the API still may do here is **hold**: when nothing of ours has been accepted for
`api_stall` seconds, admit nothing new (the target is kept), since creates would only queue
in the client; and while the request pace holds requests back, a cycle admits no more
trials than it can create in one cycle (`api_room`), so the loop keeps cycling (observing,
showing, noticing a drain) instead of waiting a whole storm out inside one large batch.

The adaptive rule (AIMD with a dead band, like TCP congestion control):

- **hold** while the etcd-latency breaker is tripped (and decrease), or while the API has
  accepted nothing for `api_stall` seconds (target kept);
- **stale**: while what was observed may be out of date (a watch broken or silent past its
  bound, the API server not answering), hold: the target is kept and nothing new admitted.
  Counts read from a dead watch (gangs "pending" that are running by now) must not cut the
  target, and what is in flight is not known;
- **multiplicative decrease** (×`decrease`) on Volcano's end-to-end scheduling latency
  (p90, from Prometheus) above `scheduling_high`, or when more than `pending_high` of the
  study's gangs are stuck pending: the cluster is telling us it cannot absorb what we
  already sent (a scheduler whose cycle takes seconds places every new gang later, and
  each gang added lengthens the cycle);
- **additive increase** only when no more than `queue_ahead` of the study's gangs are
  pending and the free GPUs can hold at least one more whole gang (fragmentation-aware):
  raise the target by the number of whole gangs that fit, at most doubling it and at most
  once per `step` seconds, so the study fills freed GPUs in a few steps and gangs other
  launchers just admitted become visible in between;
- **start from the free GPUs** (`start_free`, off unless a loop asks for it): the first
  target is the whole gangs the free GPUs hold, not `initial`, when nothing of the study is
  in flight or pending yet and the target has never moved: the cluster is seen idle now, so
  the doubling steps would only leave GPUs idle for as long as they take (a Slurm job
  array's throttle starts its tasks only at the scheduler's next pass after each step).
  `initial` stays the floor, `max` the ceiling, and every rule above still applies;
- **room**: whatever the target, a cycle admits at most the whole gangs the free GPUs
  hold plus `queue_ahead` queued ones, less the study's gangs already pending. The few
  queued gangs take a trial's GPUs the moment it ends (the scheduler places them without
  waiting for the launcher's round trip); a target set while the cluster had room never
  turns into a pile of gangs waiting behind a job that took the GPUs since. Except when
  free GPUs exist but no HyperNode the study's hard network topology allows holds a whole
  gang (`spread`): then nothing is queued ahead either, since Volcano would let such gangs
  into the queue for GPUs they can never use together, and the reason says why;
- **yield**: while a gang of higher priority than the study's waits for GPUs it would
  get if lower-priority work stepped aside, admit nothing new (the target is kept): the
  GPUs that trials release then add up until Volcano can place it, instead of being
  refilled by the study one gang at a time while production starves. Except for
  **backfill**: when the pods holding the GPUs say when they will end (their
  `expected-seconds`), the gang can start at a known moment (the shadow time); trials
  expected to end `backfill_margin` seconds before it may use the free GPUs meanwhile, so
  they are not idle while the gang gathers and the gang starts no later (EASY backfilling);
- **persistence**: stuck gangs and a slow scheduler must last `persist` seconds to count;
- **dead band**: with more than `queue_ahead` gangs pending but at most `pending_high` stuck,
  keep the target; and no increase within `cooldown` seconds of a decrease. Flapping signals
  therefore move the target at most once per cooldown instead of oscillating.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol


@dataclass(frozen=True)
class Observed:
    """One cycle's view of the study and the cluster."""

    in_flight: int  # trials created and not finished
    pending: int  # of those, gangs not yet scheduled
    waiting: int  # trials not yet created
    stuck: int = 0  # pending gangs older than the scheduler's grace period
    drained: bool = False  # the study record says hold
    # why, when not a user's drain (the etcd breaker's drain, backends/kubernetes/loop/shedding.py)
    drained_by: str = ""
    api_stalled: float = 0.0  # seconds our requests have been refused with none accepted (the pace's)
    api_room: int | None = None  # trials the request pace can create in one cycle while it holds back; None: any
    gangs_fit: int | None = None  # whole gangs of the study's shape the free GPUs could hold; None: unknown
    free_gpus: int | None = None
    etcd_p99: float | None = None  # seconds, from Prometheus when available
    scheduling_latency_p90: float | None = None  # seconds, Volcano's e2e scheduling latency, from Prometheus
    precedence: str | None = None  # a higher-priority gang waiting for GPUs lower-priority work holds
    shadow: float | None = None  # seconds until that gang can start, by the expected ends of the pods below it
    backfill_fit: int | None = None  # whole gangs the free GPUs hold until then (that gang's demand aside)
    spread: str | None = None  # free GPUs no allowed HyperNode can use for a whole gang (hard topology): why
    stale: str | None = None  # why what was observed may be out of date (a watch broken or silent, no answer)


@dataclass(frozen=True)
class Decision:
    target: int  # trials allowed in flight
    hold: bool  # admit nothing new this cycle
    reason: str
    room: int | None = None  # gangs that may be admitted now whatever the target; None: unbounded
    backfill: float | None = None  # if set, admit only trials expected to end within this many seconds

    def admit(self, observed: Observed) -> int:
        """How many new trials to create now."""
        if self.hold:
            return 0
        slots = self.target - observed.in_flight
        if self.room is not None:
            slots = min(slots, self.room)
        return max(0, min(observed.waiting, slots))


@dataclass(frozen=True)
class AdaptiveConfig:
    min: int = 1
    initial: int = 4
    max: int = 32
    decrease: float = 0.5
    pending_high: int = 2  # pending gangs tolerated before backing off
    queue_ahead: int = 2  # gangs kept queued beyond those the free GPUs hold, ready for the next freed GPUs
    api_stall: float = 15.0  # seconds with nothing of ours accepted before new trials are held
    etcd_high: float = 0.25  # seconds, p99 of the API server's etcd requests: the breaker
    scheduling_high: float = 2.0  # seconds, p90 of Volcano's scheduling cycle (its period is 1 s)
    cooldown: float = 10.0  # seconds after a decrease before any change
    persist: float = 2.0  # seconds stuck gangs or high latency must last before they count
    step: float = 1.0  # seconds between two increases, at least
    backfill_margin: float = 3.0  # seconds a backfilled trial must end before the shadow time (its start-up)
    start_free: bool = False  # the first target from the gangs the free GPUs hold (not `initial`) when idle


@dataclass(frozen=True)
class PolicyState:
    target: int
    last_decrease: float = -math.inf
    last_increase: float = -math.inf
    congested_since: float | None = None  # since when stuck gangs or a slow scheduler were seen, unbroken


def _bounded(target: int, config: AdaptiveConfig) -> int:
    return max(config.min, min(config.max, target))


def room(observed: Observed, config: AdaptiveConfig) -> int | None:
    """Gangs a cycle may admit: those the free GPUs hold plus `queue_ahead` queued ones,
    less the study's gangs already pending. The study's own pending gangs count against
    it even after the free GPUs account for them, because a gang created a moment ago is
    not yet visible to the GPU signal: a launcher must never fill the same free GPUs twice;
    the cost is that gangs in transit are counted twice for a cycle or two."""
    if observed.gangs_fit is None:
        return None
    if observed.precedence:  # backfill: only gangs that start now can end before the shadow time
        return observed.backfill_fit or 0
    return _queued(observed, config.queue_ahead)


def _queued(observed: Observed, queue_ahead: int) -> int:
    """The whole gangs that fit plus `queue_ahead` queued ones, less the gangs pending; none
    queued while the free GPUs are spread over HyperNodes (they would never start there)."""
    ahead = 0 if observed.spread else queue_ahead
    return max(0, (observed.gangs_fit or 0) + ahead - observed.pending)


def decide(observed: Observed, config: AdaptiveConfig, state: PolicyState, now: float) -> tuple[Decision, PolicyState]:
    """The adaptive rule (see the module docstring); returns the decision and the next state."""
    decision, state = _rule(observed, config, state, now)
    return replace(decision, room=_least(room(observed, config), observed.api_room)), state


def _least(*bounds: int | None) -> int | None:
    known = [b for b in bounds if b is not None]
    return min(known) if known else None


def _rule(observed: Observed, config: AdaptiveConfig, state: PolicyState, now: float) -> tuple[Decision, PolicyState]:
    """The first that applies: a reason to hold (drained, etcd, the API quota, a gang of
    higher priority), a persistent congestion, else whether the target may grow."""
    return (
        _holding(observed, config, state, now)
        or _congestion(observed, config, state, now)
        or _growth(observed, config, replace(state, congested_since=None), now)
    )


def _decrease(
    why: str, hold: bool, observed: Observed, config: AdaptiveConfig, state: PolicyState, now: float
) -> tuple[Decision, PolicyState]:
    """Back off multiplicatively, once per cooldown."""
    target = state.target
    if now - state.last_decrease < config.cooldown:  # one decrease per cooldown: a burst of bad news halves once
        return Decision(target, hold, f"{why}; already backed off {now - state.last_decrease:.0f}s ago"), state
    # halve what is really in flight, not a target the study never reached
    base = min(target, max(observed.in_flight, 1))
    new = _bounded(math.floor(base * config.decrease), config)
    return Decision(new, hold, f"{why}: target {target} → {new}"), replace(
        state, target=new, last_decrease=now, congested_since=None
    )


def _holding(
    observed: Observed, config: AdaptiveConfig, state: PolicyState, now: float
) -> tuple[Decision, PolicyState] | None:
    """Hold new trials: the study is drained, etcd is slow (and back off), the API quota
    accepts nothing, or a gang of higher priority waits (backfilling before it can start)."""
    target = state.target
    if observed.drained:
        return Decision(target, True, observed.drained_by or "study drained"), state
    if observed.stale:
        return Decision(target, True, stale_hold(observed.stale, target)), state
    if observed.etcd_p99 is not None and observed.etcd_p99 > config.etcd_high:
        why = f"etcd p99 {observed.etcd_p99 * 1000:.0f}ms above {config.etcd_high * 1000:.0f}ms"
        return _decrease(why, True, observed, config, state, now)
    if observed.api_stalled >= config.api_stall:
        return Decision(
            target,
            True,
            f"API quota: nothing accepted for {observed.api_stalled:.0f}s, holding new trials (target {target} kept)",
        ), state
    if observed.precedence:
        why = f"yielding to higher-priority gang {observed.precedence}"
        window = None if observed.shadow is None else observed.shadow - config.backfill_margin
        if window is not None and window > 0 and observed.backfill_fit:
            return Decision(
                target,
                False,
                f"{why}; it can start in {observed.shadow:.0f}s: backfilling trials expected to end before",
                backfill=window,
            ), state
        return Decision(target, True, why), state
    return None


def _congestion(
    observed: Observed, config: AdaptiveConfig, state: PolicyState, now: float
) -> tuple[Decision, PolicyState] | None:
    """A slow scheduler or stuck gangs: watched, and backed off from once they persist."""
    scheduler = observed.scheduling_latency_p90
    behind = scheduler is not None and scheduler > config.scheduling_high
    stuck = observed.stuck > config.pending_high
    if not (behind or stuck):
        return None
    # a slow scheduler and stuck gangs count only when they persist: one slow cycle or
    # one gang the scheduler has not reached yet is noise, not congestion
    since = now if state.congested_since is None else state.congested_since
    state = replace(state, congested_since=since)
    if now - since >= config.persist:
        if behind and scheduler is not None:
            why = f"Volcano scheduling latency p90 {scheduler * 1000:.0f}ms above {config.scheduling_high * 1000:.0f}ms"
            return _decrease(why, False, observed, config, state, now)
        why = f"{observed.stuck} gangs pending (more than {config.pending_high})"
        return _decrease(why, False, observed, config, state, now)
    signal = "scheduling latency" if behind else "pending gangs"
    return Decision(state.target, False, f"congestion signal ({signal}), watching"), state


def _growth(observed: Observed, config: AdaptiveConfig, state: PolicyState, now: float) -> tuple[Decision, PolicyState]:
    """Grow the target by the gangs that fit in free GPUs (at most doubling per step), or
    say why it is kept."""
    target = state.target
    if observed.pending > config.queue_ahead:
        return Decision(target, False, f"{observed.pending} gang(s) pending: keeping target {target}"), state
    if now - state.last_decrease < config.cooldown:
        return Decision(target, False, f"cooling down after a decrease: keeping target {target}"), state
    fits = observed.gangs_fit
    if fits is None:
        return Decision(target, False, f"target {target} (no GPU signal)"), state
    if _starting(observed, config, state) and fits > target:
        new = _bounded(fits, config)
        why = f"nothing in flight yet and {fits} gang(s) fit in free GPUs: starting at {new}, not {target}"
        return Decision(new, False, why), replace(state, target=new, last_increase=now)
    if fits >= 1 and observed.in_flight >= target and target < config.max:
        if now - state.last_increase < config.step:
            return Decision(
                target, False, f"{fits} more gang(s) fit; next step in {config.step - (now - state.last_increase):.1f}s"
            ), state
        # at most doubling per step (TCP's slow start): gangs admitted by other launchers
        # sharing the cluster become visible as pending pods before the next step
        new = _bounded(target + min(fits, target), config)
        return Decision(new, False, f"{fits} more gang(s) fit in free GPUs: target {target} → {new}"), replace(
            state, target=new, last_increase=now
        )
    if fits < 1:
        why = observed.spread or "no free GPUs for another gang"
        return Decision(target, False, f"{why}: keeping target {target}"), state
    return Decision(target, False, f"target {target}"), state


def _starting(observed: Observed, config: AdaptiveConfig, state: PolicyState) -> bool:
    """The study's start as `start_free` takes it: nothing of it in flight or pending, and
    the target never moved (a rerun that finds trials in flight ramps up as usual)."""
    fresh = state.last_increase == -math.inf and state.last_decrease == -math.inf
    return config.start_free and fresh and observed.in_flight == 0 and observed.pending == 0


def stale_hold(why: str, target: int) -> str:
    """The one line said while the picture is out of date: what is stale, and that the
    target is kept (counts read from it, a pending gang that is running by now, would cut
    it for nothing) and nothing new admitted (what is in flight is not known)."""
    return f"{why}: the picture may be stale, holding target {target} until it is current"


class Policy(Protocol):
    """What a submit loop asks each cycle: how many trials may be in flight now."""

    def decide(self, observed: Observed, now: float) -> Decision: ...


class AdaptivePolicy:
    """Carries the policy state between cycles for the submit loop."""

    def __init__(self, config: AdaptiveConfig):
        self.config = config
        self.state = PolicyState(target=_bounded(config.initial, config))

    def decide(self, observed: Observed, now: float) -> Decision:
        decision, self.state = decide(observed, self.config, self.state, now)
        return decision


@dataclass
class StaticPolicy:
    """A fixed cap on trials in flight (what Katib's parallelTrialCount does).

    A cap that yields to higher-priority gangs (the cluster's signals are then observed)
    also keeps at most `queue_ahead` gangs queued beyond those the free GPUs hold, as the
    adaptive rule does. Without that bound a large cap fills Volcano's queue with gangs
    that cannot start yet, and that reservoir yields nothing: Volcano places a smaller,
    lower-priority gang into every GPU that frees around a higher-priority gang that does
    not fit yet, so production waits until the reservoir has drained however long the
    study holds its own creates. While it yields it backfills as the adaptive rule does."""

    cap: int
    queue_ahead: int = 2
    api_stall: float = AdaptiveConfig.api_stall
    backfill_margin: float = AdaptiveConfig.backfill_margin

    def decide(self, observed: Observed, now: float) -> Decision:
        if observed.drained:
            return Decision(self.cap, True, observed.drained_by or "study drained")
        if observed.stale:
            return Decision(self.cap, True, stale_hold(observed.stale, self.cap))
        if observed.api_stalled >= self.api_stall:
            return Decision(
                self.cap, True, f"API quota: nothing accepted for {observed.api_stalled:.0f}s, holding new trials"
            )
        if observed.precedence:  # observed only when the study yields (throttle.yield_to_higher_priority)
            why = f"yielding to higher-priority gang {observed.precedence}"
            window = None if observed.shadow is None else observed.shadow - self.backfill_margin
            if window is not None and window > 0 and observed.backfill_fit:
                return Decision(
                    self.cap,
                    False,
                    f"{why}; it can start in {observed.shadow:.0f}s: backfilling trials expected to end before",
                    room=_least(observed.backfill_fit, observed.api_room),
                    backfill=window,
                )
            return Decision(self.cap, True, why)
        if observed.gangs_fit is None:
            return Decision(self.cap, False, f"static cap {self.cap}", room=observed.api_room)
        room = _queued(observed, self.queue_ahead)
        fit = observed.spread or f"{observed.gangs_fit} gang(s) fit in free GPUs"
        return Decision(self.cap, False, f"static cap {self.cap}, {fit}", room=_least(room, observed.api_room))
