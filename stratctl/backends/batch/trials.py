"""A trial on a batch scheduler that runs each attempt as one job (Slurm, YARN), as the
shared loop and `status` read it from its latest attempt (stratctl/attempt.py): its state
by the recovery rules (run/recovery.py), the view those rules decide on, the trials given
up, and the GPUs of each task of each trial (its gang), counted in whole gangs of free GPUs.
"""

from __future__ import annotations

from stratctl.attempt import Attempt
from stratctl.backends.batch.scheduler import Scheduler
from stratctl.core import shape
from stratctl.core.render import Renderer
from stratctl.core.space import Trial
from stratctl.core.spec import Study
from stratctl.run.packing import gangs_fit as packing_fit
from stratctl.run.recovery import Kind, Limits, TrialView, effective_state, next_action
from stratctl.trialstate import TrialState


def gangs(study: Study, trials: list[Trial]) -> dict[str, tuple[int, ...]]:
    """GPUs of each task of each trial: the study's for all, unless its replicas or GPUs are
    templates over the trial's values (core/shape.py), then each trial's own."""
    if not shape.fields(study):
        return dict.fromkeys((t.name for t in trials), shape.gang(study))
    renderer = Renderer(study, rendezvous=None)  # Slurm and YARN give the contract where they run
    return {t.name: shape.gang(renderer.study_for(t)) for t in trials}


def gang_size(gang: tuple[int, ...]) -> tuple[int, int, int]:
    """Larger gangs first: by GPUs in all, then in the largest task, then tasks."""
    return sum(gang), max(gang, default=0), len(gang)


def gangs_fit(free: list[int], gang: list[int]) -> int:
    """Whole gangs (GPUs per task) the free GPUs of the nodes hold (run/packing.py's count,
    the same on every backend): fragmented GPUs that hold no task do not count."""
    return packing_fit({str(i): n for i, n in enumerate(free)}, gang)


def limits_of(study: Study) -> Limits:
    return Limits(max_preemptions=study.retries.max_preemptions, max_failures=study.retries.max_failures)


def attempt_view(attempt: Attempt, given_up: bool = False) -> TrialView:
    """What the recovery rules decide on, from a trial's latest attempt: its preemptions
    over every attempt (restarts in the same job included), its failures the latest's included."""
    return TrialView(
        attempt.trial,
        attempt.attempt,
        attempt.state,
        attempt.preemptions,
        given_up=given_up,
        failures=attempt.failures + (attempt.state is TrialState.FAILED),
        requeued=attempt.restarts > 0,
    )


def given_up_of(scheduler: Scheduler) -> dict[str, str]:
    """The trials recovery gave up -> why, as the scheduler keeps them (Slurm's and YARN's:
    files in the study's output directory, attempt.StudyFiles); none from one that keeps none."""
    read = getattr(scheduler, "given_up", None)
    return read() if read is not None else {}


def trial_state(attempt: Attempt, limits: Limits, given_up: bool = False) -> TrialState:
    """The trial's state from its latest attempt, by the recovery rules: failed when given
    up or past a limit; a failed attempt with failures left, or a preempted one that was
    not requeued with preemptions left, makes it RETRYING, its next attempt due. An
    attempt in flight keeps its state until the loop gives it up."""
    view = attempt_view(attempt, given_up)
    if not attempt.state.in_flight:
        action = next_action(view, limits, drained=False)
        if action is not None and action.kind is Kind.GIVE_UP:
            return TrialState.FAILED
    if view.state is TrialState.PREEMPTED and not view.given_up:
        return TrialState.RETRYING
    return effective_state(view, limits)
