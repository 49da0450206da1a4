"""The one cycle (run/cycle.py) every backend runs: its steps in order, the capabilities
asked at their places, the admission (ordered, asked for, capped by the decision), the end
of the run; Backfill; the Kubernetes state of a trial without a job (backends/kubernetes/objects/state.py)."""

from __future__ import annotations

import pytest

from stratctl.backends.kubernetes.objects.state import trial_states
from stratctl.run.cycle import Backfill, Capability, Cycle
from stratctl.run.loop import Deciding
from stratctl.run.policy import Decision, Observed, StaticPolicy
from stratctl.run.progress import Progress, Silent
from stratctl.trialstate import TrialState

W, P, R, S = TrialState.WAITING, TrialState.PENDING, TrialState.RUNNING, TrialState.SUCCEEDED


class Scripted(Cycle):
    """A backend whose steps log their calls; `observed` is what the cluster shows."""

    def __init__(self, observed: dict[str, TrialState], limit: int, capabilities=(), detach=False):
        self.seen, self.calls, self.sent = dict(observed), [], []
        self.progress = Progress(study="s", total=len(observed))
        self.reporter, self.detach = Silent(), detach
        self.policy = StaticPolicy(limit)
        self.deciding = Deciding(lambda message: self.calls.append(("said", message)), lambda: 0.0)
        self.capabilities = list(capabilities)

    def begin(self):
        self.calls.append("begin")

    def observe(self):
        self.calls.append("observe")
        return dict(self.seen)

    def recover(self, states):
        self.calls.append("recover")
        return states

    def tally(self, states):
        self.calls.append("tally")
        self.progress.waiting = sum(s is W for s in states.values())
        self.progress.pending = sum(s is P for s in states.values())
        self.progress.running = sum(s is R for s in states.values())

    def pressure(self, states):
        self.calls.append("pressure")
        in_flight = sum(s.in_flight for s in states.values())
        return Observed(in_flight=in_flight, pending=self.progress.pending, waiting=self.progress.waiting)

    def decided(self, decision, changed):
        self.calls.append(("decided", decision.target, changed))

    def waiting(self, states):
        return [n for n, s in states.items() if s is W]

    def admit(self, names):
        self.calls.append(("admit", list(names)))
        self.sent += names
        return [n for n in names if n != "refused"]

    def finished(self, states):
        return all(s.finished for s in states.values())


class Logged(Capability):
    """A capability that logs each hook, reverses the order of the trials due and may add some."""

    def __init__(self, log, asks=()):
        self.log, self.asks = log, list(asks)

    def begin(self):
        self.log.append("c.begin")

    def recover(self, states):
        self.log.append("c.recover")
        return {**states, "t0": R}  # this capability brought t0 back

    def pressure(self, observed, states):
        self.log.append("c.pressure")
        return observed

    def decided(self, decision):
        self.log.append("c.decided")

    def order(self, waiting, decision):
        self.log.append(("c.order", list(waiting)))
        return list(reversed(waiting))

    def unasked(self, decision):
        return len(self.asks)

    def ask(self, n):
        self.log.append(("c.ask", n))
        asked, self.asks = self.asks[:n], self.asks[n:]
        return asked

    def admitted(self, listed, submitted):
        self.log.append(("c.admitted", list(listed), sorted(submitted)))

    def settle(self, states):
        self.log.append(("c.settle", dict(states)))


def test_a_cycle_runs_the_backends_steps_and_asks_each_capability_at_its_place():
    cycle = Scripted({"t0": W, "t1": W, "t2": W, "t3": W}, limit=3)
    cap = Logged(cycle.calls)
    cycle.capabilities = [cap]
    assert cycle.step() is False
    steps = [c for c in cycle.calls if not (isinstance(c, tuple) and c[0] == "said")]
    assert steps == [
        "begin",
        "c.begin",
        "observe",
        "recover",
        "c.recover",
        "tally",
        "pressure",
        "c.pressure",
        ("decided", 3, True),
        "c.decided",
        ("c.order", ["t1", "t2", "t3"]),  # t0 was brought back by the capability: running, not due
        ("admit", ["t3", "t2"]),  # the target 3 less the one in flight, in the capability's order
        "tally",
        ("c.admitted", ["t1", "t2", "t3"], ["t2", "t3"]),
        ("c.settle", {"t0": R, "t1": W, "t2": P, "t3": P}),
    ]
    said = [c[1] for c in cycle.calls if isinstance(c, tuple) and c[0] == "said"]
    assert len(said) == 1 and said[0].startswith("target in flight 3: ")  # said once, as it changed
    assert cycle.states == {"t0": R, "t1": W, "t2": P, "t3": P}


def test_trials_that_exist_once_asked_for_are_asked_as_many_as_are_admitted():
    cycle = Scripted({"t0": R}, limit=4)
    cap = Logged([], asks=["n1", "n2", "n3", "n4", "n5"])
    cap.recover = lambda states: states  # type: ignore[method-assign]
    cycle.capabilities = [cap]
    cycle.step()
    assert ("c.ask", 3) in cap.log  # 4 in flight at most, one running: three asked, not five
    assert cycle.sent == ["n1", "n2", "n3"]


def test_a_refused_trial_is_not_pending_and_nothing_is_sent_when_the_decision_admits_none():
    cycle = Scripted({"a": W, "refused": W}, limit=2)
    cycle.step()
    assert cycle.states == {"a": P, "refused": W}
    full = Scripted({"a": R, "b": W}, limit=1)
    full.step()
    assert not [c for c in full.calls if isinstance(c, tuple) and c[0] == "admit"]


def test_the_run_is_over_when_every_trial_ended_or_detached_once_none_waits():
    assert Scripted({"a": S, "b": S}, limit=1).step() is True
    attached = Scripted({"a": W}, limit=1)
    assert attached.step() is False and not attached.progress.detached
    detached = Scripted({"a": W}, limit=1, detach=True)
    assert detached.step() is True and detached.progress.detached  # a was sent: none waits


def decision(backfill):
    return Decision(target=4, hold=False, reason="r", backfill=backfill)


def test_backfill_admits_only_trials_expected_to_end_before_the_waiting_gang_starts():
    backfill = Backfill({"short": 60.0, "long": 900.0})
    assert backfill.order(["long", "short", "unknown"], decision(None)) == ["long", "short", "unknown"]
    assert backfill.order(["long", "short", "unknown"], decision(120.0)) == ["short"]  # unknown: not known to end


def test_a_trial_without_a_job_is_the_records_when_finished_pending_when_created_unseen_else_waiting():
    job = {"kind": "Job", "apiVersion": "batch/v1", "metadata": {"name": "a-0"}, "status": {"active": 1}}
    states = trial_states(["a", "b", "c", "d"], {"a": job}, {"b": "succeeded"}, {"c"})
    assert states == {"a": R, "b": S, "c": P, "d": W}


def test_each_capability_the_cycle_asks_is_one_validate_knows_and_only_backends_that_honour_it_have_it():
    from stratctl.backends.batch.blocks import Blocks
    from stratctl.backends.batch.search import Search as BatchSearch
    from stratctl.backends.kubernetes.loop import features
    from stratctl.core.capabilities import BACKENDS, KUBERNETES, honours

    kubernetes = [
        c for c in vars(features).values() if isinstance(c, type) and issubclass(c, Capability) and c is not Capability
    ]
    assert {c.__name__ for c in kubernetes} == {
        "Salvaging",
        "Search",
        "BreakerDrain",
        "Packed",
        "QueueMoves",
        "Cleanup",
    }
    for capability in kubernetes:  # what validate refuses elsewhere, at the field
        if capability is features.Search:  # every backend searches (Slurm and YARN: backends/batch/search.py)
            continue
        assert {b for b in BACKENDS if honours(b, capability.needs)} == KUBERNETES, capability
    for shared in (Blocks, Backfill, BatchSearch, features.Search):
        assert all(honours(b, shared.needs) for b in BACKENDS), shared
    with pytest.raises(KeyError):
        honours("slurm", "no such field")
