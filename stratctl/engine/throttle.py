"""Client-side admission of API requests: a token bucket and the retry policy around it.

Every request stratctl makes takes a token first, so a study of thousands of trials
reaches the API server at `qps` with at most `burst` at once. When the server answers
429 (or 503) the whole bucket is held shut until its `Retry-After` has passed, so other
workers do not keep hammering a server that just asked for a pause (requests already
waiting for a token or for a slot in the window check the hold again before they go); the failed request
itself is retried with full-jitter exponential backoff, never sooner than `Retry-After`.

A token bucket bounds the *rate*; a server that rejects by concurrency (API Priority and
Fairness gives each priority level a few seats and answers 429 past them) also needs the
*number of requests in flight* bounded. So requests also take a slot in a congestion
window, as TCP does: every 429 halves it, every success widens it by `growth`/size (one
slot per ten windows' worth of successes), so a launcher with 48 workers facing a
one-seat priority level settles at about one request at a time instead of retrying in a
storm, and probes for more only slowly: each probe that fails costs everyone a
Retry-After.

Time is injected (`clock`, `sleep`, `rng`) so tests assert exact schedules.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import tenacity

from stratctl.errors import Throttled, Unavailable

T = TypeVar("T")
Clock = Callable[[], float]
Sleep = Callable[[float], None]


class TokenBucket:
    """A thread-safe token bucket: `qps` tokens per second, at most `burst` banked.

    `qps <= 0` means unlimited (no waiting, but holds from `hold_until` still apply).
    Tokens are reserved under the lock and waited for outside it, like Go's
    `rate.Limiter.Reserve`, so one slow sleeper never blocks the others' bookkeeping.
    """

    def __init__(self, qps: float, burst: int, clock: Clock = time.monotonic, sleep: Sleep = time.sleep):
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock()
        self._held_until = float("-inf")
        self.waited_seconds = 0.0
        self.waits = 0

    def reserve(self) -> float:
        """Take one token now and return how many seconds the caller must wait before using it."""
        with self._lock:
            now = self._clock()
            hold = max(0.0, self._held_until - now)
            if self.qps <= 0:
                return hold
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            debt = -self._tokens / self.qps if self._tokens < 0 else 0.0
            return max(debt, hold)

    def acquire(self) -> float:
        """Block until a token is available and no hold is open; returns the seconds waited.

        A hold set while the caller slept for its token (another request's 429) is waited
        out too before the token is used: the whole bucket is held shut."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        waited = wait + self.wait_hold()
        if waited > 0:
            with self._lock:
                self.waits += 1
                self.waited_seconds += waited
        return waited

    def wait_hold(self) -> float:
        """Sleep until no hold is open (holds may be extended meanwhile); the seconds slept."""
        slept = 0.0
        while True:
            with self._lock:
                remaining = self._held_until - self._clock()
            if remaining <= 0:
                return slept
            self._sleep(remaining)
            slept += remaining

    def hold_until(self, when: float) -> None:
        """Refuse tokens until clock time `when` (a server's Retry-After)."""
        with self._lock:
            self._held_until = max(self._held_until, when)

    @property
    def held_until(self) -> float:
        return self._held_until


class Window:
    """An AIMD bound on concurrent requests: halve on 429, grow by `growth`/size per success."""

    def __init__(self, size: int, growth: float = 0.1):
        self.max = max(1, size)
        self.growth = growth
        self.size = float(self.max)
        self.in_use = 0
        self.smallest = self.max
        self._cond = threading.Condition()

    def acquire(self) -> None:
        with self._cond:
            while self.in_use >= int(self.size):
                self._cond.wait()
            self.in_use += 1

    def release(self, throttled: bool) -> None:
        with self._cond:
            self.in_use -= 1
            if throttled:
                self.size = max(1.0, self.size / 2)
                self.smallest = min(self.smallest, int(self.size))
            else:
                self.size = min(float(self.max), self.size + self.growth / self.size)
            self._cond.notify_all()


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff: attempt n waits uniform(0, min(cap, base·2^(n-1))).

    A server that does not answer (connection refused, a 5xx, a request that timed out)
    is tried again at least every `transient_cap` seconds: such a try costs the server
    nothing, and a loop waiting 30 s would stay blind for that long after it is back."""

    base: float = 0.5
    cap: float = 30.0
    transient_cap: float = 5.0
    max_attempts: int = 10  # for transient errors (connection, 5xx)
    max_throttled_attempts: int = 60  # a 429 says "come back later": keep coming back, for longer

    def ceiling(self, attempt: int, throttled: bool = True) -> float:
        cap = self.cap if throttled else min(self.cap, self.transient_cap)
        return min(cap, self.base * 2 ** (attempt - 1))


@dataclass
class RetryStats:
    """What the retry loop saw: every retried error, and the 429s among them."""

    retries: int = 0
    throttled: int = 0
    retry_after_seconds: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, error: BaseException | None, wait: float) -> None:
        with self._lock:
            self.retries += 1
            self.waits.append(wait)
            if isinstance(error, Throttled):
                self.throttled += 1
                if error.retry_after is not None:
                    self.retry_after_seconds.append(error.retry_after)


def retry_wait(backoff: Backoff, error: BaseException | None, attempt: int, rng: random.Random) -> float:
    """The pure retry policy: how long to wait after `attempt` failed with `error`.

    A throttled answer waits at least its Retry-After even above the cap: the server
    asked for it, and coming back sooner only earns another 429.
    """
    jitter = rng.uniform(0.0, backoff.ceiling(attempt, throttled=isinstance(error, Throttled)))
    retry_after = getattr(error, "retry_after", None) or 0.0
    return max(retry_after, jitter)


class Throttle:
    """Token bucket + tenacity retry policy; `call(fn)` runs `fn` as one admitted request."""

    def __init__(
        self,
        qps: float,
        burst: int,
        backoff: Backoff = Backoff(),
        concurrency: int = 64,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
    ):
        self.bucket = TokenBucket(qps, burst, clock=clock, sleep=sleep)
        self.window = Window(concurrency)
        self.backoff = backoff
        self.stats = RetryStats()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()

    def _wait(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        with self._rng_lock:
            wait = retry_wait(self.backoff, error, state.attempt_number, self._rng)
        if isinstance(error, Throttled) and error.retry_after:
            self.bucket.hold_until(self._clock() + error.retry_after)
        self.stats.record(error, wait)
        return wait

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` after taking a token; retry throttled and transient failures.

        Permanent errors (4xx other than 429) propagate at once; after `max_attempts`
        the last transient error propagates as it was.
        """

        def admitted() -> T:
            self.bucket.acquire()
            self.window.acquire()
            # a slot in the window may have taken a while: a hold set meanwhile applies
            self.bucket.wait_hold()
            throttled = False
            try:
                return fn()
            except Throttled:
                throttled = True
                raise
            finally:
                self.window.release(throttled)

        def stop(state: tenacity.RetryCallState) -> bool:
            error = state.outcome.exception() if state.outcome else None
            limit = self.backoff.max_throttled_attempts if isinstance(error, Throttled) else self.backoff.max_attempts
            return state.attempt_number >= limit

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((Throttled, Unavailable)),
            wait=self._wait,
            stop=stop,
            sleep=self._sleep,
            reraise=True,
        )
        return retrying(admitted)
