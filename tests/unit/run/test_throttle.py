import random
import threading
import time
from dataclasses import replace

import pytest

from stratctl.errors import Invalid, Throttled, Unavailable
from stratctl.run.throttle import Backoff, Throttle, TokenBucket, retry_wait
from tests.unit.fakes import FakeClock, MaxRng


def test_bucket_spends_burst_then_paces_at_qps():
    clock = FakeClock()
    bucket = TokenBucket(qps=5, burst=3, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(6)]
    # three banked tokens, then one every 1/5 s
    assert waits == [0, 0, 0, pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.2)]
    assert clock.now == pytest.approx(1000.6)
    assert bucket.waits == 3


def test_bucket_refills_while_idle_but_never_above_burst():
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock, sleep=clock.sleep)
    bucket.acquire(), bucket.acquire()
    clock.now += 60  # a long idle period banks only `burst` tokens
    assert [bucket.acquire() for _ in range(3)] == [0, 0, pytest.approx(0.1)]


def test_reserved_tokens_queue_up_for_concurrent_callers():
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=1, clock=clock, sleep=clock.sleep)
    # four callers reserve at the same instant: they are spaced 0.5 s apart
    assert [bucket.reserve() for _ in range(4)] == [0, 0.5, 1.0, 1.5]


def test_unlimited_bucket_never_waits_but_honours_holds():
    clock = FakeClock()
    bucket = TokenBucket(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    assert sum(bucket.acquire() for _ in range(1000)) == 0
    bucket.hold_until(clock.now + 7)
    assert bucket.acquire() == 7
    assert bucket.acquire() == 0


def test_retry_wait_is_full_jitter_exponential_and_capped():
    backoff = Backoff(base=0.5, cap=4.0)
    rng = MaxRng()
    assert [retry_wait(backoff, n, rng) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    # full jitter: with a real rng every wait lies in [0, ceiling]
    real = random.Random(7)
    waits = [retry_wait(backoff, 3, real) for _ in range(200)]
    assert 0 <= min(waits) < 0.2 and 1.8 < max(waits) <= 2.0


def test_a_429_pauses_the_whole_client_briefly_then_the_refused_request_probes():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    # what APF answers after another tenant's storm: Retry-After 32 on every 429
    answers = [Throttled("429", retry_after=32)] * 4 + ["created"]

    def create():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert throttle.call(create, mutating=True) == "created"
    # the request itself is the probe, after pauses of 1, 2, 4, 4 s: not 4 × 32 s
    assert clock.sleeps == [1, 2, 4, 4]
    assert throttle.stats.throttled == 4 and throttle.stats.retry_after_seconds == [32] * 4
    assert throttle.bucket.held_until == pytest.approx(1011.0)  # nobody else went during the pauses
    assert throttle.window.size == 1 and throttle.throttled()


def test_after_a_storm_the_bucket_is_back_at_qps_within_ten_answers():
    clock = FakeClock()
    throttle = Throttle(qps=10, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    answers = [Throttled("429", retry_after=32)] * 6 + ["created"]

    def create():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    throttle.call(create, mutating=True)
    assert throttle.bucket.qps == 2  # cut to the floor (1/s) by the storm, +1 for the answer that ended it
    storm_over = clock.now
    rates = []
    for _ in range(9):
        throttle.call(lambda: None, mutating=True)
        rates.append(throttle.bucket.qps)
    assert rates == [3, 4, 5, 6, 7, 8, 9, 10, 10]
    assert clock.now - storm_over == pytest.approx(
        1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6 + 1 / 7 + 1 / 8 + 1 / 9 + 1 / 10
    )


def test_throttle_does_not_retry_permanent_errors():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    calls = []

    def create():
        calls.append(1)
        raise Invalid("spec.tasks: Required value", status=422)

    with pytest.raises(Invalid, match="Required value"):
        throttle.call(create)
    assert calls == [1] and clock.sleeps == []


def test_throttle_gives_up_after_max_attempts_with_the_last_error():
    clock = FakeClock()
    throttle = Throttle(
        qps=0, burst=1, backoff=Backoff(base=1, cap=100, max_attempts=4), clock=clock, sleep=clock.sleep, rng=MaxRng()
    )

    def create():
        raise Unavailable("connection refused")

    with pytest.raises(Unavailable, match="connection refused"):
        throttle.call(create)
    assert clock.sleeps == [1, 2, 4]


def test_each_request_takes_a_token():
    clock = FakeClock()
    throttle = Throttle(qps=10, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    for _ in range(3):
        throttle.call(lambda: None)
    assert clock.sleeps == [0.1, 0.1]


def test_window_bounds_requests_in_flight_and_the_pace_resizes_it():
    from stratctl.run.throttle import Window

    w = Window(4)
    w.acquire(), w.acquire(), w.acquire()
    w.resize(2)  # a 429: 3 in use, 2 allowed: the next caller waits for two releases
    got = threading.Event()

    def caller():
        w.acquire()
        got.set()

    t = threading.Thread(target=caller, daemon=True)
    t.start()
    w.release()
    assert not got.wait(0.2)
    w.release()
    assert got.wait(2)
    assert w.smallest == 2


def test_writes_go_one_at_a_time_while_throttled_and_reads_beside_them():
    throttle = Throttle(qps=0, burst=1, concurrency=4)
    throttle.state = replace(throttle.state, last_429=time.monotonic())  # a 429 a moment ago, window still 4
    inside, release = [], threading.Event()

    def write(name):
        def fn():
            inside.append(name)
            release.wait(5)

        return lambda: throttle.call(fn, mutating=True)

    first = threading.Thread(target=write("w1"), daemon=True)
    second = threading.Thread(target=write("w2"), daemon=True)
    first.start()
    while not inside:
        time.sleep(0.01)
    second.start()
    assert throttle.call(lambda: "read", mutating=False) == "read"  # a read is not held by the write seat
    time.sleep(0.2)
    assert inside == ["w1"]  # the second write waits for the seat
    release.set()
    first.join(2), second.join(2)
    assert inside == ["w1", "w2"]


def test_throttled_requests_keep_retrying_longer_than_transient_errors():
    clock = FakeClock()
    throttle = Throttle(
        qps=0,
        burst=1,
        backoff=Backoff(base=0.1, cap=1, max_attempts=3),
        patience=20,
        clock=clock,
        sleep=clock.sleep,
        rng=MaxRng(),
    )
    calls = []

    def create():
        calls.append(1)
        if len(calls) < 15:
            raise Throttled("429", retry_after=1)
        return "created"

    assert throttle.call(create) == "created"
    assert len(calls) == 15
    assert throttle.window.smallest == 1
    assert clock.sleeps == [1] * 14  # Retry-After 1 is shorter than any pause: obeyed


def test_a_hold_set_while_a_request_waits_for_its_token_is_waited_out_before_it_goes():
    clock = FakeClock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock, sleep=clock.sleep)
    bucket.acquire()  # the banked token

    def sleep(seconds):
        clock.sleep(seconds)
        if len(clock.sleeps) == 1:  # another worker's request got a 429 with Retry-After: 5
            bucket.hold_until(clock.now + 5)

    bucket._sleep = sleep
    # the next token is due in 1 s; a hold opened during that second runs to 1006
    assert bucket.acquire() == pytest.approx(6)
    assert clock.now == pytest.approx(1006)
    assert clock.sleeps == [1, 5]


def test_a_request_that_waited_for_a_window_slot_checks_the_hold_again():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, concurrency=1, clock=clock, sleep=clock.sleep)
    sent = []

    class HoldingWindow:
        """A window whose slot frees only after another request's 429 opened a 3 s hold."""

        def acquire(self):
            throttle.bucket.hold_until(clock.now + 3)

        def release(self):
            pass

    throttle.window = HoldingWindow()
    throttle.call(lambda: sent.append(clock.now))
    assert sent == [1003]


def test_requests_waiting_while_the_rate_is_cut_go_at_the_rate_of_when_they_go():
    # a storm cut the rate to 2/s; four creates wait for the one slot. Each answer raises
    # the rate by a tenth of qps, and a request takes its token only once it holds the slot,
    # so the last goes at the recovered rate: tokens reserved up front at 2/s would have
    # made it wait 1.5 s
    throttle = Throttle(qps=100, burst=1, concurrency=1)
    throttle.state = replace(throttle.state, rate=2.0, size=1.0)
    throttle.bucket.set_rate(2.0)
    started = time.monotonic()
    threads = [
        threading.Thread(target=throttle.call, args=(lambda: None,), kwargs={"mutating": True}) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert time.monotonic() - started < 0.6
    assert throttle.bucket.qps == 42  # 2 + 4 × 10


def test_an_unanswering_server_is_tried_again_at_least_every_five_seconds():
    backoff = Backoff()  # base 0.5, cap 30, transient cap 5; a refused request waits for the pace instead
    assert [retry_wait(backoff, n, MaxRng()) for n in range(1, 8)] == [0.5, 1, 2, 4, 5, 5, 5]


def test_take_hands_out_the_whole_tokens_banked_now_and_nothing_during_a_hold():
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=5, clock=clock, sleep=clock.sleep)
    assert bucket.take(8) == 5  # the burst, no waiting
    assert bucket.take(3) == 0
    clock.sleep(0.35)
    assert bucket.take(3) == 3  # 3.5 tokens banked: whole ones only
    assert bucket.take(1) == 0
    clock.sleep(1)
    bucket.hold_until(clock() + 2)
    assert bucket.take(1) == 0
    assert TokenBucket(qps=0, burst=1, clock=clock).take(1000) == 1000  # unlimited
