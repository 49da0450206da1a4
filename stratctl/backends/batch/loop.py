"""The submit loop of a study on a batch scheduler that runs each attempt as one job
(Slurm; backends/batch/scheduler.py): the same study, throttle, policy and recovery rules as on
Kubernetes, through the scheduler's own commands.

Each cycle lists the study's attempts (one call, plus the marks of those the scheduler no
longer lists); asks the shared policy (run/policy.py) how many trials may be in
flight, from the scheduler's view: attempts pending for capacity are the gangs waiting for
GPUs, the free GPUs of each node give the whole gangs they hold; and submits that many
trials' next attempts through the shared token bucket and retry policy
(run/throttle.py). The recovery rules are Kubernetes' (run/recovery.py): a failed attempt
is retried as the next attempt while the trial has failures left (retries.max_failures);
a preempted one resumes from its checkpoint, in the same job the scheduler requeued
(Slurm: its restarts) or in the next attempt (YARN), while the trial has preemptions left
(retries.max_preemptions; never counted as failures). A trial past either limit is given
up: marked failed with the reason (`Scheduler.give_up`, which ends a requeued attempt).

Exactly once, across crashes: an attempt has a deterministic name the scheduler keeps.
Before a trial is submitted the cycle has listed every attempt of the study; a submit
whose answer was lost (a timeout: it may have gone through) is looked up before it is
sent again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stratctl.attempt import Attempt
from stratctl.backends.batch.blocks import Blocks
from stratctl.backends.batch.driverfile import FileStore
from stratctl.backends.batch.moves import QueueMoves
from stratctl.backends.batch.scheduler import Scheduler, study_directory
from stratctl.backends.batch.search import Journal, Search
from stratctl.backends.batch.trials import (
    attempt_view,
    gang_size,
    gangs,
    gangs_fit,
    given_up_of,
    limits_of,
    trial_state,
)
from stratctl.core.merging import merging
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.errors import ClusterError, Unavailable, transient
from stratctl.run.cycle import Cycle
from stratctl.run.driver import Driver, expiry, identity
from stratctl.run.loop import Deciding, Loop
from stratctl.run.options import SubmitOptions, default_policy
from stratctl.run.outage import Change, Outage
from stratctl.run.policy import AdaptivePolicy, Observed, StaticPolicy
from stratctl.run.progress import Progress, Reporter, Silent
from stratctl.run.recovery import Kind, next_action
from stratctl.run.storage import StorageMirror
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState


class AttemptLoop(Cycle):
    """The shared cycle (run/cycle.py) over a `Scheduler`: no capability beyond it."""

    def __init__(
        self,
        study: Study,
        trials: list[Trial],
        scheduler: Scheduler,
        throttle: Throttle,
        options: SubmitOptions,
        reporter: Reporter | None = None,
        policy: AdaptivePolicy | StaticPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        storage: StorageMirror | None = None,
    ) -> None:
        self.study, self.scheduler, self.throttle = study, scheduler, throttle
        closed_loop = study.strategy.closed_loop  # trials exist once the search asks for them (search.py)
        self.trials = {t.name: t for t in trials} if not closed_loop else {}
        self.order = [t.name for t in trials] if not closed_loop else []
        self.options, self.detach = options, options.detach
        self.reporter = reporter or Silent()
        self.merging = merging(study)
        merged = self.merging.merged and hasattr(scheduler, "prepare_block")
        # a block's throttle starts its tasks only at the scheduler's next pass after each
        # change: on an idle cluster it starts at the free GPUs, not at `initial` and doubling
        self.policy = policy or default_policy(study, options, start_free=merged)
        self.limits = limits_of(study)
        self.clock, self.sleep = clock, sleep
        self.progress = Progress(
            study=study.name,
            total=len(self.order),
            backend=scheduler.kind,
            create_command=scheduler.create_command,
            limit_words=scheduler.limit_words,
            calls_word=scheduler.calls_word,
            scheduler=scheduler.title,
        )
        # whole gangs of free GPUs are counted in the largest trial's shape (all trials' when they share one)
        self.gangs = gangs(study, trials)  # each trial's GPUs per task (a searched trial's once asked)
        shapes = list(self.gangs.values())
        largest: tuple[int, ...] = max(shapes, key=gang_size) if shapes else ()
        self.gang = list(largest)
        self._pending_since: dict[str, float] = {}
        self.preemptions: dict[str, int] = {}
        self._first = True
        self._silent = False  # the controller has not answered since the last whole cycle
        self._seen: dict[str, Attempt] = {}  # each trial's latest attempt, as last observed
        self._draining = False  # the study is drained, as last observed
        self._gpus: list[int] | None = None  # each node's free GPUs, read just before the attempts
        self.deciding = Deciding(lambda message: self.reporter.event(message), lambda: self.clock())
        throttle.on_retry = self._retrying
        self.blocks: Blocks | None = None
        if merged:
            self.blocks = Blocks(scheduler, throttle, lambda: self._seen, self.merging.block, self.reporter.event)  # type: ignore[arg-type]
            self.capabilities = [self.blocks]
        if len(getattr(scheduler, "queues", ())) > 1 and hasattr(scheduler, "move"):  # queue fallback by moves (YARN)
            moves = QueueMoves(
                scheduler,  # type: ignore[arg-type]
                lambda: self._seen,
                lambda: self._pending_since,
                options.pending_grace,
                lambda: self.clock(),
                lambda message: self.reporter.event(message),
                lambda trial: sum(self.gangs.get(trial, ())),
            )
            self.capabilities = [*self.capabilities, moves]
        self.search: Search | None = None
        if closed_loop:
            self.search = Search(self, Journal(study_directory(study)), storage, self.reporter.event)
            self.capabilities = [*self.capabilities, self.search]

    def _retrying(self, error: BaseException | None, wait: float) -> None:
        """Said once per stretch the controller does not answer: the loop backs off, it is not stuck."""
        if isinstance(error, Unavailable) and not self._silent:
            self._silent = True
            self.reporter.event(
                f"{self.scheduler.controller}: {error}; backing off and trying again "
                "(nothing is submitted twice: each send whose answer was lost is looked up first)"
            )

    # -- what a closed-loop search needs of the loop (search.py's Host) --------------------

    def seen(self) -> dict[str, Attempt]:
        return self._seen

    def call(self, fn: Callable[[], Any], mutating: bool = False) -> Any:
        return self.throttle.call(fn, mutating=mutating)

    def register(self, trial: Trial) -> None:
        self.trials[trial.name] = trial
        self.order.append(trial.name)
        if trial.name not in self.gangs:
            self.gangs.update(gangs(self.study, [trial]))

    # -- the cycle's steps (run/cycle.py) -------------------------------------------------

    def observe(self) -> dict[str, TrialState]:
        """The free GPUs, then every attempt of the study (one call) and whether it is
        drained; each trial's latest attempt's state (WAITING: none yet). The GPUs are read
        first: a trial that ends between the two reads is then seen ended with its GPUs
        still busy (they count next cycle), never running with its GPUs free, which
        would count them twice: as the trial's and as room for more (the target grew by
        a whole wave of ends that a scheduler pass had not refilled yet)."""
        self._gpus = self._free_gpus()
        self._seen = seen = self.throttle.call(self.scheduler.attempts)
        self._draining = self.scheduler.drained()
        return {n: seen[n].state if n in seen else TrialState.WAITING for n in self.order}

    def _free_gpus(self) -> list[int] | None:
        """Each node's free GPUs; None without a capacity signal this cycle (the policy goes
        on without it). --detach reads none, as on Kubernetes: every trial goes in up to the
        cap, and it returns."""
        if self.options.detach:
            return None
        try:
            return self.throttle.call(self.scheduler.free_gpus)
        except ClusterError:
            return None

    def recover(self, states: dict[str, TrialState]) -> dict[str, TrialState]:
        """Each trial's state by the recovery rules; a failed attempt with failures left is
        RETRYING (its next is due); a trial past retries.max_failures or max_preemptions is
        given up."""
        seen, draining = self._seen, self._draining
        given_up = given_up_of(self.scheduler)
        out = {}
        for name in self.order:
            attempt = seen.get(name)
            if attempt is None:
                out[name] = TrialState.WAITING
                continue
            if name in given_up:
                if attempt.state.in_flight:  # given up by a run that stopped before its attempt was ended
                    self._give_up(attempt, given_up[name])
                out[name] = TrialState.FAILED
                continue
            if self._first or attempt.state is TrialState.SUSPENDED or draining:
                # restarts from before this run, or `drain`'s own requeues: not preemptions to report
                self.preemptions[name] = attempt.restarts
            elif attempt.restarts > self.preemptions.get(name, 0):
                if attempt.preemptions <= self.limits.max_preemptions:  # past it, the trial is given up below
                    self.reporter.event(
                        f"trial {name}: preempted, requeued by {self.scheduler.title} (restart "
                        f"{attempt.restarts} of job {attempt.job}): it resumes from its checkpoint; "
                        "not a failure"
                    )
                self.preemptions[name] = attempt.restarts
            out[name] = self._recover(attempt, draining)
        if self._first:  # trials submitted before this run (a rerun, another launcher): recognised, not resent
            self.progress.existing, self._first = len(seen), False
        return out

    def _recover(self, attempt: Attempt, draining: bool) -> TrialState:
        """The trial's state by the recovery rules; a trial past a limit is given up here."""
        action = next_action(attempt_view(attempt), self.limits, draining)
        if action is None or action.kind is not Kind.GIVE_UP:
            return trial_state(attempt, self.limits)
        if not self._give_up(attempt, action.reason):
            return attempt.state  # not due: given up next cycle
        self.reporter.event(f"trial {attempt.trial}: given up, {action.reason}")
        return TrialState.FAILED

    def _give_up(self, attempt: Attempt, reason: str) -> bool:
        """Mark the trial given up and end its attempt; False when the scheduler did not answer."""
        try:
            self.throttle.call(lambda: self.scheduler.give_up(attempt, reason), mutating=True)
        except ClusterError as exc:
            self.reporter.event(f"trial {attempt.trial}: cannot give it up yet ({exc}); trying again")
            return False
        return True

    def submit_attempt(self, trial: Trial, number: int) -> None:
        """Submit one attempt (looked up first when a previous send's answer was lost)."""
        prepared = self.scheduler.prepare(trial, number)
        sent: list[bool] = []

        def once() -> None:
            if sent and self.scheduler.find(prepared):  # the last send went through before its answer was lost
                return
            sent.append(True)
            self.scheduler.create(prepared)

        self.throttle.call(once, mutating=True)

    def pressure(self, states: dict[str, TrialState]) -> Observed:
        seen, draining = self._seen, self._draining
        now = self.clock()
        queued = {n for n, a in seen.items() if a.queued}  # held back by their block's throttle: not in flight
        pending = [n for n, s in states.items() if s is TrialState.PENDING and n not in queued]
        for name in list(self._pending_since):
            if name not in pending:
                del self._pending_since[name]
        for name in pending:
            self._pending_since.setdefault(name, now)
        late = [n for n in pending if now - self._pending_since[n] > self.options.pending_grace]
        stuck = sum(1 for n in late if seen[n].waits_for_capacity)
        # why they wait, in the scheduler's words (Resources, Priority, a QOS or association limit): shown
        reasons = Counter(seen[n].reason for n in late if seen[n].reason)
        self.progress.stuck = len(late) if reasons else 0
        self.progress.blocked = ", ".join(f"{why} ({count})" for why, count in reasons.most_common(3))
        gpus = self._gpus
        free, fit = (None, None) if gpus is None else (sum(gpus), gangs_fit(gpus, self.gang))
        return Observed(
            in_flight=sum(1 for n, s in states.items() if s.in_flight and n not in queued),
            pending=len(pending),
            drained=draining,
            waiting=sum(1 for s in states.values() if s in (TrialState.WAITING, TrialState.RETRYING)) + len(queued),
            stuck=stuck,
            free_gpus=free,
            gangs_fit=fit,
        )

    def waiting(self, states: dict[str, TrialState]) -> list[str]:
        """Trials whose next attempt is due, in the study's order (refused ones aside)."""
        due = (TrialState.WAITING, TrialState.RETRYING)
        return [n for n in self.order if states[n] in due and n not in self.progress.errors]

    def admit(self, names: list[str]) -> list[str]:
        """Submit the trials' next attempts, in parallel (first attempts as one block when
        merged); the names submitted."""
        seen = self._seen
        submitted = []
        if self.blocks is not None and (first := [n for n in names if n not in seen]):
            names = [n for n in names if n in seen]  # next attempts: single jobs
            try:
                block, first = self.blocks.send([self.trials[n] for n in first])
            except ClusterError as exc:
                if transient(exc):
                    self.reporter.event(f"{len(first)} trials: not submitted this cycle ({exc}); trying again")
                else:  # a block refused is each of its trials refused
                    self.progress.errors.update(dict.fromkeys(first, str(exc)))
                    self.reporter.event(f"a block of {len(first)} trials: {exc}")
            else:
                self.reporter.event(
                    f"{block.job}: {len(first)} trial{'s' if len(first) != 1 else ''} submitted as one job array"
                )
                submitted += first
                self.progress.created += len(first)
                for i, name in enumerate(first):  # until the next listing: the block's throttle lets `room` in
                    self._seen[name] = Attempt(
                        name, 0, TrialState.PENDING, block=block.trial[1:], queued=i >= self.blocks.room
                    )
        futures = {
            n: self._pool.submit(self.submit_attempt, self.trials[n], seen[n].attempt + 1 if n in seen else 0)
            for n in names
        }
        for name, future in futures.items():
            try:
                future.result()
            except ClusterError as exc:
                if transient(exc):
                    self.reporter.event(f"trial {name}: not submitted this cycle ({exc}); trying again")
                    continue
                self.progress.errors[name] = str(exc)
                self.reporter.event(f"trial {name}: {exc}")
                continue
            if name in seen:
                self.reporter.event(
                    f"trial {name}: attempt {seen[name].attempt + 1} submitted "
                    f"(attempt {seen[name].attempt} {seen[name].state.value})"
                )
            submitted.append(name)
            self.progress.created += 1
        return submitted

    def tally(self, states: dict[str, TrialState]) -> None:
        p, s = self.progress, self.scheduler
        counts = {state: 0 for state in TrialState}
        for name, state in states.items():
            counts[state if name not in p.errors else TrialState.FAILED] += 1
        p.queued = sum(1 for n, a in self._seen.items() if a.queued and states.get(n) is TrialState.PENDING)
        p.pending, p.running = counts[TrialState.PENDING] - p.queued, counts[TrialState.RUNNING]
        p.succeeded, p.failed = counts[TrialState.SUCCEEDED], counts[TrialState.FAILED]
        p.pruned = counts[TrialState.PRUNED]
        unasked = self.search.remaining if self.search is not None else 0  # the budget not asked yet waits too
        p.waiting = counts[TrialState.WAITING] + counts[TrialState.RETRYING] + unasked
        p.api_requests = s.calls
        p.api_sent, p.api_refused = dict(s.sent), dict(s.refused)
        p.api_writes, p.throttled_429 = s.sent.get(s.create_command, 0), sum(s.refused.values())
        p.throttle_waits, p.throttle_wait_seconds = self.throttle.bucket.waits, self.throttle.bucket.waited_seconds

    def finished(self, states: dict[str, TrialState]) -> bool:
        if self.search is not None and (not self.search.search.started or self.search.remaining):
            return False
        return all(s.finished or n in self.progress.errors for n, s in states.items())

    # -- the loop -------------------------------------------------------------------------

    def step(self) -> bool:
        """One cycle of the shared loop (run/loop.py); True when the run is over."""
        over = super().step()
        if self._silent:
            self._silent = False
            self.reporter.event(f"{self.scheduler.controller}: answering again")
        return over

    def pause(self) -> None:
        self.sleep(self.options.poll_interval)

    def left_behind(self) -> str:
        return "attempts already submitted keep running; run the same command again later: they are recognised"

    def stopped(self, interrupted: bool) -> None:
        """Nothing to record: the scheduler and the trials' directories hold the study's state."""

    def run(self) -> Progress:
        """The shared loop (run/loop.py) over this scheduler: a controller that does not answer
        is waited for, cycle after cycle, up to the outage timeout (`--outage-timeout`)."""
        outage = Outage(self.options.outage_timeout, clock=self.clock, server=self.scheduler.controller)
        outage.listen(self._heard)
        loop = Loop(
            self,
            outage,
            self.reporter,
            self.options.poll_interval,
            self.options.timeout,
            clock=self.clock,
            sleep=self.sleep,
            driver=self._hold(),
        )
        with ThreadPoolExecutor(self.options.workers) as self._pool:
            return loop.run()

    def _hold(self) -> Driver:
        """The study's driver mark, taken (run/driver.py): `.driver.json` in its directory."""
        driver = Driver(
            FileStore(study_directory(self.study)),
            self.study.name,
            identity(),
            ttl=expiry(self.options.poll_interval),
            take_over=self.options.take_over,
            sleep=self.sleep,
            say=self.reporter.event,
            dead=self.scheduler.driver_gone,
        )
        driver.acquire()
        return driver

    def _heard(self, change: Change) -> None:
        """Whole cycles that failed, or one that went through again: said once each."""
        if change.down:
            self._retrying(Unavailable(change.error), 0.0)
        elif self._silent:
            self._silent = False
            self.reporter.event(f"{self.scheduler.controller}: answering again")


def submit_attempts(
    prepared: Any,  # backends/launch.py's Prepared: the study, its trials and renderer
    scheduler: Scheduler,
    options: SubmitOptions,
    qps: float | None,
    burst: int | None,
    reporter: Reporter | None,
    policy: AdaptivePolicy | StaticPolicy | None = None,
) -> Progress:
    """`stratctl submit` of a study whose backend runs an attempt as one job (for Slurm, the
    cluster its commands reach: SLURM_CONF and the rest of Slurm's environment)."""
    study = prepared.study  # what its backend cannot honour was refused when it loaded (core/capabilities.py)
    if options.dry_run == "client":  # every first attempt built: what would be submitted
        for trial in prepared.trials:
            scheduler.check(trial)
        return Progress(
            study=study.name,
            total=len(prepared.trials),
            created=len(prepared.trials),
            dry_run="client",
            backend=study.backend,
        )
    if prepared.trials:  # what a first attempt needs on this machine (a YARN study's AM jar): said before any request
        scheduler.check(prepared.trials[0])
    throttle = Throttle(
        qps=study.throttle.qps if qps is None else qps,
        burst=max(1, study.throttle.burst if burst is None else burst),
        concurrency=options.workers,
    )
    storage = StorageMirror.open(options.storage, study) if options.storage else None  # a bad URL changes nothing
    return AttemptLoop(study, prepared.trials, scheduler, throttle, options, reporter, policy, storage=storage).run()
