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
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.attempts.creating import Creating
from stratctl.backends.kubernetes.attempts.placement import Placer, Placing
from stratctl.backends.kubernetes.attempts.requeue import Requeue, pod_starts
from stratctl.backends.kubernetes.blocks.blockmanifests import Part
from stratctl.backends.kubernetes.loop.features import BreakerDrain, Cleanup, Packed, QueueMoves, Salvaging, Search
from stratctl.backends.kubernetes.loop.keeper import RecordKeeper
from stratctl.backends.kubernetes.loop.merged import Merged
from stratctl.backends.kubernetes.loop.pressure import Pressure, tally
from stratctl.backends.kubernetes.loop.salvage import Salvage
from stratctl.backends.kubernetes.loop.searching import Searching
from stratctl.backends.kubernetes.loop.shedding import Shedding
from stratctl.backends.kubernetes.objects.record import API_QUOTA_KEY, PLACEMENTS_KEY, StudyRecord
from stratctl.backends.kubernetes.objects.state import latest_attempts, trial_of, trial_states
from stratctl.backends.kubernetes.search.looptrials import LoopTrials
from stratctl.backends.kubernetes.watch.mirror import Mirror, staleness
from stratctl.core.merging import merging
from stratctl.core.render import Renderer, min_resources
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.errors import StudyDeleted
from stratctl.run.cycle import Backfill, Capability, Cycle
from stratctl.run.driver import Driver, expiry, identity
from stratctl.run.loop import Deciding, Loop
from stratctl.run.options import SubmitOptions, default_policy
from stratctl.run.outage import Outage
from stratctl.run.packing import Packer
from stratctl.run.policy import AdaptivePolicy, Decision, Observed, StaticPolicy
from stratctl.run.progress import Progress, Reporter, Silent
from stratctl.run.queues import amounts
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.watch.capacity import ClusterSignals
    from stratctl.run.storage import StorageMirror


MIN_CYCLE = 0.2  # seconds: the shortest cycle when job changes wake the loop early


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
        policy: AdaptivePolicy | StaticPolicy | None = None,
        reporter: Reporter | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        source: str = "",
        manifests: dict[str, list[dict[str, Any]]] | None = None,
        wall: Callable[[], float] = time.time,
        parts: dict[str, Part] | None = None,
    ):
        self.study, self.renderer, self.cluster, self.throttle = study, renderer, cluster, throttle
        self.options, self.detach = options, options.detach
        self.policy = policy or default_policy(study, options)
        self.reporter = reporter or Silent()
        self.clock, self.sleep, self.wall = clock, sleep, wall
        self.source, self.namespace = source, study.namespace
        self.kind = job_kind(study)
        self.parts = parts or {}  # merged: what each trial's block keeps of it (blockmanifests.py)
        self._take_trials(trials, manifests)
        self._attach(trials)
        self.driver = self._hold()  # one driver per study: before this loop writes anything of it
        self._keep_record(source)
        self._start_state()

    def _say(self, message: str) -> None:
        self.reporter.event(message)

    def _hold(self) -> Driver | None:
        """The study's driver mark, taken (run/driver.py; its Lease: objects/lease.py); None
        for a dry run, which drives nothing."""
        if self.options.dry_run:
            return None
        from stratctl.backends.kubernetes.objects.lease import LeaseStore, pod_gone

        driver = Driver(
            LeaseStore(self.cluster, self.namespace, self.study.name),
            self.study.name,
            identity(),
            ttl=expiry(self.options.poll_interval),
            take_over=self.options.take_over,
            wall=self.wall,
            sleep=self.sleep,
            say=self._say,
            dead=pod_gone(self.cluster, self.namespace),
        )
        driver.acquire()
        return driver

    def _take_trials(self, trials: list[Trial], manifests: dict[str, list[dict[str, Any]]] | None) -> None:
        """The study's trials, or a closed-loop search that asks them as it goes (looptrials.py)."""
        self.given = LoopTrials(self.study, trials, self.renderer, manifests)
        self.search, self.trials, self.order = self.given.search, self.given.by_name, self.given.order

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
            Placer(
                study.queues,
                lambda: self.creating.queue_objects(),
                amounts(min_resources(self.given.largest())),
                self._say,
            )
            if len(study.queues) > 1
            else None
        )
        # read in the background: a slow Prometheus never delays a cycle
        self.prometheus = None
        if options.prometheus_url:
            from stratctl.backends.kubernetes.watch.prometheus import ControlPlaneWatch, Prometheus

            self.prometheus = ControlPlaneWatch(Prometheus(options.prometheus_url))
        self.reading = Pressure(
            cluster, study.namespace, options.pending_grace, options.poll_interval, self._say, self.clock, self.wall
        )
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
        budget = self.given.budget
        self.progress = Progress(study=study.name, total=budget)
        self.keeper = RecordKeeper(
            self.cluster,
            StudyRecord.of(study, budget, source),
            self.namespace,
            self._say,
            clock=lambda: self.clock(),
            wall=lambda: self.wall(),
        )
        self.searching = None
        if self.search is not None:  # its trials join the loop's as it asks them
            self.searching = Searching(
                self.given, self.cluster, self.kind, self.keeper, self.progress, self._say, lambda: self.wall()
            )
        self.creating = Creating(
            self.cluster,
            self.renderer,
            self.namespace,
            self.trials,
            self.given.manifests,
            self.placer,
            self.progress,
            self._say,
            self.options.workers,
            self._seen,
            lambda: self.queues,
        )
        self.deciding = Deciding(self._say, lambda: self.clock())
        how = merging(study)  # first attempts as blocks (merged.py)
        self.merged = Merged(self, how.block, self._say) if how.merged else None

    def _start_state(self) -> None:
        """What the loop knows of the cluster before its first cycle: nothing yet."""
        self._deletions_seen = 0  # jobs seen deleted, by the last observe
        self.every_job: list[dict[str, Any]] = []  # every attempt of the study's trials, as last observed
        self.latest: dict[str, dict[str, Any]] = {}  # each trial's latest attempt's job, as last observed
        # trials this loop created while its mirror of jobs did not watch yet (`--detach`
        # lists once and watches only from a second cycle on): pending, by name alone, so a
        # single-cycle --detach of 100,000 trials keeps no job of them
        self._unseen: set[str] = set()
        self._observed = False  # observe ran once (the mirror's first list is fresh for it)

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

        def starts() -> dict[str, Any] | None:  # batch/v1 Jobs' first pods
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
        if self.merged is not None:  # each block read as its trials
            jobs = self.merged.expand(jobs)
        latest = latest_attempts(jobs)
        self.every_job = jobs
        states = trial_states(self.order, latest, self.record.finished, self._unseen)
        self.latest = latest
        self._observed = True
        if self.placer is not None:
            self.placer.observe(latest, states)
        if self.keeper.due(self.jobs is not None, self.options.poll_interval, self._deletions_seen):
            self.keeper.refresh(self._deletions_seen)
            if self.record.deleting:
                raise StudyDeleted(
                    f"study {self.study.name} is being deleted (stratctl delete): this submit stops and creates "
                    f"nothing more; once `stratctl delete {self.study.name}` has finished, submit it again"
                )
        return states

    def listed(self) -> list[dict[str, Any]]:
        """Every attempt of the study's trials: as watched, else listed now."""
        if self.jobs is not None:
            return self.jobs.snapshot()[0]
        jobs, _ = self.cluster.list(self.kind, self.namespace, label_selector=study_selector(self.study))
        return jobs

    def recover(self, states: dict[str, TrialState]) -> dict[str, TrialState]:
        """The recovery rules (requeue.py): preempted and drained trials come back as their
        next attempt, failed ones while failures are left, the rest given up."""
        return self._requeue.step(states, self.latest, self.record.held, record=self.keeper.cm, room=self._room(states))

    def _room(self, states: dict[str, TrialState]) -> int | None:
        """How many next attempts may go now: as many as the last decision admits of new
        trials (a next attempt is created like one, and queues like one): the target less
        the trials in flight (those a block still holds back aside), within the decision's
        room; none while it holds (yielding to a higher-priority gang: a preempted trial
        back at once would queue behind the gang that took its GPUs) or backfills (a next
        attempt does not say when it will end). None before the first decision: a rerun
        resumes what it finds, as the run before it would have."""
        last = self.deciding.last
        if last is None:
            return None
        if last.hold or last.backfill is not None:
            return 0
        queued = self.merged.queued if self.merged is not None else set()
        free = last.target - sum(1 for n, s in states.items() if s.in_flight and n not in queued)
        return free if last.room is None else min(free, last.room)

    def tally(self, states: dict[str, TrialState]) -> None:
        unasked = self.search.remaining if self.search is not None else 0  # the budget not asked yet waits too
        tally(self.progress, states, self.throttle, self.cluster, unasked, self.watches())
        if self.merged is not None:  # held back in their blocks: not pending
            self.progress.queued = sum(1 for n in self.merged.queued if states.get(n) is TrialState.PENDING)
            self.progress.pending -= self.progress.queued

    def watches(self) -> tuple[object, ...]:
        """The mirrors the loop's picture is read from (None where it watches nothing)."""
        signals = (getattr(self.signals, name, None) for name in ("nodes", "pods", "groups", "hypernodes"))
        return (self.jobs, self.queues, *signals)

    def pressure(self, states: dict[str, TrialState]) -> Observed:
        """What the policy decides on (pressure.py); the record is saved first: the cluster
        as just observed."""
        self.save_summary(force=self.progress.done)
        groups, durations = self.mirrored()[1], bool(self.given.expected)
        drained = self.record.drained
        if self.merged is not None:  # held back in their blocks: never pending for long
            states = {n: TrialState.WAITING if n in self.merged.queued else s for n, s in states.items()}
        stale = staleness(self.watches(), getattr(self.cluster, "outage", None))
        return self.reading.observe(
            states, self.progress, self.latest, drained, self.signals, groups, self.prometheus, durations, stale
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
        """The trials' next attempts; first attempts as one block when merged (merged.py)."""
        first = [n for n in names if n not in self.latest] if self.merged is not None else []
        sent = self.merged.admit(first) if self.merged is not None and first else []
        new = set(first)
        return sent + self.creating.batch([n for n in names if n not in new], self._pool)

    def finished(self, states: dict[str, TrialState]) -> bool:
        return self.progress.done

    def features(self, salvage: Salvage) -> list[Capability]:
        """What this study's cycle adds to the shared one (features.py), in the order the
        cycle asks them."""
        features: list[Capability] = [Salvaging(self, salvage), *([self.merged] if self.merged else [])]
        if self.searching is not None:
            features.append(Search(self, self.searching))
        if self.given.shapes:  # trials of different shapes: those that fit first
            features.append(Packed(self, Packer(self.given.shapes, self.study.throttle.aging_seconds, self._say)))
        features.append(BreakerDrain(self, self.shedding))
        if self.placer is not None and self.options.move_waiting:
            features.append(QueueMoves(self))
        features.append(Backfill(self.given.expected))  # only trials that end before the waiting gang can start
        if self.study.cleanup == "delete":
            features.append(Cleanup(self))
        return features

    # -- what the capabilities and the creates read -----------------------------------

    def _seen(self, obj: dict[str, Any]) -> None:
        """An object this loop created: its jobs are added to the mirror, so the next cycle
        sees them even if the watch lags; before the mirror watches (--detach's first cycle),
        only its trial's name is kept."""
        if self.jobs is not None and obj.get("kind") == self.kind[1]:
            if self.jobs.following:
                self.jobs.add(obj)
            elif (trial := trial_of(obj)) is not None:
                self._unseen.add(trial)

    def submit_trial(self, trial: Trial, dry_run: bool = False, manifests: list[dict[str, Any]] | None = None) -> str:
        """Create every manifest of the trial's first attempt; 'created' or 'existing' (creating.py)."""
        return self.creating.trial(trial, dry_run, manifests)

    def mirrored(self) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]:
        """The cluster's pods and the namespace's PodGroups, when the loop mirrors them."""
        pods, groups = getattr(self.signals, "pods", None), getattr(self.signals, "groups", None)
        if pods is None or groups is None:
            return None, None
        return pods.items(), groups.items()

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
            self.trials.update({t.name: t for t in self.given.first})
        names = [t.name for t in self.given.first] if self.search is not None else list(self.order)
        self.creating.dry_run(names, self.options.dry_run or "client")
        self.tally(dict.fromkeys(names, TrialState.WAITING))
        return self.progress

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
        self.outage.listen(lambda change: self._say(self.outage.said(change)))
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
            driver=self.driver,
        )
        try:
            return loop.run()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
