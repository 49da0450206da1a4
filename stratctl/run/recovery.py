"""Recovery: what to do about trials that were preempted, suspended or failed, as pure
decisions, the same rules on every backend (Kubernetes, Slurm, YARN).

A trial is a sequence of attempts. When an attempt ends because it was preempted (its
pods evicted, its containers taken back), or `drain` suspended it, or it failed, the
trial is not finished yet: its next attempt resumes from the same checkpoint location
with STRATCTL_RESUME=1. Preemptions count against `retries.max_preemptions`, failures
(an attempt ending without completing, not by preemption) against `retries.max_failures`,
each never against the other; suspensions count against nothing. A trial preempted or
failed more often than its limit is given up: failed.

Where the scheduler itself puts a preempted attempt back in its queue (Slurm's requeue:
the same job runs again, `TrialView.requeued`) no next attempt is made for it, but its
preemptions count the same: past the limit the trial is given up and its attempt ended.

`next_actions(views, limits, drained) -> list[Action]` decides; each backend acts
(backends/kubernetes/attempts/requeue.py, backends/batch/loop.py) and reads its views from its own
objects (backends/kubernetes/objects/jobview.py, backends/batch/loop.py's `attempt_view`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from stratctl.trialstate import TrialState


@dataclass(frozen=True)
class TrialView:
    """What recovery needs to know about one trial."""

    trial: str
    attempt: int  # the latest attempt (-1: never submitted)
    state: TrialState  # of the latest attempt; SUSPENDED when drain deleted or held it
    preemptions: int = 0  # over every attempt, the latest included
    given_up: bool = False
    failures: int = 0  # failed attempts, the latest included
    # the scheduler itself requeued the latest attempt after its preemptions (Slurm): it
    # comes back by itself, recovery only gives it up once they are more than allowed
    requeued: bool = False


@dataclass(frozen=True)
class Limits:
    max_preemptions: int = 10
    max_failures: int = 2


class Kind(StrEnum):
    RESUBMIT = "resubmit"  # create the next attempt, resuming from the checkpoint
    GIVE_UP = "give-up"  # the trial is failed: preempted or failed more often than allowed


@dataclass(frozen=True)
class Action:
    kind: Kind
    trial: str
    attempt: int  # the attempt to create (RESUBMIT) or the one that ends the trial (GIVE_UP)
    reason: str
    resume: bool = True


def next_action(view: TrialView, limits: Limits, drained: bool) -> Action | None:
    if view.given_up:
        return None
    if view.state is TrialState.SUSPENDED:
        if drained:
            return None  # stays suspended until `stratctl resume`
        return Action(Kind.RESUBMIT, view.trial, view.attempt + 1, f"resumed after drain (attempt {view.attempt})")
    if view.state is TrialState.PREEMPTED:
        return _retry(view, "preempted", "preemptions", view.preemptions, limits.max_preemptions, drained)
    if view.state is TrialState.FAILED:
        return _retry(view, "failed", "failures", view.failures, limits.max_failures, drained)
    if view.requeued and view.state.in_flight and view.preemptions > limits.max_preemptions:
        return _give_up(view, "preempted", "preemptions", view.preemptions, limits.max_preemptions)
    return None


def _give_up(view: TrialView, what: str, counted: str, count: int, limit: int) -> Action:
    return Action(
        Kind.GIVE_UP,
        view.trial,
        view.attempt,
        f"{what} {'once' if count == 1 else f'{count} times'}, more than retries.max_{counted}={limit}",
        resume=False,
    )


def _retry(view: TrialView, what: str, counted: str, count: int, limit: int, drained: bool) -> Action | None:
    """The next attempt of a trial that ended `what` (preempted, failed) `count` times, or
    give it up past `limit` (retries.max_<counted>). A drained study holds the attempt."""
    if count > limit:
        return _give_up(view, what, counted, count, limit)
    if drained:
        return None  # comes back once the study is resumed, like a suspended trial
    return Action(
        Kind.RESUBMIT, view.trial, view.attempt + 1, f"{what} (attempt {view.attempt}, {count} of {limit} {counted})"
    )


def next_actions(views: list[TrialView], limits: Limits, drained: bool = False) -> list[Action]:
    """What to do now about every trial that recovery is responsible for, in view order."""
    return [a for a in (next_action(v, limits, drained) for v in views) if a is not None]


def limit_of(reason: str) -> str:
    """The limit a give-up's reason says the trial went past: `preemptions` or `failures`
    ("" for another text). A trial given up for its preemptions did not fail its last
    attempt, even where giving it up ended that attempt (Slurm's cancel of a requeued job)."""
    for counted in ("preemptions", "failures"):
        if f"more than retries.max_{counted}=" in reason:
            return counted
    return ""


def effective_state(view: TrialView, limits: Limits | None = None) -> TrialState:
    """The trial's state as users see it: a trial given up is failed. Given the limits, a
    failed attempt with failures left is RETRYING (its trial is not finished)."""
    if view.given_up:
        return TrialState.FAILED
    if limits is not None and view.state is TrialState.FAILED and view.failures <= limits.max_failures:
        return TrialState.RETRYING
    return view.state
