"""Client-side admission of API requests: the mechanism that applies the request pace.

Every request stratctl makes takes, while the API is throttled and it is a write, the single
write seat; then a slot in a concurrency window; then a token from a token bucket (`qps`,
at most `burst` at once); then it is sent. The pace (`pace`: a pure rule
on the API server's answers) sets the bucket's rate and the window's size after every
answer: a 429 halves the rate and closes the window to one request, answers open them
again. A 429 also pauses the whole client briefly (the Retry-After, up to 1 s, doubling
while probes fail, up to 4 s: `pace` says why not the whole Retry-After) — requests already
waiting for a token or a slot wait the pause out before they go — and the refused request
itself goes again when the pause ends. Connection errors and other 5xx are retried with
full-jitter exponential backoff; other errors propagate at once.

Refusals are waited out for as long as the command's bound (`patience`: seconds during which
every request was refused and none answered), whenever they come: before the first request
of a command has had any answer as much as in the middle of a submission. Whoever runs the
command is told once that the API server is throttling this user (`on_throttled`); past the
bound, the request ends in `StillThrottled`, which nothing retries: the command stops with
one line that says so (exit 3).

Time is injected (`clock`, `sleep`, `rng`) so tests assert exact schedules.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from stratctl.errors import ClusterError, Reconnect, StillThrottled, Throttled, Unavailable
from stratctl.run import pace as rule

if TYPE_CHECKING:
    import tenacity

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

    def set_rate(self, qps: float) -> None:
        """Change the rate from now on (tokens banked so far are kept)."""
        with self._lock:
            now = self._clock()
            if self.qps > 0:
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self.qps = qps

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

    def take(self, n: int) -> int:
        """Up to `n` whole tokens banked now, taken without waiting (none while a hold is
        open); how many. For writes someone else makes on the caller's behalf (a block's
        pods, made by the job controller)."""
        with self._lock:
            now = self._clock()
            if n <= 0 or now < self._held_until:
                return 0
            if self.qps <= 0:
                return n
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            got = max(0, min(n, int(self._tokens)))
            self._tokens -= got
            return got

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
    """A bound on requests in flight whose size the pace sets (`resize`)."""

    def __init__(self, size: int):
        self.size = max(1, size)
        self.in_use = 0
        self.smallest = self.size
        self._cond = threading.Condition()

    def resize(self, size: int) -> None:
        with self._cond:
            self.size = max(1, size)
            self.smallest = min(self.smallest, self.size)
            self._cond.notify_all()

    def acquire(self) -> None:
        with self._cond:
            while self.in_use >= self.size:
                self._cond.wait()
            self.in_use += 1

    def release(self) -> None:
        with self._cond:
            self.in_use -= 1
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
    max_attempts: int = 10  # for transient errors (connection, 5xx); a 429 is bounded in time (`patience`)

    def ceiling(self, attempt: int, throttled: bool = True) -> float:
        cap = self.cap if throttled else min(self.cap, self.transient_cap)
        return min(cap, self.base * 2.0 ** (attempt - 1))


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


def retry_wait(backoff: Backoff, attempt: int, rng: random.Random) -> float:
    """The pure retry policy of a transient failure: how long to wait after `attempt` failed.
    (A refused request waits for the pace's pause instead.)"""
    return rng.uniform(0.0, backoff.ceiling(attempt, throttled=False))


class Throttle:
    """Token bucket + window + write seat, paced by the API server's answers; retries.

    `call(fn, mutating)` runs `fn` as one admitted request."""

    def __init__(
        self,
        qps: float,
        burst: int,
        backoff: Backoff = Backoff(),
        concurrency: int = 64,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        pace: rule.PaceConfig | None = None,
        patience: float = 300.0,
    ):
        self.bucket = TokenBucket(qps, burst, clock=clock, sleep=sleep)
        self.config = pace or rule.PaceConfig(qps=qps, window=concurrency)
        self.state = rule.initial(self.config)
        self.window = Window(int(self.state.size))
        self.writes = threading.Lock()  # the write seat, taken while throttled
        self.backoff = backoff
        self.stats = RetryStats()
        self.on_retry: Callable[[BaseException | None, float], None] | None = None  # told of each retry and its wait
        self.patience = patience  # seconds refused with nothing answered before a refused request gives up
        # told once a throttling episode (every request refused, none answered) begins: its first 429
        self.on_throttled: Callable[[Throttled], None] | None = None
        self._told: float | None = None  # the episode (its first refusal's time) already told
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()  # the pace's state and the rng

    # -- the pace ---------------------------------------------------------------------

    def _apply(self, state: rule.PaceState) -> None:
        """Adopt a new pace state (called under the lock): rate, window and pause."""
        before, self.state = self.state, state
        if state.rate != before.rate and self.config.qps > 0:
            self.bucket.set_rate(state.rate)
        if int(state.size) != int(before.size):
            self.window.resize(int(state.size))
        if state.paused_until > before.paused_until:
            self.bucket.hold_until(state.paused_until)

    def _refused(self, error: Throttled) -> None:
        with self._lock:
            self._apply(rule.refused(self.state, self.config, self._clock(), error.retry_after))

    def _answered(self, seconds: float, mutating: bool) -> None:
        with self._lock:
            self._apply(rule.answered(self.state, self.config, self._clock(), seconds, mutating))

    def throttled(self) -> bool:
        with self._lock:
            return rule.throttled(self.state, self.config, self._clock())

    def pressure(self) -> rule.Pressure:
        """The request pace now, for the panel, the record and `status`."""
        with self._lock:
            return rule.pressure(self.state, self.config, self._clock())

    # -- one request --------------------------------------------------------------------

    def clock(self) -> float:
        """The time now, on the clock this throttle paces by."""
        return self._clock()

    def stalled(self) -> float:
        """Seconds every request has been refused with none answered (0: one was)."""
        with self._lock:
            return rule.stalled(self.state, self._clock())

    def _wait(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        tell = False
        with self._lock:
            now = self._clock()
            if isinstance(error, Throttled):  # again when the pause ends (it may be a probe)
                wait = max(0.0, self.state.paused_until - now)
                episode = self.state.refused_since
                tell, self._told = episode != self._told, episode
            elif isinstance(error, Reconnect):  # its connection died, the server answers: at once
                wait = 0.0
            else:
                wait = retry_wait(self.backoff, state.attempt_number, self._rng)
        self.stats.record(error, wait)
        if tell and isinstance(error, Throttled) and self.on_throttled is not None:
            self.on_throttled(error)
        if self.on_retry is not None:
            self.on_retry(error, wait)
        return wait

    def _past_bound(self) -> bool:
        """Whether the next try after a refusal (when the pause ends) would come after the
        command's bound of refusals with nothing answered."""
        with self._lock:
            now = self._clock()
            return rule.stalled(self.state, now) + max(0.0, self.state.paused_until - now) > self.patience

    def _gave_up(self, error: Throttled) -> StillThrottled:
        """The one error of a command whose requests were refused past its bound: it names
        the throttling, not the last request."""
        from stratctl.run.outage import duration

        after = f", Retry-After {error.retry_after:g}s" if error.retry_after is not None else ""
        return StillThrottled(
            f"the API server has refused every request of this user (HTTP {error.status} Too Many "
            f"Requests{after}: API Priority and Fairness is throttling it) for longer than this "
            f"command waits ({duration(self.patience)}): gave up",
            status=error.status,
            reason=error.reason,
        )

    def call(self, fn: Callable[[], T], mutating: bool = False) -> T:
        """Run `fn` after taking a token and a slot (and, for a write while throttled, the
        write seat); retry refused and transient failures.

        Permanent errors (4xx other than 429) propagate at once; after `max_attempts`
        the last transient error propagates as it was.
        """
        try:  # most requests go through at once: no retry machinery for them
            return self._admitted(fn, mutating)
        except (Throttled, Unavailable) as exc:
            failed: BaseException = exc
        return self._retried(fn, mutating, failed)

    def _admitted(self, fn: Callable[[], T], mutating: bool) -> T:
        """One attempt of `fn`: the write seat (a write while throttled), a slot, a token,
        then the request, its answer or refusal told to the pace."""
        seat = self.writes if mutating and self.throttled() else None
        if seat is not None:
            seat.acquire()
        try:
            self.window.acquire()
            try:
                # the token last, once the slot is ours: only requests about to go hold
                # one, so tokens reserved while the rate was cut do not pile up into a
                # debt that outlives the cut (16 waiting creates at 0.5/s: 32 s); its
                # wait includes any pause begun meanwhile
                self.bucket.acquire()
                started = self._clock()
                try:
                    result = fn()
                except Throttled as exc:
                    self._refused(exc)
                    raise
                except Unavailable:
                    raise
                except ClusterError:
                    self._answered(self._clock() - started, mutating)  # the server answered: a 4xx
                    raise
                self._answered(self._clock() - started, mutating)
                return result
            finally:
                self.window.release()
        finally:
            if seat is not None:
                seat.release()

    def _retried(self, fn: Callable[[], T], mutating: bool, failed: BaseException | None) -> T:
        """The attempts after the first one `failed`: backed off, until the bound (refused)
        or `max_attempts` (transient failures)."""

        def again() -> T:  # the first attempt's failure, then the attempts that follow it
            nonlocal failed
            if failed is not None:
                error, failed = failed, None
                raise error
            return self._admitted(fn, mutating)

        import tenacity  # loaded by the first request that fails, not by every command's start-up

        def stop(state: tenacity.RetryCallState) -> bool:
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, Throttled):  # "come back later": while the next try comes within the bound
                return self._past_bound()
            return state.attempt_number >= self.backoff.max_attempts

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((Throttled, Unavailable)),
            wait=self._wait,
            stop=stop,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            return retrying(again)
        except Throttled as exc:  # refused past the bound
            raise self._gave_up(exc) from None
