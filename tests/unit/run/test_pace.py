"""The request pace on scripted answers of the API server, in virtual time (exact)."""

from dataclasses import replace

import pytest

from stratctl.run.pace import PaceConfig, Pressure, answered, initial, pressure, refused, stalled, throttled

CONFIG = PaceConfig(qps=10, window=16)


def test_a_burst_of_429s_is_one_episode_one_cut_and_a_short_pause():
    state = refused(initial(CONFIG), CONFIG, 100.0, retry_after=32)
    # the rate halves, the window closes to one request, and the client pauses 1 s, not 32
    assert (state.rate, state.size, state.limit, state.paused_until) == (5, 1, 16, 101.0)
    # requests that were in flight when the first 429 came back: the same episode
    later = refused(state, CONFIG, 100.2, retry_after=32)
    assert (later.rate, later.size, later.paused_until, later.streak) == (5, 1, 101.0, 1)
    assert later.recent == (100.0, 100.2)


def test_failed_probes_double_the_pause_up_to_4s_but_never_past_retry_after():
    state, now, pauses = initial(CONFIG), 0.0, []
    for _ in range(5):  # each probe, sent when the pause ends, is refused again
        state = refused(state, CONFIG, now, retry_after=32)
        pauses.append(state.paused_until - now)
        now = state.paused_until
    assert pauses == [1, 2, 4, 4, 4]
    # a server asking for less is obeyed: Retry-After 1 after failed probes
    state = refused(state, CONFIG, now, retry_after=1)
    assert state.paused_until - now == 1
    # an answer ends the streak: the next 429 pauses 1 s again
    state = answered(state, CONFIG, now + 1, 0.01, mutating=True)
    assert refused(state, CONFIG, now + 2, retry_after=32).paused_until == now + 3


def test_the_rate_is_back_at_the_configured_qps_ten_answers_after_the_storm():
    state, now = initial(CONFIG), 0.0
    for _ in range(6):  # 10 → 5 → 2.5 → 1.25 → the floor, a tenth of qps
        state = refused(state, CONFIG, now, retry_after=32)
        now = state.paused_until
    assert state.rate == 1.0
    rates = []
    for i in range(12):
        state = answered(state, CONFIG, now + i * 0.1, 0.01, mutating=True)
        rates.append(state.rate)
    assert rates == [2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10]


def test_the_window_does_not_regain_the_size_that_drew_a_429_until_calm():
    state = replace(initial(CONFIG), size=2.0)
    state = refused(state, CONFIG, 0.0, retry_after=1)  # two requests at once were one too many
    assert (state.size, state.limit) == (1, 2)
    for i in range(200):  # 200 answers within the calm 30 s: still one at a time
        state = answered(state, CONFIG, 1 + i * 0.1, 0.01, mutating=False)
    assert state.size == 1
    # calm: the window grows again by growth/size per answer (0.1 slot at one slot)
    state = answered(state, CONFIG, 31.0, 0.01, mutating=False)
    assert state.size == pytest.approx(1.1)
    answers = 1
    while int(state.size) < 2:
        state = answered(state, CONFIG, 31 + answers * 0.1, 0.01, mutating=False)
        answers += 1
    assert answers == 15  # a second slot after about ten windows' worth of answers


def test_writes_go_one_at_a_time_for_30s_after_a_429():
    state = refused(initial(CONFIG), CONFIG, 0.0, retry_after=1)
    assert throttled(state, CONFIG, 29.9) and not throttled(state, CONFIG, 30.0)


def test_slow_writes_halve_rate_and_window_without_a_pause_at_most_once_per_10s():
    state = replace(initial(CONFIG), size=8.0)
    state = answered(state, CONFIG, 5.0, 2.5, mutating=True)
    assert (state.rate, state.size, state.paused_until) == (5, 4, float("-inf"))
    state = answered(state, CONFIG, 6.0, 2.5, mutating=True)  # within 10 s: once is enough
    assert (state.rate, state.size) == (5, 4)
    state = answered(state, CONFIG, 7.0, 2.5, mutating=False)  # a slow read (a large list) is no sign
    assert (state.rate, state.size) == (6, 4.025)
    state = answered(state, CONFIG, 15.0, 2.5, mutating=True)
    assert (state.rate, state.size) == (3, 2.0125)


def test_stalled_counts_from_the_first_refusal_until_an_answer():
    state = refused(initial(CONFIG), CONFIG, 10.0, retry_after=1)
    state = refused(state, CONFIG, 11.0, retry_after=1)
    assert stalled(state, 25.0) == 15.0
    state = answered(state, CONFIG, 26.0, 0.01, mutating=True)
    assert stalled(state, 27.0) == 0.0


def test_without_a_client_rate_limit_only_the_window_is_paced():
    config = PaceConfig(qps=0, window=16)
    state = refused(initial(config), config, 0.0, retry_after=1)
    assert (state.rate, state.size) == (0, 1)
    assert answered(state, config, 1.0, 0.01, mutating=True).rate == 0
    assert pressure(state, config, 0.5).qps is None


def test_pressure_says_what_the_quota_does_in_words():
    state, now = initial(CONFIG), 0.0
    for _ in range(3):
        state = refused(state, CONFIG, now, retry_after=32)
        now = state.paused_until
    seen = pressure(state, CONFIG, now)
    assert seen == Pressure(
        throttled_last_minute=3, qps=1.25, configured_qps=10, window=1, serial_writes=True, stalled=7.0, slowing=True
    )
    assert seen.tight
    assert seen.describe() == (
        "3 × 429 in the last minute, nothing accepted for 7s, pacing requests at 1.25/s "
        "(configured 10/s), one request at a time"
    )
    # answers bring the rate back: still 429s in the last minute, but nothing held back any more
    for i in range(9):
        state = answered(state, CONFIG, now + i * 0.1, 0.01, mutating=True)
    seen = pressure(state, CONFIG, now + 5)
    assert seen.tight and not seen.slowing and seen.qps == 10
    # a minute later the 429s are forgotten: no pressure left to report
    assert not pressure(state, CONFIG, now + 60).tight


def test_a_cycle_admits_what_the_pace_sends_in_a_cycle_only_while_it_holds_back():
    from stratctl.run.pace import api_room

    assert api_room(None, 1.0) is None
    assert api_room(Pressure(qps=5, configured_qps=5, throttled_last_minute=3), 1.0) is None
    assert api_room(Pressure(qps=3.5, configured_qps=5, slowing=True), 2.0) == 7
    assert api_room(Pressure(qps=0.5, configured_qps=5, slowing=True), 1.0) == 1
    assert api_room(Pressure(qps=None, slowing=True), 1.0) is None
