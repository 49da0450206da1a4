"""The Kubernetes side of the submit loop: the shared cycle (run/cycle.py) over a study's
jobs, reconciled with the cluster at the pace it can absorb.

Each cycle observes the study's jobs (a watch, else one paginated list), applies the
recovery rules to them (requeue.py), asks the policy how many trials may be in flight,
creates that many more through the throttle (creating.py), and sleeps until the next, or
until one of the study's jobs changes. The cluster is the source of truth: a rerun after a
crash lists what exists and creates only what is missing; a 409 whose spec-hash label
matches counts as already submitted. What only Kubernetes has (salvage, the closed-loop
search, the breaker's drain, queue fallback, packing, cleanup) joins the cycle as its
capabilities (features.py).

An API server that stops answering (restarted, etcd paused) is a pause, not a verdict
(run/loop.py): the display says once that the server is out and once that it is back,
and a trial whose create failed that way stays waiting (only a refusal, like an invalid
manifest, is its verdict).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from stratctl import labels
from stratctl.backends.kubernetes.blocked import Blocked
from stratctl.backends.kubernetes.cluster import BATCH_JOB, VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.creating import Creating
from stratctl.backends.kubernetes.features import BreakerDrain, Cleanup, Packed, QueueMoves, Salvaging, Search
from stratctl.backends.kubernetes.keeper import RecordKeeper
from stratctl.backends.kubernetes.mirror import Mirror, watch_health
from stratctl.backends.kubernetes.placement import Placer, Placing
from stratctl.backends.kubernetes.record import API_QUOTA_KEY, PLACEMENTS_KEY, StudyRecord
from stratctl.backends.kubernetes.requeue import Requeue, pod_starts
from stratctl.backends.kubernetes.salvage import Salvage
from stratctl.backends.kubernetes.searching import Searching
from stratctl.backends.kubernetes.shedding import Shedding
from stratctl.backends.kubernetes.state import TrialState, classify, latest_attempts, trial_of
from stratctl.core import shape
from stratctl.core.changes import spec_text
from stratctl.core.render import Renderer, min_resources
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.run.cycle import Backfill, Capability, Cycle
from stratctl.run.loop import Deciding, Loop
from stratctl.run.options import SubmitOptions, default_policy
from stratctl.run.outage import Change, Outage, duration
from stratctl.run.pace import api_room
from stratctl.run.packing import Packer
from stratctl.run.policy import Decision, Observed
from stratctl.run.progress import Progress, Reporter, Silent
from stratctl.run.queues import amounts
from stratctl.run.throttle import Throttle

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.capacity import Capacity, ClusterSignals
    from stratctl.backends.kubernetes.storage import StorageMirror


MIN_CYCLE = 0.2  # seconds: the shortest cycle when job changes wake the loop early


def gang_shape(study: Study) -> list[int]:
    """GPUs of each pod of one trial (of a study whose trials share one shape): the shape
    free GPUs must hold for it to start."""
    return list(shape.gang(study))


def study_selector(study: Study) -> str:
    return f"{labels.STUDY}={study.name}"


def job_kind(study: Study) -> tuple[str, str]:
    return VOLCANO_JOB if study.workload == "volcano" else BATCH_JOB


class Submitter(Cycle):
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
        self.study, self.renderer, self.cluster, self.throttle = study, renderer, cluster, throttle
        self.options, self.detach = options, options.detach
        self.policy = policy or default_policy(study, options)
        self.reporter = reporter or Silent()
        self.clock, self.sleep, self.wall = clock, sleep, wall
        self.source, self.namespace = source, study.namespace
        self.kind = job_kind(study)
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

    def _attach(self, trials: list[Trial]) -> None:
        """What the loop watches and reads besides its jobs; launch starts the watches."""
        study, cluster, options = self.study, self.cluster, self.options
        self.signals: ClusterSignals | None = None
        self.capacity: Capacity | None = None  # the cluster's free GPUs and who waits, as last read from signals
        self.storage: StorageMirror | None = None  # with --storage
        # The study's jobs, kept by a watch; without it each cycle lists them.
        self.jobs: Mirror | None = None
        # The cluster's Volcano queues, kept by a watch when the study lists several: each new
        # attempt goes to the first with room (placement.py)
        self.queues: Mirror | None = None
        self.placer = (
            Placer(
                study.queues,
                lambda: self.creating.queue_objects(),
                amounts(min_resources(self._largest(study, trials))),
                self._say,
            )
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
        (searching.py), the creates (creating.py) and the shared decision (run/loop.py)."""
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
                self.kind,
                self.keeper,
                self.progress,
                self.trials,
                self.order,
                self._register,
                self._say,
                lambda: self.wall(),
            )
        self.creating = Creating(
            self.cluster,
            self.renderer,
            self.namespace,
            self.trials,
            self._manifests,
            self.placer,
            self.progress,
            self._say,
            self.options.workers,
            self._seen,
            lambda: self.queues,
        )
        self.deciding = Deciding(self._say, lambda: self.clock())

    def _start_state(self) -> None:
        """What the loop knows of the cluster before its first cycle: nothing yet."""
        self.pending_since: dict[str, float] = {}  # trials pending, since when
        self._deletions_seen = 0  # jobs seen deleted, by the last observe
        self.every_job: list[dict] = []  # every attempt of the study's trials, as last observed
        self.latest: dict[str, dict] = {}  # each trial's latest attempt's job, as last observed
        # trials this loop created while its mirror of jobs did not watch yet (`--detach`
        # lists once and watches only from a second cycle on): pending, by name alone, so a
        # single-cycle --detach of 100,000 trials keeps no job of them
        self._unseen: set[str] = set()
        self._observed = False  # observe ran once (the mirror's first list is fresh for it)

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
            return pod_starts(self.cluster, self.namespace, self.study.name, self.kind, self.signals)

        self.keeper.save_summary(force, self.progress.done, tight, self.latest, starts)

    # -- the cycle's steps (run/cycle.py) ---------------------------------------------

    def begin(self) -> None:
        """The study's record, created or adopted before anything reads it."""
        if not self.keeper.exists:
            self.keeper.ensure()

    def observe(self) -> dict[str, TrialState]:
        """Each trial's state from its latest job (a finished trial whose job was deleted:
        from the record); the record read again when due."""
        if self.jobs is not None:
            if self._observed and not self.jobs.following:  # a second cycle: watch from now on
                self.jobs.follow()  # lists first: what this loop created is in it
                self._unseen.clear()
            jobs, self._deletions_seen = self.jobs.snapshot()
        else:
            jobs = self.listed()
        latest = latest_attempts(jobs)
        self.every_job = jobs
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
        self.latest = latest
        self._observed = True
        if self.placer is not None:
            self.placer.observe(latest, states)
        if self.keeper.due(self.jobs is not None, self.options.poll_interval, self._deletions_seen):
            self.keeper.refresh(self._deletions_seen)
        return states

    def listed(self) -> list[dict]:
        """Every attempt of the study's trials: as watched, else listed now."""
        if self.jobs is not None:
            return self.jobs.snapshot()[0]
        jobs, _ = self.cluster.list(self.kind, self.namespace, label_selector=study_selector(self.study))
        return jobs

    def recover(self, states: dict[str, TrialState]) -> dict[str, TrialState]:
        """The recovery rules (requeue.py): preempted and drained trials come back as their
        next attempt, failed ones while failures are left, the rest given up."""
        return self._requeue.step(states, self.latest, self.record.held, record=self.keeper.cm)

    def tally(self, states: dict[str, TrialState]) -> None:
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

    def pressure(self, states: dict[str, TrialState]) -> Observed:
        """What the policy decides on: the study's pending and stuck gangs (and why they
        wait), the cluster's capacity from its signals, the control plane from Prometheus,
        the request pace. The record is saved first: the cluster as just observed."""
        self.save_summary(force=self.progress.done)
        p, now = self.progress, self.clock()
        for name, state in states.items():
            if state is TrialState.PENDING:
                self.pending_since.setdefault(name, now)
            else:
                self.pending_since.pop(name, None)
        late = [n for n, since in self.pending_since.items() if now - since > self.options.pending_grace]
        p.stuck = len(late)
        if self.blocked is not None:  # why they wait, when they wait past the grace: a gang that never starts
            p.blocked = self.blocked.why([self.latest[n] for n in late if n in self.latest], self.mirrored()[1], now)
        precedence, shadow, backfill_fit, spread = None, None, None, None
        if self.signals is not None:
            self.capacity = capacity = self.signals.capacity(self.wall())
            shadow, backfill_fit, spread = capacity.shadow, capacity.backfill_fit, capacity.spread
            p.free_gpus, p.gangs_fit, p.fragmentation = capacity.free_gpus, capacity.gangs_fit, capacity.fragmentation
            precedence = str(capacity.precedence) if capacity.precedence else None
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

    def decided(self, decision: Decision, changed: bool) -> None:
        """A new target goes into the record too."""
        if changed:
            self.keeper.change("target", "reason", target=decision.target, reason=decision.reason)
            self.keeper.flush(self.progress.done, self.progress.api is not None and self.progress.api.tight)

    def waiting(self, states: dict[str, TrialState]) -> list[str]:
        """The trials waiting to be created, in the study's order (refused ones aside)."""
        return [n for n in self.order if states[n] is TrialState.WAITING and n not in self.progress.errors]

    def admit(self, names: list[str]) -> list[str]:
        return self.creating.batch(names, self._pool)

    def finished(self, states: dict[str, TrialState]) -> bool:
        return self.progress.done

    def features(self, salvage: Salvage) -> list[Capability]:
        """What this study's cycle adds to the shared one (features.py), in the order the
        cycle asks them."""
        features: list[Capability] = [Salvaging(self, salvage)]
        if self.searching is not None:
            features.append(Search(self, self.searching))
        if self._shapes:  # trials of different shapes: those that fit first
            features.append(Packed(self, Packer(self._shapes, self.study.throttle.aging_seconds, self._say)))
        features.append(BreakerDrain(self, self.shedding))
        if self.placer is not None and self.options.move_waiting:
            features.append(QueueMoves(self))
        features.append(Backfill(self._expected))  # only trials that end before the waiting gang can start
        if self.study.cleanup == "delete":
            features.append(Cleanup(self))
        return features

    # -- what the capabilities and the creates read -----------------------------------

    def _seen(self, obj: dict) -> None:
        """An object this loop created: its jobs are added to the mirror, so the next cycle
        sees them even if the watch lags; before the mirror watches (--detach's first cycle),
        only its trial's name is kept."""
        if self.jobs is not None and obj.get("kind") == self.kind[1]:
            if self.jobs.following:
                self.jobs.add(obj)
            elif (trial := trial_of(obj)) is not None:
                self._unseen.add(trial)

    def submit_trial(self, trial: Trial, dry_run: bool = False, manifests: list[dict] | None = None) -> str:
        """Create every manifest of the trial's first attempt; 'created' or 'existing' (creating.py)."""
        return self.creating.trial(trial, dry_run, manifests)

    def mirrored(self) -> tuple[list[dict] | None, list[dict] | None]:
        """The cluster's pods and the namespace's PodGroups, when the loop mirrors them."""
        pods, groups = getattr(self.signals, "pods", None), getattr(self.signals, "groups", None)
        if pods is None or groups is None:
            return None, None
        return pods.items(), groups.items()

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
                self.creating.batch(names, pool, dry_run=True)
        else:  # every trial was rendered, and so checked, by launch.prepare
            self.progress.created = len(names)
        self.tally({n: TrialState.WAITING for n in names})
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

    def left_behind(self) -> str:
        """What a run that gives up leaves in the cluster, said to the user: a record this run
        wrote without any trial is taken back."""
        if self.keeper.created and not self.latest and not self.progress.created:
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
            self.cluster, renderer, self.study, self.trials, self.kind, self.reporter, signals=self.signals
        )
        # ... and so do trials whose job the Volcano job controller lost (salvage.py).
        salvage = Salvage(
            self.cluster,
            renderer,
            self.study,
            self.trials,
            self.kind,
            self.reporter,
            clock=self.clock,
            wall=self.wall,
            created=self._seen,
        )
        self.outage.listen(lambda change: salvage.forget())  # no pods could come while the server was out
        self.capabilities = self.features(salvage)
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
