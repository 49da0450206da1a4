import random

import pytest

from stratctl.errors import Invalid, Throttled, Unavailable
from stratctl.engine.throttle import Backoff, Throttle, TokenBucket, retry_wait
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
    assert [retry_wait(backoff, Unavailable("x"), n, rng) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    # full jitter: with a real rng every wait lies in [0, ceiling]
    real = random.Random(7)
    waits = [retry_wait(backoff, Unavailable("x"), 3, real) for _ in range(200)]
    assert 0 <= min(waits) < 0.2 and 1.8 < max(waits) <= 2.0


def test_retry_after_wins_over_a_shorter_backoff_even_above_the_cap():
    backoff = Backoff(base=0.5, cap=4.0)
    assert retry_wait(backoff, Throttled("slow down", retry_after=9), 1, MaxRng()) == 9
    assert retry_wait(backoff, Throttled("slow down", retry_after=1), 4, MaxRng()) == 4


def test_throttle_retries_429_honouring_retry_after_and_holds_the_bucket():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, backoff=Backoff(base=0.5, cap=8), clock=clock, sleep=clock.sleep, rng=MaxRng())
    answers = [Throttled("429", retry_after=3), Throttled("429", retry_after=1), "created"]

    def create():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert throttle.call(create) == "created"
    # first retry: max(3, 0.5); second: max(1, 1.0)
    assert clock.sleeps == [3, 1]
    assert throttle.stats.throttled == 2
    assert throttle.stats.retry_after_seconds == [3, 1]
    assert throttle.bucket.held_until == pytest.approx(1004.0)


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
    throttle = Throttle(qps=0, burst=1, backoff=Backoff(base=1, cap=100, max_attempts=4), clock=clock, sleep=clock.sleep, rng=MaxRng())

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


def test_window_halves_on_429_and_grows_by_one_per_window_of_successes():
    from stratctl.engine.throttle import Window

    w = Window(16, growth=1.0)
    for _ in range(3):
        w.acquire()
        w.release(throttled=True)
    assert int(w.size) == 2 and w.smallest == 2
    for _ in range(2):  # about a window's worth of successes widens it by one slot
        w.acquire()
        w.release(throttled=False)
    assert w.size == pytest.approx(2 + 1 / 2 + 1 / 2.5)
    w.acquire()
    w.release(throttled=False)
    assert int(w.size) == 3
    for _ in range(1000):
        w.acquire()
        w.release(throttled=False)
    assert w.size == 16  # never past its maximum


def test_window_probes_slowly_by_default():
    from stratctl.engine.throttle import Window

    w = Window(8)
    for _ in range(3):
        w.acquire()
        w.release(throttled=True)
    assert int(w.size) == 1
    for _ in range(9):
        w.acquire()
        w.release(throttled=False)
    assert int(w.size) == 1  # nine successes at one slot: not yet a second request in flight
    for _ in range(11):
        w.acquire()
        w.release(throttled=False)
    assert int(w.size) == 2


def test_window_bounds_requests_in_flight():
    import threading

    from stratctl.engine.throttle import Window

    w = Window(4)
    w.acquire(), w.acquire(), w.acquire()
    w.release(throttled=True)  # 4 → 2 slots, 2 in use: the next caller must wait
    got = threading.Event()

    def caller():
        w.acquire()
        got.set()

    t = threading.Thread(target=caller, daemon=True)
    t.start()
    assert not got.wait(0.2)
    w.release(throttled=False)
    assert got.wait(2)


def test_throttled_requests_keep_retrying_longer_than_transient_errors():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, backoff=Backoff(base=0.1, cap=1, max_attempts=3, max_throttled_attempts=20),
                        clock=clock, sleep=clock.sleep, rng=MaxRng())
    calls = []

    def create():
        calls.append(1)
        if len(calls) < 15:
            raise Throttled("429", retry_after=1)
        return "created"

    assert throttle.call(create) == "created"
    assert len(calls) == 15
    assert throttle.window.smallest == 1


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

        def release(self, throttled):
            pass

    throttle.window = HoldingWindow()
    throttle.call(lambda: sent.append(clock.now))
    assert sent == [1003]


def test_an_unanswering_server_is_tried_again_at_least_every_five_seconds_a_throttling_one_up_to_the_cap():
    backoff = Backoff()  # base 0.5, cap 30, transient cap 5
    assert [retry_wait(backoff, Unavailable("refused"), n, MaxRng()) for n in range(1, 8)] == [0.5, 1, 2, 4, 5, 5, 5]
    assert [retry_wait(backoff, Throttled("429"), n, MaxRng()) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 16, 30]
