"""The submit loop: reconcile a study's trials with the cluster, at the pace it can absorb.

Each cycle observes the study's jobs (one paginated list), asks the policy how many
trials may be in flight, creates that many more through the throttle, and sleeps. The
cluster is the source of truth: a rerun after a crash lists what exists and creates only
what is missing; a 409 whose spec-hash label matches counts as already submitted.

An API server that stops answering (restarted, etcd paused) is a pause, not a verdict: a
cycle that fails on a transient error is tried again with growing waits, the display
says once that the server is out and once that it is back, and a trial whose create
failed that way stays waiting (only a refusal, like an invalid manifest, is its verdict).
The loop gives up (`Unreachable`, exit 3) once the server has been silent for the
outage timeout.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from stratctl import labels
from stratctl.backends.kubernetes.blocked import Blocked
from stratctl.backends.kubernetes.cluster import BATCH_JOB, PODGROUP, QUEUE, VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.keeper import RecordKeeper
from stratctl.backends.kubernetes.mirror import Mirror, watch_health
from stratctl.backends.kubernetes.placement import Placer, Placing
from stratctl.backends.kubernetes.record import (
    API_QUOTA_KEY,
    MOVED_KEY,
    PLACEMENTS_KEY,
    StudyRecord,
)
from stratctl.backends.kubernetes.requeue import Requeue, create_attempt, pod_starts
from stratctl.backends.kubernetes.salvage import Salvage
from stratctl.backends.kubernetes.searching import Searching
from stratctl.backends.kubernetes.shedding import Shedding
from stratctl.backends.kubernetes.state import TrialState, classify, latest_attempts, trial_of
from stratctl.core import shape
from stratctl.core.changes import spec_text
from stratctl.core.render import Renderer, min_resources
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.errors import (
    ClusterError,
    NotFound,
    SpecConflict,
    Unreachable,
    transient,
)
from stratctl.run.loop import Deciding, Loop
from stratctl.run.options import SubmitOptions, default_policy
from stratctl.run.outage import Change, Outage, duration
from stratctl.run.pace import api_room
from stratctl.run.packing import Packer, Packing
from stratctl.run.policy import AdaptiveConfig, Decision, Observed
from stratctl.run.progress import Progress, Reporter, Silent
from stratctl.run.queues import amounts
from stratctl.run.throttle import Throttle

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.capacity import ClusterSignals
    from stratctl.backends.kubernetes.storage import StorageMirror


MIN_CYCLE = 0.2  # seconds: the shortest cycle when job changes wake the loop early
WINDOW = 1024  # creates handed to the worker pool at a time, at least (8 per worker)


def gang_shape(study: Study) -> list[int]:
    """GPUs of each pod of one trial (of a study whose trials share one shape): the shape
    free GPUs must hold for it to start."""
    return list(shape.gang(study))


def study_selector(study: Study) -> str:
    return f"{labels.STUDY}={study.name}"


def job_kind(study: Study) -> tuple[str, str]:
    return VOLCANO_JOB if study.workload == "volcano" else BATCH_JOB


class Submitter:
    """Runs one study to completion (or until detached / interrupted)."""

    def __init__(
        self,
        study: Study,
        trials: list[Trial],
        renderer: Renderer,
        cluster: Cluster,
        throttle: Throttle,
        options: SubmitOptions = SubmitOptions(),
        policy=None,
        reporter: Reporter | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        source: str = "",
        manifests: dict[str, list[dict]] | None = None,
        wall: Callable[[], float] = time.time,
    ):
        self.study, self.renderer, self.cluster, self.throttle, self.options = (
            study,
            renderer,
            cluster,
            throttle,
            options,
        )
        self.policy = policy or default_policy(study, options)
        self.reporter = reporter or Silent()
        self.clock, self.sleep, self.wall = clock, sleep, wall
        self.source, self.namespace = source, study.namespace
        self._kind = job_kind(study)
        self._take_trials(trials, manifests)
        self._attach(trials)
        self._keep_record(source)
        self._start_state()

    def _say(self, message: str) -> None:
        self.reporter.event(message)

    def _take_trials(self, trials: list[Trial], manifests: dict[str, list[dict]] | None) -> None:
        """The study's trials, or a closed-loop search that asks them as it goes
        (closedloop.py): `trials` are then the first it would ask, rendered already (and what
        a dry run sends)."""
        study, renderer = self.study, self.renderer
        self.search = None
        if study.strategy.closed_loop:  # its modules (samplers, results, pruning) load for such a study alone
            from stratctl.backends.kubernetes.closedloop import ClosedLoop

            self.search = ClosedLoop(study)
        self._first = list(trials)
        self.trials = {t.name: t for t in trials} if self.search is None else {}
        self.order = [t.name for t in trials] if self.search is None else []
        self._manifests = manifests or {}  # first attempts rendered up front (launch.prepare)
        # each trial's expected seconds, when the study states them (backfill picks by them)
        self._expected = (
            {t.name: renderer.expected_seconds(t) for t in trials}
            if renderer is not None and renderer.states_duration
            else {}
        )
        # each trial's shape, when the study's trials differ in shape: admitted by packing them
        # into the free GPUs (run/packing.py), with the passed-over times its aging rule needs
        self._shapes = (
            {t.name: renderer.shape(t) for t in trials} if renderer is not None and study.varying_shape else {}
        )
        self._packer = Packer(self._shapes, study.throttle.aging_seconds, self._say)
        self._packing: Packing | None = None

    def _attach(self, trials: list[Trial]) -> None:
        """What the loop watches and reads besides its jobs; launch starts the watches."""
        study, cluster, options = self.study, self.cluster, self.options
        self.signals: ClusterSignals | None = None
        self.storage: StorageMirror | None = None  # with --storage
        # The study's jobs, kept by a watch; without it each cycle lists them.
        self.jobs: Mirror | None = None
        # The cluster's Volcano queues, kept by a watch when the study lists several: each new
        # attempt goes to the first with room (placement.py)
        self.queues: Mirror | None = None
        self.placer = (
            Placer(study.queues, self._queue_objects, amounts(min_resources(self._largest(study, trials))), self._say)
            if len(study.queues) > 1
            else None
        )
        # read in the background: a slow Prometheus never delays a cycle
        self.prometheus = None
        if options.prometheus_url:
            from stratctl.backends.kubernetes.prometheus import ControlPlaneWatch, Prometheus

            self.prometheus = ControlPlaneWatch(Prometheus(options.prometheus_url))
        self.blocked = Blocked(cluster, study.namespace, self.reporter.event) if cluster is not None else None
        # Whether the API server answers: the cluster's own account (every request tells it),
        # else the loop's, told by whole cycles.
        self._told = getattr(cluster, "outage", None) is None
        self.outage: Outage = Outage(options.outage_timeout, clock=self.clock) if self._told else cluster.outage
        # the etcd breaker's drain (throttle.on_breaker: drain); with `hold` it does nothing
        self.shedding = Shedding(cluster, study, self._say, self.clock, self.wall)

    def _keep_record(self, source: str) -> None:
        """The study record (keeper.py), the progress, the search's side of the loop
        (searching.py) and the shared decision (run/loop.py)."""
        study = self.study
        budget = self.search.remaining if self.search is not None else len(self.order)
        self.progress = Progress(study=study.name, total=budget)
        record = StudyRecord(
            study=study.name,
            spec_hash=study.spec_hash,
            trials=budget,
            critical=study.critical,
            source=source,
            max_failures=study.retries.max_failures,
            spec=spec_text(study),
        )
        self.keeper = RecordKeeper(
            self.cluster, record, self.namespace, self._say, clock=lambda: self.clock(), wall=lambda: self.wall()
        )
        self.searching = None
        if self.search is not None:  # its trials join the loop's as it asks them
            self.searching = Searching(
                self.search,
                study,
                self.cluster,
                self._kind,
                self.keeper,
                self.progress,
                self.trials,
                self.order,
                self._register,
                self._say,
                lambda: self.wall(),
            )
        self.deciding = Deciding(self._say, lambda: self.clock())

    def _start_state(self) -> None:
        """What the loop knows of the cluster before its first cycle: nothing yet."""
        self._pending_since: dict[str, float] = {}
        self._deletions_seen = 0  # jobs seen deleted, by the last observe
        self._all_jobs: list[dict] = []  # every attempt of the study's trials, as last observed
        self._jobs: dict[str, dict] = {}  # each trial's latest attempt's job, as last observed
        # trials this loop created while its mirror of jobs did not watch yet (`--detach`
        # lists once and watches only from a second cycle on): pending, by name alone, so a
        # single-cycle --detach of 100,000 trials keeps no job of them
        self._unseen: set[str] = set()
        self._observed = False  # observe ran once (the mirror's first list is fresh for it)
        self._paused: set[str] = set()  # trials whose create failed transiently, already said
        self._moved: set[str] = set()  # uids of jobs deleted to move their trial to another queue

    def _largest(self, study: Study, trials: list[Trial]) -> Study:
        """The study as its largest trial runs it (its own shape when trials share one)."""
        if not self._shapes:
            return study
        largest = max(trials, key=lambda t: sum(self._shapes[t.name]))
        return self.renderer.study_for(largest)

    def reference_shape(self) -> list[int]:
        """The shape the cluster's signals count whole gangs of: the study's, or its largest
        trial's when trials differ (packing then decides per trial)."""
        if self._shapes:
            largest: tuple[int, ...] = max(self._shapes.values(), key=lambda s: (sum(s), max(s, default=0), len(s)))
            return list(largest)
        return gang_shape(self.study)

    # -- the study record (keeper.py) ------------------------------------------------

    @property
    def record(self) -> StudyRecord:
        return self.keeper.record

    @record.setter
    def record(self, record: StudyRecord) -> None:
        self.keeper.record = record

    def ensure_record(self) -> None:
        self.keeper.ensure()

    def save_summary(self, force: bool = False) -> None:
        """The study's row and the loop's changed keys into the record, when due (keeper.py)."""
        note = self.progress.api_note or ""
        if note != self.record.api_quota:
            self.keeper.change(API_QUOTA_KEY, api_quota=note, api_quota_at=self.wall())
        if self.placer is not None and self.placer.counts() != self.record.placements:
            self.keeper.change(PLACEMENTS_KEY, placements=self.placer.counts())
        tight = self.progress.api is not None and self.progress.api.tight

        def starts() -> dict | None:  # batch/v1 Jobs' first pods
            return pod_starts(self.cluster, self.namespace, self.study.name, self._kind, self.signals)

        self.keeper.save_summary(force, self.progress.done, tight, self._jobs, starts)

    # -- observe --------------------------------------------------------------------

    def observe(self) -> dict[str, TrialState]:
        if self.jobs is not None:
            if self._observed and not self.jobs.following:  # a second cycle: watch from now on
                self.jobs.follow()  # lists first: what this loop created is in it
                self._unseen.clear()
            jobs, self._deletions_seen = self.jobs.snapshot()
        else:
            jobs = self._list_jobs()
        latest = latest_attempts(jobs)
        self._all_jobs = jobs
        states: dict[str, TrialState] = {}
        for name in self.order:
            if name in latest:
                states[name] = classify(latest[name])
            elif name in self.record.finished:
                states[name] = TrialState(self.record.finished[name])
            elif name in self._unseen:
                states[name] = TrialState.PENDING
            else:
                states[name] = TrialState.WAITING
        self._jobs = latest
        self._observed = True
        return states

    def _list_jobs(self) -> list[dict]:
        """Every attempt of the study's trials, listed now (without a watch of them)."""
        jobs, _ = self.cluster.list(self._kind, self.namespace, label_selector=study_selector(self.study))
        return jobs

    # -- act --------------------------------------------------------------------------

    def _seen(self, obj: dict) -> None:
        """An object this loop created: its jobs are added to the mirror, so the next cycle
        sees them even if the watch lags; before the mirror watches (--detach's first cycle),
        only its trial's name is kept."""
        if self.jobs is not None and obj.get("kind") == self._kind[1]:
            if self.jobs.following:
                self.jobs.add(obj)
            elif (trial := trial_of(obj)) is not None:
                self._unseen.add(trial)

    def submit_trial(self, trial: Trial, dry_run: bool = False, manifests: list[dict] | None = None) -> str:
        """Create every manifest of the trial's first attempt; 'created' or 'existing'.

        A 409 is success when the object there carries the same spec hash.
        """
        manifests = manifests or self._manifests.get(trial.name) or self.renderer.render(trial, attempt=0)
        return create_attempt(self.cluster, manifests, self.namespace, dry_run=dry_run, created=self._seen)

    def _queue_objects(self) -> dict[str, dict]:
        """The cluster's Volcano queues by name: as watched, else read now."""
        if self.queues is not None:
            items = self.queues.items()
        else:
            try:
                items, _ = self.cluster.list(QUEUE)
            except ClusterError:
                items = []
        return {q["metadata"]["name"]: q for q in items}

    def _placed(self, names: list[str], dry_run: bool) -> dict[str, list[dict] | None]:
        """The first attempts of these trials, each sent to its queue (in order: each choice
        counts the gangs placed before it); None: as rendered (one queue, or a dry run)."""
        if self.placer is None or dry_run:
            return {name: None for name in names}
        return {
            name: self.placer.place(
                name, self._manifests.get(name) or self.renderer.render(self.trials[name], attempt=0)
            )
            for name in names
        }

    def _submit_batch(self, names: list[str], pool: ThreadPoolExecutor, dry_run: bool = False) -> list[str]:
        """Create the trials' first attempts; the names submitted.

        A refusal (an invalid manifest, a 403 on creates that never worked, a spec conflict)
        is the trial's verdict, kept in `progress.errors`. A transient failure (the API
        server out or restarting) leaves the trial waiting for the next cycle: a create
        whose answer was lost may have gone through, and then the retry's 409 with the same
        spec hash counts it as submitted. When nothing got through, the cycle fails with
        the first such error, so the loop waits for the server (a server dry run, one pass,
        reports every failure per trial instead)."""
        placed = self._placed(names, dry_run)
        submitted: list[str] = []
        paused: dict[str, ClusterError | SpecConflict] = {}
        for name, future in self._sent(names, pool, dry_run, placed):
            try:
                outcome = future.result()
            except (ClusterError, SpecConflict) as exc:
                if isinstance(exc, Unreachable) or (transient(exc) and not dry_run):
                    paused[name] = exc
                    continue
                self.progress.errors[name] = str(exc)
                if isinstance(exc, SpecConflict):
                    self.progress.conflicts.append(name)
                self.reporter.event(f"trial {name}: {exc}")
                continue
            submitted.append(name)
            self._paused.discard(name)
            if outcome == "created":
                self.progress.created += 1
            else:
                self.progress.existing += 1
        gave_up = [e for e in paused.values() if isinstance(e, Unreachable)]
        if gave_up or (paused and not submitted):
            raise gave_up[0] if gave_up else next(iter(paused.values()))
        for name, error in paused.items():  # the others went through: say it, once per trial
            if name not in self._paused:
                self._paused.add(name)
                self.reporter.event(f"trial {name}: not created this cycle ({error}); trying again")
        return submitted

    def _sent(
        self, names: list[str], pool: ThreadPoolExecutor, dry_run: bool, placed: dict[str, list[dict] | None]
    ) -> Iterator[tuple[str, Future]]:
        """(name, future) of each trial's create, in order, with at most WINDOW creates
        handed to the pool at a time: the pool's workers stay busy, and 100,000 trials are
        never 100,000 futures at once."""
        window = max(WINDOW, 8 * self.options.workers)
        queued: deque[tuple[str, Future]] = deque()
        for name in names:
            queued.append((name, pool.submit(self.submit_trial, self.trials[name], dry_run, placed[name])))
            if len(queued) >= window:
                yield queued.popleft()
        while queued:
            yield queued.popleft()

    def cleanup(self, states: dict[str, TrialState]) -> None:
        """Delete finished jobs (study setting `cleanup: delete`), remembering outcomes first."""
        done = {n: s.value for n, s in states.items() if s.finished and n in self._jobs}
        if not done:
            return
        self.keeper.change(finished={**self.record.finished, **done})
        self.keeper.save("finished")
        for name in done:
            job = self._jobs[name]
            self.cluster.delete(self._kind, job["metadata"]["name"], self.namespace)
            if self._kind == BATCH_JOB:
                self.cluster.delete(PODGROUP, job["metadata"]["name"], self.namespace)

    # -- closed-loop search (backends/kubernetes/closedloop.py) ----------------------------------------

    def _register(self, trial: Trial) -> None:
        """A trial of a closed-loop search joins the loop's trials (requeue and salvage share
        the dict, so its next attempts are theirs as for any trial)."""
        self.trials[trial.name] = trial
        self.order.append(trial.name)
        if self.renderer is not None and self.renderer.states_duration:
            self._expected[trial.name] = self.renderer.expected_seconds(trial)
        if self.renderer is not None and self.study.varying_shape:
            self._shapes[trial.name] = self.renderer.shape(trial)

    # -- the loop -----------------------------------------------------------------------

    def _tally(self, states: dict[str, TrialState]) -> None:
        p = self.progress
        counts = {s: 0 for s in TrialState}
        for name, state in states.items():
            if name not in p.errors:
                counts[state] += 1
        p.pending, p.running = counts[TrialState.PENDING], counts[TrialState.RUNNING]
        p.succeeded, p.failed, p.waiting = (
            counts[TrialState.SUCCEEDED],
            counts[TrialState.FAILED],
            counts[TrialState.WAITING],
        )
        p.pruned = counts[TrialState.PRUNED]
        if self.search is not None:  # the budget not asked yet waits too
            p.waiting += self.search.remaining
        stats, bucket = self.throttle.stats, self.throttle.bucket
        p.throttle_waits, p.throttle_wait_seconds = bucket.waits, bucket.waited_seconds
        p.throttled_429 = stats.throttled
        p.api = self.throttle.pressure()  # the request pace: shown when the API quota pushes back
        if self.cluster is not None:
            p.api_writes, p.api_requests = self.cluster.metrics.writes, self.cluster.metrics.requests
            p.api_checks = self.cluster.metrics.checks
            p.api_sent, p.api_refused = dict(self.cluster.metrics.sent), dict(self.cluster.metrics.refused)
        watches = (self.jobs, *(getattr(self.signals, name, None) for name in ("nodes", "pods", "groups")))
        p.watch_errors, p.watch_problem = watch_health(watches)  # a broken watch means a stale picture: say so

    def _observe_pressure(self, states: dict[str, TrialState]) -> Observed:
        p, now = self.progress, self.clock()
        for name, state in states.items():
            if state is TrialState.PENDING:
                self._pending_since.setdefault(name, now)
            else:
                self._pending_since.pop(name, None)
        p.stuck = sum(1 for since in self._pending_since.values() if now - since > self.options.pending_grace)
        if self.blocked is not None:  # why they wait, when they wait past the grace: a gang that never starts
            stuck = [
                self._jobs[n]
                for n, since in self._pending_since.items()
                if now - since > self.options.pending_grace and n in self._jobs
            ]
            p.blocked = self.blocked.why(stuck, self._mirrored()[1], now)
        precedence, shadow, backfill_fit, spread = None, None, None, None
        if self.signals is not None:
            capacity = self.signals.capacity(self.wall())
            shadow, backfill_fit, spread = capacity.shadow, capacity.backfill_fit, capacity.spread
            p.free_gpus, p.gangs_fit, p.fragmentation = capacity.free_gpus, capacity.gangs_fit, capacity.fragmentation
            precedence = str(capacity.precedence) if capacity.precedence else None
            if self._shapes and capacity.free_after is not None:
                config = getattr(self.policy, "config", self.policy)
                ahead = getattr(config, "queue_ahead", AdaptiveConfig.queue_ahead)
                self._packing = self._packer.pack(
                    states, lambda: self._waiting(states), capacity.free_after, self.clock(), ahead, capacity.domains
                )
                p.gangs_fit = self._packing.fit
            p.latency_p90 = self.signals.latency_p90()  # shown; the request pace acts on it, not the target
        control = self.prometheus.latest() if self.prometheus is not None else None
        p.etcd_p99 = control.etcd_p99 if control else None
        p.scheduling_latency_p90 = control.volcano_latency_p90 if control else None
        return Observed(
            etcd_p99=p.etcd_p99,
            scheduling_latency_p90=p.scheduling_latency_p90,
            in_flight=p.in_flight,
            pending=p.pending,
            waiting=p.waiting,
            stuck=p.stuck,
            drained=self.record.drained,
            api_stalled=p.api.stalled if p.api is not None else 0.0,
            api_room=api_room(p.api, self.options.poll_interval),
            gangs_fit=p.gangs_fit,
            free_gpus=p.free_gpus,
            precedence=precedence,
            shadow=shadow if self._expected else None,  # backfill needs the study's own durations
            backfill_fit=backfill_fit,
            spread=spread,
        )

    def _waiting(self, states: dict[str, TrialState]) -> list[str]:
        """The trials waiting to be created, in the study's order (refused ones aside)."""
        return [n for n in self.order if states[n] is TrialState.WAITING and n not in self.progress.errors]

    def _shed(self, observed: Observed) -> Observed:
        """The etcd breaker's drain (backends/kubernetes/shedding.py): it may suspend the study's trials,
        or let them resume; the policy sees the study drained while the breaker holds it."""
        observed = self.shedding.step(observed, self.keeper.cm)
        self.keeper.change(breaker=self.shedding.reason, breaker_at=self.shedding.at)
        self.progress.breaker = self.shedding.panel()
        return observed

    def _decide(self, observed: Observed) -> Decision:
        """The shared decision (run/loop.py); a new target goes into the record too."""
        decision, changed = self.deciding.decide(self.policy, observed, self.progress)
        if changed:
            self.keeper.change("target", "reason", target=decision.target, reason=decision.reason)
            self.keeper.flush(self.progress.done, self.progress.api is not None and self.progress.api.tight)
        return decision

    def pause(self) -> None:
        """Until the next cycle: the poll interval, or sooner when one of the study's jobs
        changed (a trial that finished frees GPUs for the next one now, not a cycle later),
        but at least MIN_CYCLE, so a busy study does not spin the loop."""
        waits = getattr(self.jobs, "wait", None)
        if waits is None or self.options.poll_interval <= MIN_CYCLE:
            self.sleep(self.options.poll_interval)
            return
        self.sleep(MIN_CYCLE)
        waits(self.options.poll_interval - MIN_CYCLE)

    def dry_run(self) -> Progress:
        """Send every manifest with dryRun=All (server) or only render them (client)."""
        if self.search is not None:  # a closed-loop search: the trials it would ask first
            self.trials.update({t.name: t for t in self._first})
        names = [t.name for t in self._first] if self.search is not None else list(self.order)
        self.progress.dry_run = self.options.dry_run
        if self.options.dry_run == "server":
            with ThreadPoolExecutor(self.options.workers) as pool:
                self._submit_batch(names, pool, dry_run=True)
        else:  # every trial was rendered, and so checked, by launch.prepare
            self.progress.created = len(names)
        self._tally({n: TrialState.WAITING for n in names})
        return self.progress

    def _heard(self, change: Change) -> None:
        """The API server stopped answering, or answers again: say it once, as it happens
        (from whichever request noticed)."""
        if change.down:
            self.reporter.event(
                f"API server unreachable ({change.error}); retrying, giving up after "
                f"{duration(self.outage.patience)} without an answer"
            )
        else:
            self.reporter.event(f"API server answering again after {duration(change.lasted)} out; carrying on")

    def _mirrored(self) -> tuple[list[dict] | None, list[dict] | None]:
        """The cluster's pods and the namespace's PodGroups, when the loop mirrors them."""
        pods, groups = getattr(self.signals, "pods", None), getattr(self.signals, "groups", None)
        if pods is None or groups is None:
            return None, None
        return pods.items(), groups.items()

    def step(self) -> bool:
        """One cycle of the shared loop (run/loop.py): observe, recover, decide, admit. True
        when the run is over."""
        if not self.keeper.exists:
            self.keeper.ensure()
        if self.searching is not None and not self.searching.search.started:
            self.searching.rebuild(self.jobs.snapshot()[0] if self.jobs is not None else self._list_jobs())
        states = self.observe()
        if self.placer is not None:
            self.placer.observe(self._jobs, states)
        if self.keeper.due(self.jobs is not None, self.options.poll_interval, self._deletions_seen):
            self.keeper.refresh(self._deletions_seen)
        states = self._requeue.step(states, self._jobs, self.record.held, record=self.keeper.cm)
        states = self._salvage.step(states, self._jobs, self._all_jobs, self.record.held, *self._mirrored())
        if self.searching is not None:
            pods = self._mirrored()[0]  # the loop's watch of pods holds most results already
            self.searching.tell(states, self._jobs, pods)
            if self.study.pruner is not None:
                self.searching.prune(states, self._jobs, pods)
            if self.storage is not None:
                self.searching.mirror(self.storage)
        self._tally(states)
        self.save_summary(force=self.progress.done)  # the cluster as just observed
        observed = self._shed(self._observe_pressure(states))
        decision = self._decide(observed)
        if self.placer is not None and self.options.move_waiting:
            self._move_waiting()
        listed = waiting = self._waiting(states)
        if self._packing is not None:  # trials of different shapes: those that fit first
            present = set(waiting)
            waiting = [n for n in self._packing.order if n in present]
        if decision.backfill is not None:  # only trials that end before the waiting gang can start
            waiting = [n for n in waiting if self._expected.get(n, decision.backfill + 1) <= decision.backfill]
        unasked = self.search.remaining if self.search is not None and decision.backfill is None else 0
        admit = decision.admit(replace(observed, waiting=len(waiting) + unasked))
        if admit > len(waiting) and unasked:  # a closed-loop search: ask as many as are admitted
            assert self.searching is not None  # a search has trials to ask for
            waiting = waiting + self.searching.ask(admit - len(waiting))
            admit = min(admit, len(waiting))
        if admit:
            submitted = self._submit_batch(waiting[:admit], self._pool)
            states.update({n: TrialState.PENDING for n in submitted})
            self._tally(states)
            if self._shapes:
                self._packer.admitted(listed, set(submitted), self.clock())
        if self.study.cleanup == "delete":
            self.cleanup(states)
        self.reporter.update(self.progress)
        if self.progress.done:
            return True
        if self.options.detach and not self.progress.waiting:
            self.progress.detached = True
            return True
        return False

    def _move_waiting(self) -> None:
        """`--move-waiting`: delete the job of a trial whose gang has waited past the grace
        in a full queue without starting, when another of the study's queues has room; the
        trial waits again and its next create goes to the queue with room (the same name
        and spec hash: still exactly once)."""
        now = self.clock()
        grace = self.options.pending_grace
        waited = [
            n
            for n in self.order
            if n in self._pending_since
            and now - self._pending_since[n] > grace
            and n in self._jobs
            and self._jobs[n]["metadata"].get("uid") not in self._moved
        ]
        assert self.placer is not None  # queue moves are made only with several queues
        for move in self.placer.to_move(self._jobs, waited):
            job = self._jobs[move.trial]
            name = job["metadata"]["name"]
            try:
                self.cluster.delete(self._kind, name, self.namespace)
                if self._kind == BATCH_JOB:
                    self.cluster.delete(PODGROUP, name, self.namespace)
            except NotFound:
                pass
            self._moved.add(job["metadata"].get("uid"))
            self.keeper.change(MOVED_KEY, moved=self.record.moved + 1)
            self.reporter.event(
                f"trial {move.trial} moved: queue {move.source} → {move.target}, it had not started and {move.reason}"
            )

    def left_behind(self) -> str:
        """What a run that gives up leaves in the cluster, said to the user: a record this run
        wrote without any trial is taken back."""
        if self.keeper.created and not self._jobs and not self.progress.created:
            return self.keeper.take_back()
        return (
            "trials already in the cluster keep running; run the same command again later: they are "
            "recognised, never duplicated"
        )

    def stopped(self, interrupted: bool) -> None:
        self.keeper.stopped()

    def run(self) -> Progress:
        if self.options.dry_run:
            return self.dry_run()
        self.outage.listen(self._heard)
        self._pool = ThreadPoolExecutor(self.options.workers)
        # Preempted and drained trials come back as their next attempt (requeue.py).
        renderer = self.renderer if self.placer is None else Placing(self.renderer, self.placer)  # next attempts too
        self._requeue = Requeue(
            self.cluster, renderer, self.study, self.trials, self._kind, self.reporter, signals=self.signals
        )
        # ... and so do trials whose job the Volcano job controller lost (salvage.py).
        self._salvage = salvage = Salvage(
            self.cluster,
            renderer,
            self.study,
            self.trials,
            self._kind,
            self.reporter,
            clock=self.clock,
            wall=self.wall,
            created=self._seen,
        )
        self.outage.listen(lambda change: salvage.forget())  # no pods could come while the server was out
        loop = Loop(
            self,
            self.outage,
            self.reporter,
            self.options.poll_interval,
            self.options.timeout,
            told=self._told,
            clock=self.clock,
            sleep=self.sleep,
        )
        try:
            return loop.run()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
