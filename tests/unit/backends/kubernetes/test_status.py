"""Status rows from recorded objects, the pictures, and best-first sorting by a result metric."""

from __future__ import annotations

import json

from stratctl import labels
from stratctl.backends.kubernetes.objects.jobview import Carried
from stratctl.backends.kubernetes.objects.record import StudyRecord, record_manifest, suspended_patch
from stratctl.backends.kubernetes.objects.state import timestamp
from stratctl.backends.kubernetes.objects.summary import build, slim_job
from stratctl.backends.kubernetes.objects.waiting import pending_reason
from stratctl.backends.kubernetes.verbs.status import _result
from stratctl.run.ranking import sort_trials
from stratctl.run.rows import Snapshot, TrialRow
from stratctl.view.tables import studies_table, table
from tests.unit import recorded
from tests.unit.fakes import text

NOW = timestamp("2025-05-01T11:30:00Z")


def snapshot(jobs: list[dict], reasons=None, results=None, record=None, marks=None):
    record = record or StudyRecord(study=recorded.STUDY, spec_hash="x", trials=10, target=4, reason="adaptive: 4")
    cm = record_manifest(record, "stratctl-e2e")
    if marks:
        cm["data"].update(suspended_patch(marks)["data"])
    slim = {}
    for job in jobs:
        trial, attempt, s = slim_job(job)
        slim[(recorded.STUDY, trial + job["metadata"]["name"][-3:])] = (attempt, s)
    return Snapshot("stratctl-e2e", NOW, *build(NOW, [cm], slim, reasons or {}, results or {}))


def test_study_and_trial_rows_from_recorded_jobs():
    pending = recorded.pending_job()
    pending["metadata"]["name"] = "sweep-pending"
    resumed = recorded.restarted_and_running_job()
    resumed["metadata"]["name"] = "sweep-a1"
    resumed["metadata"]["labels"][labels.ATTEMPT] = "1"
    resumed["metadata"]["annotations"].update(
        Carried(preemptions=1, gpu_seconds=7200, gpu_seconds_lost=7200).annotations()
    )
    done = recorded.completed_job()
    done["metadata"]["name"] = "sweep-done"
    snap = snapshot(
        [pending, resumed, done],
        reasons={"sweep-pending": "2/2 tasks in gang unschedulable"},
        results={"sweep-done": {"loss": 0.2}},
        marks={"sweep-gone": {"attempt": 0, "gpu_seconds": 3600}},
    )
    [study] = snap.studies
    assert study.states == {
        "waiting": 6,
        "pending": 1,
        "running": 1,
        "preempted": 0,
        "retrying": 0,
        "suspended": 1,
        "succeeded": 1,
        "pruned": 0,
        "failed": 0,
    }
    assert study.in_flight == 2 and study.target == 4 and study.decision == "adaptive: 4"
    assert study.preemptions == 2  # 1 carried + 1 in-place restart of attempt 1
    assert study.attempts == 1 + 2 + 1 + 1
    by_job = {t.job: t for t in snap.trials}
    assert by_job["sweep-pending"].pending == "2/2 tasks in gang unschedulable"
    assert by_job["sweep-done"].result == {"loss": 0.2} and by_job["sweep-done"].params == {"lr": 0.01, "layers": 4}
    assert by_job["sweep-a1"].gpu_seconds == 7200 + 50 * 60 * 4  # carried + running since 10:40 on 4 GPUs
    # 2h lost carried; one hour of suspended work; 1h done trial on 4 GPUs
    assert round(study.gpu_hours_lost, 2) == 2.0
    assert json.dumps(snap.as_dict())  # JSON-ready


def test_pending_reasons_and_results_from_recorded_objects():
    job = recorded.pending_job()
    assert pending_reason(recorded.unschedulable_podgroup(job)).startswith("2/2 tasks in gang unschedulable")
    assert pending_reason({"status": {"phase": "Inqueue"}}) == "admitted to the queue, gang not yet placed"
    assert pending_reason({"status": {"phase": "Running"}}) == ""
    assert _result(recorded.succeeded_pod(recorded.completed_job())) == {"loss": 0.231, "accuracy": 0.912}
    assert _result(recorded.succeeded_pod(recorded.completed_job(), message="not json")) is None
    assert _result(recorded.succeeded_pod(recorded.completed_job(), message="[1, 2]")) is None


def test_sort_best_first_either_way_and_missing_metric_last():
    rows = [
        TrialRow("s", n, "succeeded", 0, result=r)
        for n, r in [
            ("a", {"loss": 0.5, "acc": 0.7}),
            ("b", None),
            ("c", {"loss": 0.1, "acc": 0.9}),
            ("d", {"acc": "x"}),
        ]
    ]
    assert [r.trial for r in sort_trials(rows, "loss")] == ["c", "a", "b", "d"]
    assert [r.trial for r in sort_trials(rows, "-acc")] == ["c", "a", "b", "d"]
    assert [r.trial for r in sort_trials(rows, None)] == ["a", "b", "c", "d"]


def test_tables_show_what_a_user_looks_for():
    pending = recorded.pending_job()
    done = recorded.completed_job()
    done["metadata"]["name"] = "sweep-done"
    snap = snapshot(
        [pending, done],
        reasons={pending["metadata"]["name"]: "2/2 tasks in gang unschedulable"},
        results={"sweep-done": {"loss": 0.2}},
    )
    out = text(table(snap.trials, NOW))
    assert "2/2 tasks in gang unschedulable" in out
    header = out.splitlines()[0].split()
    assert header[:6] == ["trial", "state", "attempt", "lr", "layers", "loss"] and " 0.2 " in out  # a column per metric
    assert "1h30m" in out  # age of the jobs created 10:00
    limited = text(table(snap.trials, NOW, limit=1))
    assert "1 more trial not shown" in limited
    studies = text(studies_table(snap.studies))
    assert "sweep" in studies and "1 pending" in studies and "1 succeeded" in studies
    assert studies.splitlines()[3].split()[-3:] == ["1", "4", "4.00"]  # in flight, target, GPU-hours


def test_failures_are_counted_per_trial_and_study_apart_from_preemptions():
    given_up = recorded.aborted_job(
        attempt=1, annotations={**Carried(preemptions=2, failures=1).annotations(), labels.GIVEN_UP: "failed 2 times"}
    )
    retried = recorded.running_job()  # attempt 1 of another trial, after one failure
    retried["metadata"]["name"] = "sweep-retry"
    retried["metadata"]["labels"][labels.ATTEMPT] = "1"
    retried["metadata"]["annotations"].update(Carried(failures=1).annotations())
    snap = snapshot([given_up, retried], marks={"sweep-gone": {"attempt": 0, "failures": 2, "preemptions": 1}})
    rows = {t.job or t.trial: (t.state, t.attempt, t.failures, t.preemptions) for t in snap.trials}
    assert rows == {
        f"{recorded.TRIAL}-a1": ("failed", 1, 2, 2),
        "sweep-retry": ("running", 1, 1, 0),
        "sweep-gone": ("suspended", 0, 2, 1),
    }
    [study] = snap.studies
    assert (study.failures, study.preemptions, study.attempts) == (5, 3, 5)
    out = snap.as_dict()
    assert out["studies"][0]["failures"] == 5
    assert sorted(t["failures"] for t in out["trials"]) == [1, 2, 2]


def test_a_failed_attempt_with_retries_left_is_retrying_not_failed():
    from stratctl.backends.kubernetes.objects.jobview import Carried

    first = recorded.aborted_job()  # failed, attempt 0: one failure
    second = recorded.aborted_job(attempt=1, annotations=Carried(failures=1).annotations())  # the second failure
    second["metadata"]["labels"][labels.TRIAL] = "other"

    def states(max_failures):
        record = StudyRecord(study=recorded.STUDY, spec_hash="x", trials=2, max_failures=max_failures)
        return snapshot([first, second], record=record).studies[0].states

    assert (states(1)["retrying"], states(1)["failed"]) == (1, 1)  # 1 failure ≤ 1 left; 2 > 1 given up
    assert (states(2)["retrying"], states(2)["failed"]) == (2, 0)
    assert (states(None)["retrying"], states(None)["failed"]) == (0, 2)  # a record from before: as the job says
