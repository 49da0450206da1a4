"""A closed-loop search (`strategy.kind: tpe|gp|cmaes|nsga2`) on a batch scheduler (Slurm,
YARN): the shared sampler side (run/closedloop.py) as the attempt loop's capability
(run/cycle.py), with the study's journal in its directory.

**The journal** (`Journal`): two append-only files of JSON lines in the study's directory
(on Slurm the cluster's shared filesystem, where a driver job reads it too; on YARN the
submitting machine's):

- `search-asked.jsonl`: every trial the sampler asked, its index, name and parameters,
  written and fsync'd *before* the trial is sent. A loop SIGKILLed at any point finds every
  trial it asked, sent or not: the next one sends the unsent ones and never asks again
  for them, so the budget holds and no trial is asked twice.
- `search-told.jsonl`: every trial that ended as the sampler was told it (complete with
  its values, failed, pruned with its intermediate values): its value outlives the
  scheduler's memory of its job (Slurm's MinJobAge, YARN's completed applications).

A torn last line (a kill in the middle of a write) is skipped when read.

**Each cycle**: the trials that ended are told (their results through `Scheduler.result`);
with a pruner, each running trial's intermediate values are read (`Searching.reports`) and
one the pruner judges is recorded `pruned` in the journal first, then stopped
(`Searching.prune`: SIGTERM, then its grace), so its GPUs go to the next trial at once and
a loop that sees it ended knows why; new trials are asked as the policy admits them.
`--storage` mirrors the told trials into an Optuna storage (run/storage.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from stratctl.attempt import Attempt
from stratctl.backends.batch.scheduler import Scheduler, Searching, study_directory
from stratctl.backends.batch.trials import given_up_of, limits_of, trial_state
from stratctl.core.space import Trial, expand
from stratctl.core.spec import Study
from stratctl.errors import ClusterError
from stratctl.run.closedloop import ClosedLoop, Seen
from stratctl.run.cycle import Capability, States
from stratctl.run.policy import Decision
from stratctl.run.progress import Progress
from stratctl.run.storage import StorageMirror
from stratctl.trialstate import TrialState

ASKED = "search-asked.jsonl"
TOLD = "search-told.jsonl"


class Journal:
    """A search's journal in the study's directory (see the module's text)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def asked(self) -> list[Trial]:
        """The trials asked so far, in the order they were asked (each once)."""
        out: dict[str, Trial] = {}
        for entry in self._lines(ASKED):
            name, index, params = entry.get("name"), entry.get("index"), entry.get("params")
            if isinstance(name, str) and isinstance(index, int) and isinstance(params, dict) and name not in out:
                out[name] = Trial(index, name, MappingProxyType(params), name.rsplit("-", 1)[-1])
        return sorted(out.values(), key=lambda t: t.index)

    def told(self) -> dict[str, dict[str, Any]]:
        """Each told trial's entry (the last written wins)."""
        return {
            str(entry["trial"]): {k: v for k, v in entry.items() if k != "trial"}
            for entry in self._lines(TOLD)
            if isinstance(entry.get("trial"), str)
        }

    def ask(self, trials: list[Trial]) -> None:
        """Record trials as asked, on disk before they are sent."""
        self._append(ASKED, [{"index": t.index, "name": t.name, "params": dict(t.params)} for t in trials])

    def tell(self, entries: Mapping[str, Mapping[str, Any]]) -> None:
        self._append(TOLD, [{"trial": name, **entry} for name, entry in entries.items()])

    def _lines(self, name: str) -> list[dict[str, Any]]:
        try:
            text = (self.directory / name).read_text()
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a torn last line: its write never finished
                continue
            if isinstance(entry, dict):
                out.append(entry)
        return out

    def _append(self, name: str, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(e, separators=(",", ":"), sort_keys=True) + "\n" for e in entries).encode()
        fd = os.open(self.directory / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def study_trials(study: Study) -> list[Trial]:
    """The study's trials: those its search asked so far (a closed-loop strategy, from its
    journal), else every trial its space expands to."""
    if study.strategy.closed_loop:
        return Journal(study_directory(study)).asked()
    return expand(study)


class Host(Protocol):
    """What the search needs of the attempt loop it serves (backends/batch/loop.py)."""

    study: Study
    scheduler: Scheduler
    progress: Progress
    trials: dict[str, Trial]
    order: list[str]
    gangs: dict[str, tuple[int, ...]]  # each trial's GPUs per task

    def seen(self) -> dict[str, Attempt]: ...  # each trial's latest attempt, as last observed
    def call(self, fn: Callable[[], Any], mutating: bool = False) -> Any: ...  # through the loop's throttle
    def register(self, trial: Trial) -> None: ...  # a trial the search asked joins the loop's


class Search(Capability):
    """The closed-loop search on a batch scheduler (see the module's text)."""

    name = "closed-loop search"
    needs = "closed_loop"

    def __init__(
        self,
        host: Host,
        journal: Journal,
        storage: StorageMirror | None,
        say: Callable[[str], None],
        wall: Callable[[], float] = time.time,
    ):
        self.host, self.journal, self.storage, self.say, self.wall = host, journal, storage, say, wall
        self.study = host.study
        self.search = ClosedLoop(host.study)
        self.told: dict[str, dict[str, Any]] = {}  # the journal's told trials, as this loop knows them
        self.steps: dict[str, dict[int, float]] = {}  # running trials' intermediate values, as last read
        self.pruned: set[str] = set()  # trials the journal says were pruned
        self.said_no_reports = False

    @property
    def remaining(self) -> int:
        return self.search.remaining

    def begin(self) -> None:
        """Before the first cycle: the search so far, from the journal and the scheduler's attempts."""
        if self.search.started:
            return
        host = self.host
        asked, self.told = self.journal.asked(), self.journal.told()
        attempts: dict[str, Attempt] = host.call(host.scheduler.attempts)
        given_up, limits = given_up_of(host.scheduler), limits_of(self.study)
        seen: dict[str, tuple[Trial, TrialState, Mapping[str, Any] | None]] = {}
        for trial in asked:
            attempt = attempts.get(trial.name)
            state = trial_state(attempt, limits, trial.name in given_up) if attempt is not None else TrialState.WAITING
            result = host.scheduler.result(trial.name) if state is TrialState.SUCCEEDED else None
            seen[trial.name] = (trial, state, result)
        frozen: Seen = seen
        for trial in self.search.rebuild(frozen, self.told):
            if trial.name not in host.trials:
                host.register(trial)
        self.pruned = {n for n, e in self.told.items() if e.get("state") == "pruned"}
        learnt = {n: e for n, e in self.search.told.items() if n not in self.told}
        if learnt:  # ended while no loop followed the search: learnt from their attempts, kept now
            self.journal.tell(learnt)
            self.told.update(learnt)
        host.progress.total = len(host.order) + self.search.remaining
        self.say(
            f"search {self.study.strategy.kind}: {len(host.order)} trials so far "
            f"({len(self.search.told)} ended), {self.search.remaining} more to ask"
        )

    def recover(self, states: States) -> States:
        for name in self.pruned:  # its attempt ended by the stop (cancelled, killed): pruned, never resumed
            if name in states:
                attempt = self.host.seen().get(name)
                if attempt is not None and attempt.state.in_flight:  # a loop killed between recording and stopping
                    self._stop(attempt)
                states[name] = TrialState.PRUNED
        self._tell(states)
        if self.study.pruner is not None:
            self._prune(states)
        if self.storage is not None:
            self.storage.mirror(self.told, self.say)
        return states

    def unasked(self, decision: Decision) -> int:
        # while backfilling, only trials known to end in time go in: none of the unasked
        return self.search.remaining if decision.backfill is None else 0

    def ask(self, n: int) -> list[str]:
        """Ask for `n` new trials, recorded in the journal before they are sent; their names."""
        host = self.host
        trials = self.search.ask(n, len(host.order))
        self.journal.ask(trials)
        for trial in trials:
            host.register(trial)
        if len(trials) < n and self.search.remaining:  # the space has no point left that is not a trial already
            self.say(f"search: the space has no new point left after {len(host.order)} trials")
            self.search.spent()
        host.progress.total = len(host.order) + self.search.remaining
        # a trial the scheduler already has an attempt of (the same parameters asked by an earlier
        # run whose journal is gone) is not sent again: the next cycle sees its state
        seen = host.seen()
        return [t.name for t in trials if t.name not in seen]

    def _tell(self, states: States) -> None:
        ended = {
            n: s
            for n, s in states.items()
            if s in (TrialState.SUCCEEDED, TrialState.FAILED) and n not in self.search.told
        }
        told = {}
        seen = self.host.seen()
        for name, state in ended.items():
            result = self.host.scheduler.result(name) if state is TrialState.SUCCEEDED else None
            steps = self.steps.pop(name, None)
            if name in seen and self.study.pruner is not None:  # its last steps, reported after the last read
                steps = self._reports(seen[name]) or steps
                if steps:  # to the sampler's trial, for the pruner's median of later trials
                    self.search.report(self.host.trials[name], steps)
            entry = self.search.tell(self.host.trials[name], state, result, steps)
            if entry is None:
                continue
            told[name] = entry
            if name in self.search.missing_values:
                metrics = ", ".join(o.metric for o in self.study.objectives)
                self.say(f"trial {name}: succeeded without {metrics} in its result: told as failed")
        if told:
            self.journal.tell(told)
            self.told.update(told)

    def _prune(self, states: States) -> None:
        """Read each running trial's intermediate values; stop those the pruner judges."""
        scheduler = self.host.scheduler
        if not hasattr(scheduler, "reports"):
            if not self.said_no_reports:
                self.said_no_reports = True
                self.say(f"pruner: {scheduler.title} reads no intermediate values: trials are not pruned")
            return
        metric = self.study.objectives[0].metric
        seen = self.host.seen()
        for name, state in states.items():
            attempt = seen.get(name)
            if state is not TrialState.RUNNING or attempt is None:
                continue
            steps = self._reports(attempt)
            if not steps:
                continue
            self.steps[name] = steps
            trial = self.host.trials[name]
            if not self.search.report(trial, steps):
                continue
            spent = attempt.run_seconds(self.wall()) * sum(self.host.gangs.get(name, ()))
            entry = self.search.prune(trial, steps, spent, self.wall())
            self.journal.tell({name: entry})  # before it is stopped: a loop that sees it ended knows why
            self.told[name] = entry
            self.pruned.add(name)
            self._stop(attempt)
            states[name] = TrialState.PRUNED
            self.steps.pop(name, None)
            self.say(
                f"trial {name} pruned at step {entry['step']}: {metric} {entry['value']:.4g} "
                f"({self.study.pruner.kind if self.study.pruner else 'no'} pruner)"
            )

    def _reports(self, attempt: Attempt) -> dict[int, float] | None:
        """The attempt's intermediate values so far (None: the scheduler reads none, or did
        not answer: read again next cycle)."""
        scheduler = self.host.scheduler
        if not hasattr(scheduler, "reports"):
            return None
        searching: Searching = scheduler  # type: ignore[assignment]
        metric = self.study.objectives[0].metric
        try:
            steps: dict[int, float] = self.host.call(lambda: searching.reports(attempt, metric))
        except ClusterError:
            return None
        return steps

    def _stop(self, attempt: Attempt) -> None:
        searching: Searching = self.host.scheduler  # type: ignore[assignment]
        try:
            self.host.call(lambda: searching.prune(attempt), mutating=True)
        except ClusterError as exc:
            self.say(f"trial {attempt.trial}: pruned, but not stopped yet ({exc}); trying again")
