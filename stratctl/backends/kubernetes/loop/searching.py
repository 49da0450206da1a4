"""The Kubernetes submit loop's closed-loop search against the cluster (the sampler's side
is closedloop.py): rebuilt from the cluster when the loop starts, told the trials that
ended with their pods' results, asked for new trials as the policy admits them, the
running trials' intermediate values read and those the pruner judges stopped, the search
mirrored into an Optuna storage (`--storage`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, PODGROUP, Cluster
from stratctl.backends.kubernetes.blocks.blockstop import block_of_view, stop_index
from stratctl.backends.kubernetes.loop.keeper import RecordKeeper
from stratctl.backends.kubernetes.objects.record import TOLD_KEY, parse_record, record_name, suspended_of
from stratctl.backends.kubernetes.objects.state import classify, job_of_pod, latest_attempts
from stratctl.backends.kubernetes.search.looptrials import LoopTrials
from stratctl.errors import NotFound
from stratctl.run.progress import Progress
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.search.reportlog import LogReports
    from stratctl.run.storage import StorageMirror


class Searching:
    """One study's closed-loop search, as its submit loop runs it: a trial it asks joins the
    loop's trials (looptrials.py)."""

    def __init__(
        self,
        given: LoopTrials,
        cluster: Cluster,
        kind: tuple[str, str],
        keeper: RecordKeeper,
        progress: Progress,
        say: Callable[[str], None],
        wall: Callable[[], float],
    ):
        assert given.search is not None  # a study with a closed-loop strategy
        self.search, self.study, self.cluster, self.kind = given.search, given.study, cluster, kind
        self.namespace = given.study.namespace
        self.keeper, self.progress = keeper, progress
        self.trials, self.order, self.register = given.by_name, given.order, given.register
        self.say, self.wall = say, wall
        self.steps: dict[str, dict[int, float]] = {}  # running trials' intermediate values, as last read
        self.said_no_pruning = False
        self.stopped: set[str] = set()  # trials this loop stopped
        self.logs: LogReports | None = None  # report lines of the running pods' output, once pruning

    def rebuild(self, jobs: list[dict[str, Any]]) -> None:
        """The search so far, from the cluster alone: the study's jobs, their pods' results,
        and the record's told trials."""
        latest = latest_attempts(jobs)
        cm = self.cluster.get(CONFIGMAP, record_name(self.study.name), self.namespace)
        told, marks = parse_record(cm).told, suspended_of(cm)
        ended = [n for n, job in latest.items() if classify(job) is TrialState.SUCCEEDED and n not in told]
        from stratctl.backends.kubernetes.verbs.status import trial_results

        results = trial_results(self.cluster, self.namespace, self.study.name, {n: latest[n] for n in ended})
        for trial in self.search.rebuild_from_jobs(latest, results, told, marks):
            if trial.name not in self.trials:
                self.register(trial)
        # trials that ended while no loop followed the search: learnt from their jobs, kept in the record now
        learnt = (TOLD_KEY,) if set(self.search.told) - set(told) else ()
        self.keeper.change(*learnt, told={**told, **self.search.told})
        self.progress.total = len(self.order) + self.search.remaining
        self.say(
            f"search {self.study.strategy.kind}: {len(self.order)} trials so far "
            f"({len(self.search.told)} ended), {self.search.remaining} more to ask"
        )

    def ask(self, n: int) -> list[str]:
        """Ask the search for `n` new trials; their names (fewer once the budget or the space is spent)."""
        trials = self.search.ask(n, len(self.order))
        for trial in trials:
            self.register(trial)
        if len(trials) < n and self.search.remaining:  # the space has no point left that is not a trial already
            self.say(f"search: the space has no new point left after {len(self.order)} trials")
            self.search.spent()
            self.progress.total = len(self.order)
            self.keeper.change("trials", trials=len(self.order))
        return [t.name for t in trials]

    def tell(
        self, states: dict[str, TrialState], jobs: dict[str, dict[str, Any]], pods: list[dict[str, Any]] | None
    ) -> None:
        """Tell the sampler the trials that ended since the last cycle, and the record."""
        ended = {
            n: s
            for n, s in states.items()
            if s in (TrialState.SUCCEEDED, TrialState.FAILED) and n not in self.search.told
        }
        if not ended:
            return
        succeeded = {n: jobs[n] for n, s in ended.items() if s is TrialState.SUCCEEDED and n in jobs}
        from stratctl.backends.kubernetes.verbs.status import results_in, trial_results

        results = results_in(pods, succeeded) if pods is not None else {}
        unread = {n: job for n, job in succeeded.items() if n not in results}
        if unread:
            results.update(trial_results(self.cluster, self.namespace, self.study.name, unread))
        told = {}
        for name, state in ended.items():
            entry = self.search.tell(self.trials[name], state, results.get(name), self.steps.pop(name, None))
            if entry is not None:
                told[name] = entry
                if name in self.search.missing_values:
                    metrics = ", ".join(o.metric for o in self.study.objectives)
                    self.say(f"trial {name}: succeeded without {metrics} in its result: told as failed")
        if told:
            self.keeper.change(TOLD_KEY, told={**self.keeper.record.told, **told})

    def mirror(self, storage: StorageMirror) -> None:
        """Copy the trials that ended into the Optuna storage (`--storage`)."""
        storage.mirror(self.keeper.record.told, self.say)

    def prune(
        self, states: dict[str, TrialState], jobs: dict[str, dict[str, Any]], pods: list[dict[str, Any]] | None
    ) -> None:
        """Read the running trials' intermediate values (their pods' reports, from the loop's
        watch of pods) and stop those the pruner judges: the told entry in the record first,
        then the job deleted, so its GPUs go to the next trial at once."""
        if pods is None:
            if not self.said_no_pruning:
                self.said_no_pruning = True
                self.say(
                    "pruner: this loop does not watch pods (--detach or a static cap without "
                    "yielding): trials are not pruned"
                )
            return
        for name, state in states.items():  # stopped, its block's index still running: a loop killed mid-stop
            job = jobs.get(name) or {}
            in_block = block_of_view(job) is not None
            if state is TrialState.PRUNED and in_block and name not in self.stopped and job["status"].get("active"):
                self._stop(job, pods)
        running = {n: jobs[n] for n, s in states.items() if s is TrialState.RUNNING and n in jobs}
        if not running:
            return
        from stratctl.backends.kubernetes.objects.jobview import usage
        from stratctl.backends.kubernetes.search.intermediate import steps_of
        from stratctl.backends.kubernetes.search.reportlog import LogReports

        metric = self.study.objectives[0].metric
        reported = steps_of(pods, metric)  # `stratctl report` from outside the trial: pod annotations
        if self.logs is None:
            self.logs = LogReports(self.cluster, self.namespace, clock=self.wall)
        names = {job["metadata"]["name"] for job in running.values()}
        for job_name, logged in self.logs.read((p for p in pods if job_of_pod(p) in names), metric).items():
            reported[job_name] = {**logged, **reported.get(job_name, {})}
        for name, job in running.items():
            steps = reported.get(job["metadata"]["name"])
            if not steps:
                continue
            self.steps[name] = steps
            if not self.search.report(self.trials[name], steps):
                continue
            spent = usage(job, self.wall(), TrialState.RUNNING).gpu_seconds
            entry = self.search.prune(self.trials[name], steps, spent, self.wall())
            self.keeper.change(
                told={**self.keeper.record.told, name: entry},
                finished={**self.keeper.record.finished, name: TrialState.PRUNED.value},
            )
            self.keeper.save(TOLD_KEY, "finished")  # before the job goes: a loop that sees it gone knows why
            self._stop(job, pods)
            states[name] = TrialState.PRUNED
            self.steps.pop(name, None)
            self.say(
                f"trial {name} pruned at step {entry['step']}: {metric} {entry['value']:.4g} "
                f"({self.study.pruner.kind if self.study.pruner else 'no'} pruner)"
            )

    def _stop(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """End a pruned trial's run now: its job deleted, or in a block (merged submissions)
        its index stopped (blockstop.py)."""
        meta = job["metadata"]
        self.stopped.add((meta.get("labels") or {}).get(labels.TRIAL, ""))
        if block_of_view(job) is not None:
            stop_index(self.cluster, self.namespace, job, pods)
            return
        try:
            self.cluster.delete(self.kind, meta["name"], self.namespace)
            if self.kind == BATCH_JOB:
                self.cluster.delete(PODGROUP, meta["name"], self.namespace)
        except NotFound:
            pass
