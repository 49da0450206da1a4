"""Preemption is not failure: recorded Volcano objects classified, recovery decided.
Failures are retried too, but counted apart and against their own limit."""

from __future__ import annotations

from stratctl import labels
from stratctl.backends.kubernetes.objects.gpus import job_gpus
from stratctl.backends.kubernetes.objects.jobview import Carried, carried, usage, view_of
from stratctl.backends.kubernetes.objects.state import TrialState, classify, classify_attempt, preemptions, timestamp
from stratctl.run.recovery import Action, Kind, Limits, TrialView, effective_state, next_actions
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
    totals = Carried(preemptions=3, gpu_seconds=7200, gpu_seconds_lost=1800, suspensions=1, failures=2)
    assert totals.annotations() == {
        labels.PREEMPTIONS: "3",
        labels.FAILURES: "2",
        labels.GPU_SECONDS: "7200",
        labels.GPU_SECONDS_LOST: "1800",
        labels.SUSPENSIONS: "1",
    }
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


def test_running_and_finished_trials_are_not_recovery_business():
    views = [
        TrialView(T, 0, s) for s in (TrialState.RUNNING, TrialState.PENDING, TrialState.SUCCEEDED, TrialState.WAITING)
    ]
    assert next_actions(views, Limits()) == []
    assert next_actions([TrialView(T, 1, TrialState.FAILED, failures=3, given_up=True)], Limits()) == []


def test_view_counts_failures_over_every_attempt_apart_from_preemptions():
    before = Carried(preemptions=2, failures=1).annotations()
    failed = view_of(T, recorded.aborted_job(attempt=3, annotations=before), suspended_attempt=None)
    assert failed == TrialView(T, 3, TrialState.FAILED, preemptions=2, failures=2)
    preempted = view_of(T, recorded.restarted_out_job(attempt=3, annotations=before), suspended_attempt=None)
    assert preempted == TrialView(T, 3, TrialState.PREEMPTED, preemptions=3, failures=1)
    assert view_of(T, recorded.aborted_job(), suspended_attempt=None).failures == 1
    assert view_of(T, recorded.running_job(), suspended_attempt=None).failures == 0


def test_a_failed_trial_is_retried_as_its_next_attempt_with_resume():
    views = [TrialView(T, 0, TrialState.FAILED, failures=1)]
    assert next_actions(views, Limits(max_failures=1)) == [
        Action(Kind.RESUBMIT, T, 1, "failed (attempt 0, 1 of 1 failures)", resume=True)
    ]


def test_failures_beyond_the_limit_give_the_trial_up():
    views = [TrialView(T, 1, TrialState.FAILED, failures=2)]
    assert next_actions(views, Limits(max_failures=1)) == [
        Action(Kind.GIVE_UP, T, 1, "failed 2 times, more than retries.max_failures=1", resume=False)
    ]
    # max_failures 0: the first failure ends the trial
    [action] = next_actions([TrialView(T, 0, TrialState.FAILED, failures=1)], Limits(max_failures=0))
    assert (action.kind, action.attempt) == (Kind.GIVE_UP, 0)
    # the default allows two retries: the third failure ends it
    assert next_actions([TrialView(T, 1, TrialState.FAILED, failures=2)], Limits())[0].kind is Kind.RESUBMIT
    assert next_actions([TrialView(T, 2, TrialState.FAILED, failures=3)], Limits())[0].kind is Kind.GIVE_UP


def test_preemptions_and_failures_count_against_their_own_limits_only():
    limits = Limits(max_preemptions=1, max_failures=1)
    failed_often_preempted = TrialView(T, 6, TrialState.FAILED, preemptions=5, failures=1)
    preempted_often_failed = TrialView("sweep-b", 6, TrialState.PREEMPTED, preemptions=1, failures=5)
    actions = next_actions([failed_often_preempted, preempted_often_failed], limits)
    assert [(a.kind, a.trial, a.attempt) for a in actions] == [(Kind.RESUBMIT, T, 7), (Kind.RESUBMIT, "sweep-b", 7)]


def test_a_failed_trial_of_a_drained_study_waits_unless_it_is_out_of_failures():
    views = [TrialView(T, 0, TrialState.FAILED, failures=1), TrialView("sweep-b", 2, TrialState.FAILED, failures=3)]
    assert next_actions(views, Limits(max_failures=2), drained=True) == [
        Action(Kind.GIVE_UP, "sweep-b", 2, "failed 3 times, more than retries.max_failures=2", resume=False)
    ]


def test_a_failed_trial_with_failures_left_is_retrying_not_finished():
    limits = Limits(max_failures=1)
    assert effective_state(TrialView(T, 0, TrialState.FAILED, failures=1), limits) is TrialState.RETRYING
    assert effective_state(TrialView(T, 1, TrialState.FAILED, failures=2), limits) is TrialState.FAILED
    assert effective_state(TrialView(T, 1, TrialState.FAILED, failures=1, given_up=True), limits) is TrialState.FAILED
    assert effective_state(TrialView(T, 0, TrialState.FAILED, failures=1)) is TrialState.FAILED  # no limits known
    assert effective_state(TrialView(T, 0, TrialState.PREEMPTED, preemptions=1), limits) is TrialState.PREEMPTED
    assert not TrialState.RETRYING.finished and not TrialState.RETRYING.in_flight


def test_suspended_trials_wait_while_drained_and_resume_after():
    views = [TrialView(T, 0, TrialState.SUSPENDED), TrialView("sweep-b", 1, TrialState.PREEMPTED, 1)]
    assert next_actions(views, Limits(), drained=True) == []
    actions = next_actions(views, Limits(), drained=False)
    assert [(a.kind, a.trial, a.attempt, a.resume) for a in actions] == [
        (Kind.RESUBMIT, T, 1, True),
        (Kind.RESUBMIT, "sweep-b", 2, True),
    ]


def test_given_up_annotation_makes_the_trial_failed():
    job = recorded.restarted_out_job(annotations={labels.GIVEN_UP: "preempted 11 times"})
    view = view_of(T, job, None)
    assert view.given_up and effective_state(view) is TrialState.FAILED
