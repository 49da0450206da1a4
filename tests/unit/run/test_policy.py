"""The adaptive policy on scripted signal traces, in virtual time."""

from stratctl.run.policy import AdaptiveConfig, AdaptivePolicy, Observed, PolicyState, StaticPolicy, decide

CONFIG = AdaptiveConfig(min=1, initial=4, max=32, pending_high=2, cooldown=10)


def obs(**kw):
    base = dict(in_flight=4, pending=0, waiting=100, gangs_fit=0, free_gpus=0)
    base.update(kw)
    return Observed(**base)


def run(trace, config=CONFIG, start=0.0, step=2.0):
    """Feed one observation per cycle (every `step` s); return the targets and holds."""
    policy = AdaptivePolicy(config)
    targets, holds, reasons = [], [], []
    for i, o in enumerate(trace):
        d = policy.decide(o(policy.state.target) if callable(o) else o, start + i * step)
        targets.append(d.target)
        holds.append(d.hold)
        reasons.append(d.reason)
    return targets, holds, reasons


def test_freed_gpus_raise_the_target_by_the_gangs_that_fit():
    targets, holds, reasons = run(
        [
            lambda t: obs(in_flight=t, gangs_fit=0),
            lambda t: obs(in_flight=t, gangs_fit=3),  # a competing job released GPUs: 3 gangs fit
            lambda t: obs(in_flight=t, pending=3, gangs_fit=0),  # the 3 are being placed
            lambda t: obs(in_flight=t, gangs_fit=1),
        ]
    )
    assert targets == [4, 7, 7, 8]
    assert holds == [False] * 4
    assert reasons[1] == "3 more gang(s) fit in free GPUs: target 4 → 7"


def test_no_increase_while_more_gangs_than_the_queue_allowance_are_pending():
    d, _ = decide(obs(in_flight=4, pending=3, gangs_fit=10), CONFIG, PolicyState(4), 0)
    assert d.target == 4 and d.reason == "3 gang(s) pending: keeping target 4"
    d, _ = decide(obs(in_flight=4, pending=2, gangs_fit=10), CONFIG, PolicyState(4), 0)
    assert d.target == 8  # two queued gangs are the allowance, not congestion


def test_admission_is_bounded_by_the_gangs_that_fit_plus_the_queue_allowance():
    # a target of 20 set while the cluster had room; a competing job has since taken the
    # GPUs: only the 2 queued gangs of the allowance are admitted, not 16 that would wait
    d, _ = decide(obs(in_flight=4, gangs_fit=0), CONFIG, PolicyState(20), 0)
    assert d.room == 2 and d.admit(obs(in_flight=4, gangs_fit=0)) == 2
    # room for 3 gangs, 1 of the study's gangs already pending: 3 + 2 - 1
    o = obs(in_flight=5, pending=1, gangs_fit=3)
    d, _ = decide(o, CONFIG, PolicyState(20), 0)
    assert d.room == 4 and d.admit(o) == 4
    # gangs just created and not yet visible to the GPU signal count against the room
    o = obs(in_flight=12, pending=8, gangs_fit=6)
    d, _ = decide(o, CONFIG, PolicyState(20), 0)
    assert d.room == 0 and d.admit(o) == 0
    # the target still bounds it, and without a GPU signal only the target does
    o = obs(in_flight=7, gangs_fit=10)
    assert decide(o, CONFIG, PolicyState(8), 0)[0].admit(o) == 1
    o = obs(in_flight=4, gangs_fit=None)
    d, _ = decide(o, CONFIG, PolicyState(20), 0)
    assert d.room is None and d.admit(o) == 16


def test_increase_at_most_doubles_per_cycle():
    d, state = decide(obs(in_flight=4, gangs_fit=30), CONFIG, PolicyState(4), 0)
    assert d.target == 8
    d, state = decide(obs(in_flight=8, gangs_fit=26), CONFIG, state, 1)
    assert d.target == 16


def test_increase_is_bounded_by_max_and_needs_the_cap_to_be_used():
    d, s = decide(obs(in_flight=30, gangs_fit=50), CONFIG, PolicyState(30), 0)
    assert d.target == 32
    d, _ = decide(obs(in_flight=5, gangs_fit=50), CONFIG, PolicyState(20), 0)
    assert d.target == 20  # 15 slots unused already: more headroom would not help


def test_the_api_quota_never_moves_the_target_and_holds_only_a_sustained_stall():
    # requests refused for a few seconds (429s) while 3 more gangs fit: the GPUs decide
    d, state = decide(obs(in_flight=16, gangs_fit=3, api_stalled=4.0), CONFIG, PolicyState(16), 100)
    assert (d.target, d.hold) == (19, False)
    assert d.reason == "3 more gang(s) fit in free GPUs: target 16 → 19"
    # nothing accepted for 15 s: hold new trials, keep the target
    d, state = decide(obs(in_flight=19, gangs_fit=3, api_stalled=15.0), CONFIG, state, 110)
    assert (d.target, d.hold) == (19, True) and d.admit(obs(in_flight=19)) == 0
    assert d.reason == "API quota: nothing accepted for 15s, holding new trials (target 19 kept)"
    # the API accepts again: the free GPUs raise the target at once (no cooldown: nothing was cut)
    d, state = decide(obs(in_flight=19, gangs_fit=3), CONFIG, state, 111)
    assert (d.target, d.hold) == (22, False) and state.last_decrease == float("-inf")


def test_stuck_pending_gangs_decrease_to_half_of_what_is_in_flight():
    d, state = decide(obs(in_flight=10, pending=6, stuck=5), CONFIG, PolicyState(20), 48)
    assert d.target == 20 and "watching" in d.reason  # one cycle is noise
    d, state = decide(obs(in_flight=10, pending=6, stuck=5), CONFIG, state, 50)
    assert d.target == 5 and not d.hold
    assert d.reason == "5 gangs pending (more than 2): target 20 → 5"
    assert state.last_decrease == 50


def test_a_persistently_slow_volcano_scheduler_decreases_and_blocks_increases():
    # 3 s scheduling cycles with GPUs free: first only watched (one slow cycle is noise)
    d, state = decide(obs(in_flight=8, scheduling_latency_p90=3.0, gangs_fit=3), CONFIG, PolicyState(8), 0)
    assert (d.target, d.hold) == (8, False)
    assert d.reason == "congestion signal (scheduling latency), watching"
    # still slow after `persist` seconds: halve
    d, state = decide(obs(in_flight=8, scheduling_latency_p90=3.0, gangs_fit=3), CONFIG, state, 2)
    assert d.target == 4
    assert d.reason == "Volcano scheduling latency p90 3000ms above 2000ms: target 8 → 4"
    # a scheduler within its bound is no signal: free GPUs raise the target again after the cooldown
    d, state = decide(obs(in_flight=4, scheduling_latency_p90=0.4, gangs_fit=3), CONFIG, state, 20)
    assert d.target == 7


def test_etcd_breaker_holds_new_submissions():
    d, _ = decide(obs(in_flight=8, etcd_p99=0.8, gangs_fit=3), CONFIG, PolicyState(8), 0)
    assert d.hold and d.target == 4 and "etcd" in d.reason


def test_never_below_min():
    cfg = AdaptiveConfig(min=3, initial=4, max=32)
    d, state = decide(obs(in_flight=1, pending=3, stuck=3), cfg, PolicyState(4), 0)
    d, _ = decide(obs(in_flight=1, pending=3, stuck=3), cfg, state, 2)
    assert d.target == 3


def test_flapping_signals_do_not_oscillate():
    # pending gangs flap between stuck and clear every cycle, GPUs flap between free and full
    trace = []
    for i in range(30):
        if i % 2:
            trace.append(lambda t: obs(in_flight=t, pending=4, stuck=4, gangs_fit=0))
        else:
            trace.append(lambda t: obs(in_flight=t, pending=0, gangs_fit=2))
    targets, _, _ = run(trace, step=2.0)
    moves = [b - a for a, b in zip(targets, targets[1:]) if b != a]
    reversals = sum(1 for m1, m2 in zip(moves, moves[1:]) if (m1 > 0) != (m2 > 0))
    assert reversals == 0, targets  # one-cycle blips never push the target down and up again
    assert min(targets) >= 4 and max(targets) <= 32


def test_persistent_congestion_then_relief_changes_direction_once_per_cooldown():
    congested = [lambda t: obs(in_flight=t, pending=5, stuck=5, gangs_fit=0)] * 10
    relieved = [lambda t: obs(in_flight=t, pending=0, gangs_fit=2)] * 10
    targets, _, _ = run([lambda t: obs(in_flight=16)] + congested + relieved, config=AdaptiveConfig(initial=16))
    assert targets[0] == 16
    assert min(targets) == 4  # 20 s of congestion halve twice (once per 10 s cooldown): 16, 8, 4
    assert targets[-1] > min(targets)  # and climbed back once GPUs were free
    moves = [b - a for a, b in zip(targets, targets[1:]) if b != a]
    assert sum(1 for m1, m2 in zip(moves, moves[1:]) if (m1 > 0) != (m2 > 0)) == 1


def test_drained_holds():
    d, _ = decide(obs(drained=True, gangs_fit=10), CONFIG, PolicyState(8), 0)
    assert d.hold and d.reason == "study drained"


def test_static_policy_is_a_fixed_cap_that_holds_while_the_api_accepts_nothing():
    p = StaticPolicy(5)
    assert p.decide(obs(), 0).target == 5
    assert not p.decide(obs(api_stalled=3), 0).hold
    assert p.decide(obs(api_stalled=20), 0).hold
    assert p.decide(obs(drained=True), 0).hold


def test_persistence_and_steps_are_seconds_not_cycles():
    # a loop woken every 0.2 s by job changes: congestion must still last 2 s to count ...
    congested = [lambda t: obs(in_flight=t, pending=5, stuck=5, gangs_fit=0)] * 12
    targets, _, reasons = run(congested, config=AdaptiveConfig(initial=16), step=0.2)
    assert targets[:10] == [16] * 10 and reasons[0] == "congestion signal (pending gangs), watching"
    assert targets[10:] == [8, 8]  # 2.0 s after it began
    # ... and free GPUs raise the target at most once a second, not at every wake-up
    free = [lambda t: obs(in_flight=t, gangs_fit=50)] * 11
    targets, _, reasons = run(free, config=AdaptiveConfig(initial=4, max=64), step=0.2)
    assert targets == [8, 8, 8, 8, 8, 16, 16, 16, 16, 16, 32]
    assert reasons[1] == "50 more gang(s) fit; next step in 0.8s"


def test_while_the_request_pace_holds_back_a_cycle_admits_what_it_can_create():
    o = obs(in_flight=4, gangs_fit=10, api_room=2)
    d, _ = decide(o, CONFIG, PolicyState(20), 0)
    assert d.target == 20 and d.room == 2 and d.admit(o) == 2  # the target stays where the GPUs put it
    assert StaticPolicy(20).decide(obs(in_flight=4, gangs_fit=10, api_room=1), 0).admit(o) == 1
    assert StaticPolicy(20).decide(obs(in_flight=4, gangs_fit=None, api_room=1), 0).admit(o) == 1


START_FREE = AdaptiveConfig(min=1, initial=4, max=32, cooldown=10, start_free=True)


def test_start_free_starts_at_the_gangs_the_free_gpus_hold_when_nothing_is_in_flight_yet():
    idle = obs(in_flight=0, gangs_fit=16, free_gpus=16)
    targets, holds, reasons = run(
        [idle, lambda t: obs(in_flight=t, gangs_fit=0), lambda t: obs(in_flight=t, gangs_fit=4)],
        config=START_FREE,
        step=0.5,
    )
    assert targets == [16, 16, 20]  # then the usual growth, one step (1 s) after the start
    assert holds == [False] * 3
    assert reasons[0] == "nothing in flight yet and 16 gang(s) fit in free GPUs: starting at 16, not 4"
    d, _ = decide(idle, START_FREE, PolicyState(4), 0)
    assert d.admit(idle) == 16  # a block's first throttle: every free GPU at once
    # the ceiling still bounds it, `initial` is the floor, and off by default: 4, then doubling
    assert decide(obs(in_flight=0, gangs_fit=50), START_FREE, PolicyState(4), 0)[0].target == 32
    assert decide(obs(in_flight=0, gangs_fit=2), START_FREE, PolicyState(4), 0)[0].target == 4
    assert run([idle, lambda t: obs(in_flight=t, gangs_fit=12)], step=1.0)[0] == [4, 8]


def test_start_free_is_only_the_start_of_a_study_on_a_cluster_seen_idle():
    # a rerun that finds trials of the study in flight, or pending: the usual ramp
    assert decide(obs(in_flight=3, gangs_fit=13), START_FREE, PolicyState(4), 0)[0].target == 4
    assert decide(obs(in_flight=0, pending=1, gangs_fit=16), START_FREE, PolicyState(4), 0)[0].target == 4
    # once the target has moved (a decrease after congestion), the study is no longer starting
    moved = PolicyState(4, last_decrease=0.0)
    assert decide(obs(in_flight=0, gangs_fit=16), START_FREE, moved, 20.0)[0].target == 4
    # no GPU signal, a drain, or a higher-priority gang waiting: no start from free GPUs
    assert decide(obs(in_flight=0, gangs_fit=None), START_FREE, PolicyState(4), 0)[0].target == 4
    assert decide(obs(in_flight=0, gangs_fit=16, drained=True), START_FREE, PolicyState(4), 0)[0].target == 4
    yielding = obs(in_flight=0, gangs_fit=16, precedence="prod-1")
    assert decide(yielding, START_FREE, PolicyState(4), 0)[0].target == 4
