"""Preemption is not failure: recorded Volcano objects classified, recovery decided."""

from __future__ import annotations

from stratctl import labels
from stratctl.recovery import Action, Carried, Kind, Limits, TrialView, carried, job_gpus, next_actions, usage, view_of
from stratctl.state import TrialState, classify, classify_attempt, preemptions, timestamp
from tests.unit import recorded

T = recorded.TRIAL


def test_a_job_restarted_out_by_evictions_is_preempted_not_failed():
    job = recorded.restarted_out_job()
    assert classify(job) is TrialState.PREEMPTED
    assert preemptions(job) == 1


def test_a_job_restarting_in_place_after_an_eviction_goes_on():
    assert classify(recorded.restarting_job()) is TrialState.RUNNING
    assert preemptions(recorded.restarting_job()) == 1
    again = recorded.restarted_and_running_job()
    assert classify(again) is TrialState.RUNNING and preemptions(again) == 1


def test_a_worker_exiting_non_zero_is_a_failure():
    job = recorded.aborted_job()
    assert classify(job) is TrialState.FAILED
    assert classify_attempt(job, pods=[], events=[]) is TrialState.FAILED
    assert preemptions(job) == 0


def test_an_aborted_job_whose_pods_were_evicted_is_preempted():
    job = recorded.aborted_job()  # e.g. a user policy PodEvicted -> AbortJob
    assert classify_attempt(job, pods=[recorded.preempted_pod(job)]) is TrialState.PREEMPTED
    evicted_while_running = recorded.evict_event(job, when="2025-05-01T10:20:00Z")
    assert classify_attempt(job, events=[evicted_while_running]) is TrialState.PREEMPTED
    assert preemptions(job, TrialState.PREEMPTED) == 1


def test_an_eviction_survived_before_the_last_start_does_not_excuse_a_later_failure():
    job = recorded.aborted_job()
    job["status"]["conditions"][1]["lastTransitionTime"] = "2025-05-01T10:10:00Z"  # running again at 10:10
    old = recorded.evict_event(job, when="2025-05-01T10:05:00Z")
    assert classify_attempt(job, events=[old]) is TrialState.FAILED


def test_completed_and_pending_jobs_keep_their_states():
    assert classify(recorded.completed_job()) is TrialState.SUCCEEDED
    assert classify(recorded.pending_job()) is TrialState.PENDING
    assert not TrialState.PREEMPTED.finished and not TrialState.PREEMPTED.in_flight
    assert not TrialState.SUSPENDED.finished and not TrialState.SUSPENDED.in_flight


def test_gpu_time_used_and_lost():
    assert job_gpus(recorded.running_job()) == 4  # 2 replicas x 2 GPUs
    now = timestamp("2025-05-01T10:11:00Z")
    running = usage(recorded.running_job(), now)
    assert running.gpu_seconds == 600 * 4 and running.gpu_seconds_lost == 0
    done = usage(recorded.completed_job(), now + 10_000)
    assert done.gpu_seconds == 3600 * 4 and done.gpu_seconds_lost == 0
    preempted = usage(recorded.restarted_out_job(), now + 10_000)
    assert preempted.gpu_seconds == 1800 * 4 == preempted.gpu_seconds_lost  # 10:01 -> 10:31
    restarting = usage(recorded.restarting_job(), now + 10_000)
    assert restarting.gpu_seconds_lost == 1800 * 4
    assert usage(recorded.pending_job(), now).gpu_seconds == 0


def test_carried_totals_round_trip_through_annotations():
    totals = Carried(preemptions=3, gpu_seconds=7200, gpu_seconds_lost=1800, suspensions=1)
    job = recorded.restarted_out_job(attempt=2, annotations=totals.annotations())
    assert carried(job) == totals
    assert carried(recorded.running_job()) == Carried()


def test_view_counts_preemptions_over_every_attempt():
    job = recorded.restarted_out_job(attempt=2, annotations=Carried(preemptions=2).annotations())
    view = view_of(T, job, suspended_attempt=None)
    assert view == TrialView(T, 2, TrialState.PREEMPTED, preemptions=3)


def test_view_of_a_drained_trial():
    assert view_of(T, None, suspended_attempt=1).state is TrialState.SUSPENDED
    # drain deleted attempt 0; its job is still terminating
    assert view_of(T, recorded.running_job(), suspended_attempt=0).state is TrialState.SUSPENDED
    # the resumed attempt 1 exists: the mark is history
    resumed = recorded.restarted_out_job(attempt=1)
    assert view_of(T, resumed, suspended_attempt=0).attempt == 1
    assert view_of(T, None, suspended_attempt=None).state is TrialState.WAITING


def test_a_preempted_trial_resumes_as_its_next_attempt():
    views = [TrialView(T, 0, TrialState.PREEMPTED, preemptions=1)]
    assert next_actions(views, Limits(max_preemptions=2)) == [
        Action(Kind.RESUBMIT, T, 1, "preempted (attempt 0, 1 of 2 preemptions)", resume=True)
    ]


def test_preemptions_beyond_the_limit_give_the_trial_up():
    views = [TrialView(T, 2, TrialState.PREEMPTED, preemptions=3)]
    [action] = next_actions(views, Limits(max_preemptions=2))
    assert action.kind is Kind.GIVE_UP and action.attempt == 2
    assert "max_preemptions=2" in action.reason
    assert next_actions([TrialView(T, 2, TrialState.PREEMPTED, 3, given_up=True)], Limits(2)) == []


def test_failures_running_and_finished_trials_are_not_recovery_business():
    views = [TrialView(T, 0, s) for s in (TrialState.FAILED, TrialState.RUNNING, TrialState.PENDING,
                                           TrialState.SUCCEEDED, TrialState.WAITING)]
    assert next_actions(views, Limits()) == []


def test_suspended_trials_wait_while_drained_and_resume_after():
    views = [TrialView(T, 0, TrialState.SUSPENDED), TrialView("sweep-b", 1, TrialState.PREEMPTED, 1)]
    assert next_actions(views, Limits(), drained=True) == []
    actions = next_actions(views, Limits(), drained=False)
    assert [(a.kind, a.trial, a.attempt, a.resume) for a in actions] == [
        (Kind.RESUBMIT, T, 1, True),
        (Kind.RESUBMIT, "sweep-b", 2, True),
    ]


def test_given_up_annotation_makes_the_trial_failed():
    from stratctl.recovery import effective_state

    job = recorded.restarted_out_job(annotations={labels.GIVEN_UP: "preempted 11 times"})
    view = view_of(T, job, None)
    assert view.given_up and effective_state(view) is TrialState.FAILED
