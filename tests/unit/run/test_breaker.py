"""The etcd breaker's hysteresis on scripted latency traces, one reading per second of
virtual time: what trips it, what clears it, and what must not move it."""

from __future__ import annotations

from stratctl.run.breaker import BreakerConfig, BreakerState, describe, step

CONFIG = BreakerConfig(high=0.25, low_ratio=0.8, persist=10, clear=30, min_drained=60)


def run(trace, config=CONFIG, state=BreakerState(), start=0.0):
    """Feed (seconds, latency) segments, one reading a second; the state after each reading."""
    states, now = [], start
    for seconds, latency in trace:
        for _ in range(seconds):
            state = step(latency, config, state, now)
            states.append(state)
            now += 1
    return states


def tripped_at(states) -> list[int]:
    """The seconds at which the breaker changed, as (second, tripped)."""
    changes, last = [], False
    for second, state in enumerate(states):
        if state.tripped != last:
            changes.append((second, state.tripped))
            last = state.tripped
    return changes


def test_spikes_shorter_than_persist_never_trip():
    # 9 s spikes, even of seconds, separated by one good reading: each restarts the count
    trace = [(9, 2.0), (1, 0.05)] * 6 + [(5, 0.3), (1, None), (9, 0.3)]
    assert tripped_at(run(trace)) == []


def test_a_sustained_trip_trips_after_persist_seconds_above_the_threshold():
    states = run([(20, 0.05), (30, 0.4)])
    assert tripped_at(states) == [(30, True)]  # above from second 20: tripped at 20 + 10
    assert states[30].tripped_at == 30


def test_a_reading_at_the_threshold_is_not_above_it():
    assert tripped_at(run([(60, 0.25)])) == []


def test_it_clears_after_clear_seconds_below_the_low_threshold_once_drained_long_enough():
    # tripped at 10; healthy from 20: below 0.2 for 30 s by 50, but drained only 40 s then
    states = run([(10, 0.5), (10, 0.5), (100, 0.05)])
    assert tripped_at(states) == [(10, True), (70, False)]  # min_drained: 10 + 60
    # a long incident: the clear period is what counts
    states = run([(100, 0.5), (60, 0.05)])
    assert tripped_at(states) == [(10, True), (130, False)]  # below from 100: cleared at 100 + 30


def test_a_noisy_recovery_between_the_thresholds_does_not_flap():
    # after the trip, readings wobble around the trip threshold (0.19..0.26): every reading
    # at or above 0.2 breaks the clear streak, so it stays tripped through the wobble ...
    wobble = [(5, 0.19), (1, 0.22), (7, 0.1), (1, 0.26), (20, 0.15), (1, 0.21)] * 4
    states = run([(12, 0.5)] + wobble)
    assert tripped_at(states) == [(10, True)]
    # ... and clears once, after 30 s below the low threshold, never tripping again on the tail
    states = run([(12, 0.5)] + wobble + [(31, 0.1)] + [(9, 0.3), (1, 0.1)] * 5)
    changes = tripped_at(states)
    assert changes == [(10, True), (12 + sum(s for s, _ in wobble) + 30, False)]


def test_no_reading_neither_trips_nor_clears():
    assert tripped_at(run([(300, None)])) == []
    states = run([(11, 0.5), (300, None)])
    assert tripped_at(states) == [(10, True)]  # Prometheus silent: the study stays drained
    # a gap in the readings restarts the clear period
    states = run([(65, 0.5), (20, 0.05), (1, None), (31, 0.05)])
    assert tripped_at(states) == [(10, True), (65 + 20 + 1 + 30, False)]


def test_describe_says_what_moves_it():
    state = run([(5, 0.4)])[-1]
    assert describe(0.4, CONFIG, state, 4) == "etcd p99 400ms above 250ms for 4s; drains after 10s"
    state = run([(11, 0.4), (6, 0.1)])[-1]
    assert describe(0.1, CONFIG, state, 16) == (
        "tripped 6s ago (etcd p99 100ms); resumes after 30s below 200ms (5s so far) and 54s more drained"
    )
    assert describe(0.1, CONFIG, BreakerState(), 0) == ""
