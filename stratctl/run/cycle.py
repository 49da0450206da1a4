"""One cycle of the submit loop, the same on every backend: observe, recover, decide, admit.

`Cycle.step` is the whole cycle (run/loop.py runs it until the study is over). A backend
fills in its steps, the ones every backend has:

- `observe`: each trial's state as the scheduler shows it (Kubernetes: the study's jobs and
  record; Slurm and YARN: their attempts);
- `recover`: the recovery rules (run/recovery.py) applied as the backend reads and acts on
  them (a preempted trial's next attempt, a trial past a limit given up);
- `tally` and `pressure`: the progress, and what the policy decides on (`Observed`);
- `decided`: what the backend keeps of a new target (Kubernetes writes it into the record);
- `waiting`, `admit`: the trials due, and their next attempts sent.

What only some backends have is a `Capability` the cycle asks at its place in the cycle,
not a second loop: the Kubernetes backend adds the salvage of lost jobs, the closed-loop
search (told results, pruning, the storage mirror, new trials asked as they are
admitted), the etcd breaker's drain, queue fallback, packing trials of different shapes
and `cleanup: delete` (backends/kubernetes/loop/features.py); `Backfill` is here, since it
needs nothing but the trials' expected durations.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace

from stratctl.run.loop import Deciding
from stratctl.run.policy import Decision, Observed, Policy
from stratctl.run.progress import Progress, Reporter
from stratctl.trialstate import TrialState

States = dict[str, TrialState]


class Capability:
    """Something a backend adds to the shared cycle. Every hook does nothing by default; a
    capability overrides the ones at the places it acts."""

    name = ""  # as a capability is named to the user
    # what of the study it serves, as core/capabilities.py names it (a field, a submit
    # option, `closed_loop`): the backends whose cycle may have it are those `validate`
    # lets ask for it (core.capabilities.honours)
    needs = ""

    def begin(self) -> None:
        """Before the cycle observes (the closed-loop search rebuilds itself from the cluster)."""

    def recover(self, states: States) -> States:
        """After the recovery rules: trials this capability brings back or ends."""
        return states

    def pressure(self, observed: Observed, states: States) -> Observed:
        """What the policy decides on, as this capability changes it (the breaker's drain)."""
        return observed

    def decided(self, decision: Decision) -> None:
        """After the decision, before admitting (queue fallback moves waiting gangs)."""

    def order(self, waiting: list[str], decision: Decision) -> list[str]:
        """The trials due, in the order (and the subset) this capability admits them."""
        return waiting

    def unasked(self, decision: Decision) -> int:
        """Trials that exist only once asked for (a closed-loop search's budget left)."""
        return 0

    def ask(self, n: int) -> list[str]:
        """Up to `n` new trials' names, asked for as they are admitted."""
        return []

    def admits(self, admit: int, waiting: list[str]) -> int:
        """How many of the trials due (`waiting`, in order) go now, when the decision admits
        `admit` (merged submissions: a whole block, its own throttle keeping the target)."""
        return admit

    def admitted(self, listed: Sequence[str], submitted: set[str]) -> None:
        """After a cycle that admitted trials: those due (`listed`) and those sent."""

    def settle(self, states: States) -> None:
        """At the end of the cycle (finished jobs deleted)."""


class Backfill(Capability):
    """While a higher-priority gang waits for a known start (its shadow time), only the
    trials expected to end before it are admitted (run/policy.py's backfill)."""

    name = "backfill"
    needs = "cost"  # the trials' expected durations

    def __init__(self, expected: Mapping[str, float]):
        self.expected = expected  # trial -> its expected seconds, as the study states them

    def order(self, waiting: list[str], decision: Decision) -> list[str]:
        if decision.backfill is None:
            return waiting
        return [n for n in waiting if self.expected.get(n, decision.backfill + 1) <= decision.backfill]


class Cycle(ABC):
    """The shared cycle (`step`), over the steps a backend fills in (see the module's text)."""

    progress: Progress
    reporter: Reporter
    policy: Policy
    deciding: Deciding
    detach: bool = False
    capabilities: Sequence[Capability] = ()
    states: States  # each trial's state, as the last cycle left it

    # -- the steps every backend fills in ---------------------------------------------

    def begin(self) -> None:
        """Before anything of the cycle (Kubernetes: the study's record created or adopted)."""
        return None

    @abstractmethod
    def observe(self) -> States:
        """Each trial's state as the scheduler shows it."""

    @abstractmethod
    def recover(self, states: States) -> States:
        """The recovery rules, as this backend reads and acts on them."""

    @abstractmethod
    def tally(self, states: States) -> None:
        """The progress from the trials' states and the request counters."""

    @abstractmethod
    def pressure(self, states: States) -> Observed:
        """What the policy decides on."""

    def decided(self, decision: Decision, changed: bool) -> None:
        """What the backend keeps of the decision (nothing, unless it records it)."""
        return None

    @abstractmethod
    def waiting(self, states: States) -> list[str]:
        """The trials whose next attempt is due, in order."""

    @abstractmethod
    def admit(self, names: list[str]) -> list[str]:
        """Send the trials' next attempts; the names sent."""

    @abstractmethod
    def finished(self, states: States) -> bool:
        """Every trial has ended (or was refused)."""

    # -- the cycle --------------------------------------------------------------------

    def step(self) -> bool:
        """One cycle: observe, recover, decide, admit. True when the run is over."""
        self.begin()
        for c in self.capabilities:
            c.begin()
        states = self.recover(self.observe())
        for c in self.capabilities:
            states = c.recover(states)
        self.tally(states)
        observed = self.pressure(states)
        for c in self.capabilities:
            observed = c.pressure(observed, states)
        decision, changed = self.deciding.decide(self.policy, observed, self.progress)
        self.decided(decision, changed)
        for c in self.capabilities:
            c.decided(decision)
        self._admit(states, observed, decision)
        for c in self.capabilities:
            c.settle(states)
        self.states = states
        self.reporter.update(self.progress)
        return self.over(states)

    def _admit(self, states: States, observed: Observed, decision: Decision) -> None:
        """As many trials as the decision admits, in the order the capabilities give them;
        the trials sent are pending from now."""
        listed = waiting = self.waiting(states)
        for c in self.capabilities:
            waiting = c.order(waiting, decision)
        unasked = sum(c.unasked(decision) for c in self.capabilities)
        admit = decision.admit(replace(observed, waiting=len(waiting) + unasked))
        for c in self.capabilities:
            if admit > len(waiting) and unasked:  # trials that exist once asked for: as many as are admitted
                waiting = waiting + c.ask(admit - len(waiting))
        for c in self.capabilities:
            admit = c.admits(admit, waiting)
        admit = min(admit, len(waiting))
        if not admit:
            return
        submitted = self.admit(waiting[:admit])
        states.update(dict.fromkeys(submitted, TrialState.PENDING))
        self.tally(states)
        for c in self.capabilities:
            c.admitted(listed, set(submitted))

    def over(self, states: States) -> bool:
        """The run is over: every trial ended, or `--detach` and none waits any more."""
        if self.finished(states):
            return True
        if self.detach and not self.progress.waiting:
            self.progress.detached = True
            return True
        return False
