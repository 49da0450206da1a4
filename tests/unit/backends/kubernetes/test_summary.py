"""The study summary a submit loop keeps in its record, and the table `status` builds from it."""

from __future__ import annotations

import json
from dataclasses import asdict

from stratctl import labels
from stratctl.backends.kubernetes.objects.record import StudyRecord, record_manifest
from stratctl.backends.kubernetes.objects.summary import SUMMARY_KEY, summary_data, summary_of
from stratctl.backends.kubernetes.verbs.status import collect
from stratctl.run.rows import StudyRow
from stratctl.view.tables import age, studies_table, table
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock, text
from tests.unit.loop import make

STATES = {"waiting": 2, "pending": 1, "running": 3, "preempted": 0, "suspended": 0, "succeeded": 4, "failed": 0}


def row(**changes) -> StudyRow:
    base = dict(
        study="loop",
        critical=False,
        drained=False,
        trials=10,
        states=dict(STATES),
        in_flight=4,
        target=4,
        decision="adaptive: 4",
        attempts=9,
        preemptions=1,
        gpu_hours=2.5,
        gpu_hours_lost=0.25,
    )
    return StudyRow(**{**base, **changes})


def record_with(summary: dict, **flags) -> dict:
    cm = record_manifest(
        StudyRecord(study="loop", spec_hash="h", trials=10, target=6, reason="adaptive: 6", **flags), "ns"
    )
    cm["data"].update(summary)
    return cm


def test_a_fresh_summary_is_read_back_with_the_flags_set_since():
    cm = record_with(summary_data(row(), at=1000.0), drained=True)
    got = summary_of(cm, now=1029.0, fresh=30)
    assert asdict(got) == {**asdict(row()), "as_of": 1000.0, "drained": True, "target": 6, "decision": "adaptive: 6"}


def test_a_stale_summary_is_not_used_unless_every_trial_finished():
    assert summary_of(record_with(summary_data(row(), at=1000.0)), now=1031.0, fresh=30) is None
    done = row(states={**{k: 0 for k in STATES}, "succeeded": 9, "failed": 1}, in_flight=0)
    assert summary_of(record_with(summary_data(done, at=1000.0)), now=99999.0, fresh=30).states["succeeded"] == 9


def test_no_or_broken_summary_is_none():
    assert summary_of(record_with({}), now=0, fresh=30) is None
    assert summary_of(record_with({SUMMARY_KEY: "{not json"}), now=0, fresh=30) is None
    assert summary_of(record_with({SUMMARY_KEY: json.dumps({"study": "loop"})}), now=0, fresh=30) is None


class Stop(BaseException):
    pass


def run_until(submitter, cluster, clock, cycles: int):
    """Run the loop for `cycles` sleeps, then stop it where it is (a loop still running)."""
    sleeps = {"n": 0}

    def sleep(seconds):
        sleeps["n"] += 1
        if sleeps["n"] > cycles:
            raise Stop
        clock.sleep(seconds)
        cluster.advance()

    submitter.sleep = sleep
    try:
        submitter.run()
    except Stop:
        pass


def test_the_loop_keeps_a_summary_that_status_shows_instead_of_listing_every_job(study_file, monkeypatch):
    monkeypatch.setattr("stratctl.backends.kubernetes.loop.keeper.SUMMARY_EVERY", 0.0)
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    seen = []  # what a full listing shows at the moment each summary is written
    patch = cluster.patch

    def watching(kind, name, body, namespace=None):
        if SUMMARY_KEY in body.get("data", {}):
            seen.append(
                (json.loads(body["data"][SUMMARY_KEY]), collect(cluster, "stratctl-e2e", "loop", now=5000.0 + clock()))
            )
        return patch(kind, name, body, namespace)

    cluster.patch = watching
    run_until(submitter, cluster, clock, cycles=6)
    assert len(seen) >= 5
    for stored, full in seen:
        assert stored["states"] == full.studies[0].states and stored["attempts"] == full.studies[0].attempts
    assert {s["states"]["running"] for s, _ in seen} >= {0, 3}  # it followed the study, not one moment

    now = 5000.0 + clock()
    full = collect(cluster, "stratctl-e2e", "loop", now=now)
    pages_before = cluster.pages_served
    fast = collect(cluster, "stratctl-e2e", "loop", now=now, shown=2)
    assert fast.studies[0].states == seen[-1][0]["states"] and fast.studies[0].as_of == seen[-1][0]["as_of"]
    # the table's trials: the first two by name, as a full listing has them, from small pages
    assert [(t.trial, t.state) for t in fast.trials] == [(t.trial, t.state) for t in full.trials][:2]
    assert cluster.pages_served - pages_before <= 2  # the first page of jobs, results of the finished ones shown
    assert fast.total_trials == len(seen[-1][1].trials)  # trials in the cluster as the summary saw them
    shown = text(studies_table(fast.studies, now)) + text(table(fast.trials, now, 2, fast.total_trials))
    assert f"figures as of {age(now - fast.studies[0].as_of)} ago" in shown
    assert f"{fast.total_trials - 2} more trials not shown" in shown


def test_a_finished_study_keeps_its_final_summary(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    assert submitter.run().succeeded == 10
    much_later = 5000.0 + clock() + 86400
    fast = collect(cluster, "stratctl-e2e", "loop", now=much_later, shown=2)
    full = collect(cluster, "stratctl-e2e", "loop", now=much_later)
    assert fast.studies[0].as_of is not None and fast.studies[0].states["succeeded"] == 10
    assert {**asdict(fast.studies[0]), "as_of": None} == asdict(full.studies[0])


def test_without_a_fresh_summary_status_lists_everything(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    run_until(submitter, cluster, clock, cycles=3)
    later = 5000.0 + clock() + 60  # the loop has been gone for a minute
    fast = collect(cluster, "stratctl-e2e", "loop", now=later, shown=2)
    full = collect(cluster, "stratctl-e2e", "loop", now=later)
    assert fast.studies[0].as_of is None and fast.studies == full.studies
    assert fast.trials == full.trials  # every trial read, the table cuts it


def test_the_first_trials_include_those_known_only_to_the_record(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    run_until(submitter, cluster, clock, cycles=6)
    first = min(t.name for t in trials)
    for job in cluster.jobs():
        if job["metadata"]["labels"][labels.TRIAL] == first:
            cluster.delete(("batch.volcano.sh/v1alpha1", "Job"), job["metadata"]["name"])
    cluster.record("loop")["data"]["finished"] = json.dumps({first: "succeeded"})
    fast = collect(cluster, "stratctl-e2e", "loop", now=5000.0 + clock(), shown=3)
    assert fast.trials[0].trial == first and fast.trials[0].state == "succeeded"
    assert len(fast.trials) == 3
