"""Which jobs the Volcano job controller lost: the pure rule, in virtual time."""

from __future__ import annotations

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.objects.lost import LOST_AFTER, LOST_AFTER_MAX, Sightings, is_lost, patience, symptom


def job(phase: str | None = "Pending", lost_before: int | None = None, api: str = "batch.volcano.sh/v1alpha1") -> dict:
    notes = {labels.LOST: str(lost_before)} if lost_before is not None else {}
    status = {"state": {"phase": phase}} if phase else {}
    return {
        "apiVersion": api,
        "kind": "Job",
        "metadata": {"name": "t", "uid": "u1", "annotations": notes},
        "status": status,
    }


def group(phase: str) -> dict:
    return {"metadata": {"name": "t-u1", "ownerReferences": [{"kind": "Job", "uid": "u1"}]}, "status": {"phase": phase}}


POD = {"metadata": {"name": "t-worker-0", "labels": {"volcano.sh/job-name": "t"}}, "status": {"phase": "Pending"}}


@pytest.mark.parametrize(
    "what, the_job, the_group, pods, seen",
    [
        ("admitted, no pods", job(), group("Inqueue"), [], "PodGroup Inqueue"),
        ("no PodGroup", job(), None, [], "no PodGroup"),
        ("never seen by the controller (no status)", job(phase=None), None, [], "no PodGroup"),
        ("a gang waiting for GPUs", job(), group("Pending"), [], None),
        ("admitted, pods being made", job(), group("Inqueue"), [POD], None),
        ("running", job("Running"), group("Running"), [POD], None),
        ("finished, pods cleaned up", job("Completed"), None, [], None),
        ("a batch/v1 Job", job(api="batch/v1"), None, [], None),
    ],
)
def test_symptoms(what, the_job, the_group, pods, seen):
    assert symptom(the_job, the_group, pods) == seen, what


def test_admitted_without_pods_is_lost_after_a_minute_not_before():
    start = 1000.0
    assert not is_lost(job(), group("Inqueue"), [], start, start + LOST_AFTER - 1)
    assert is_lost(job(), group("Inqueue"), [], start, start + LOST_AFTER)
    assert not is_lost(job(), group("Inqueue"), [], None, start + 3600)  # never seen before: not yet


def test_a_gang_waiting_for_gpus_for_hours_is_never_lost():
    assert not is_lost(job(), group("Pending"), [], 0.0, 10 * 3600.0)


def test_attempts_lost_in_a_row_get_twice_as_long_each_up_to_16_minutes():
    assert [patience(job(lost_before=n)) for n in (None, 0, 1, 2, 3, 4, 5, 50)] == [
        60.0,
        60.0,
        120.0,
        240.0,
        480.0,
        960.0,
        960.0,
        LOST_AFTER_MAX,
    ]
    assert not is_lost(job(lost_before=1), None, [], 0.0, 119.0) and is_lost(job(lost_before=1), None, [], 0.0, 120.0)


def test_sightings_keep_the_first_time_a_job_showed_a_symptom_and_forget_it_when_it_stops():
    seen = Sightings()
    assert seen.update({"a", "b"}, 10.0) == {"a": 10.0, "b": 10.0}
    assert seen.update({"a", "c"}, 20.0) == {"a": 10.0, "c": 20.0}  # b got its pods
    assert seen.update({"a", "b"}, 30.0) == {"a": 10.0, "b": 30.0}  # b again: from now
    seen.restart("a", 35.0)
    assert seen.update({"a"}, 40.0) == {"a": 35.0}
    seen.reset()
    assert seen.update({"a"}, 50.0) == {"a": 50.0}
