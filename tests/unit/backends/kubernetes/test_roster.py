"""`status` of one study lists every trial, created or not, each with its parameters: the
trials not created yet and those whose job is gone come from the study its record keeps."""

from __future__ import annotations

import json

from stratctl.backends.kubernetes.objects import roster
from stratctl.backends.kubernetes.objects.record import StudyRecord, record_manifest
from stratctl.backends.kubernetes.verbs.drain import drain
from stratctl.backends.kubernetes.verbs.status import collect
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.run.rows import TrialRow
from tests.unit.backends.kubernetes.test_summary import run_until
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make

NS = "stratctl-e2e"


def started(study_file, cycles: int = 1):
    """The 10-trial study of tests/unit/loop.py with a few trials created (3 in flight at most)."""
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    submitter.wall = lambda: 5000.0 + clock()
    run_until(submitter, cluster, clock, cycles=cycles)
    return cluster, clock, trials


def test_every_trial_is_listed_with_its_parameters_created_or_not(study_file):
    cluster, clock, trials = started(study_file)
    created = set(cluster.trial_names())
    assert 0 < len(created) < 10
    snap = collect(cluster, NS, "loop", now=5000.0 + clock(), every_trial=True)
    assert [t.trial for t in snap.trials] == sorted(t.name for t in trials)
    by_name = {t.name: t for t in trials}
    for row in snap.trials:
        assert row.params == dict(by_name[row.trial].params) and row.index == by_name[row.trial].index
        if row.trial not in created:
            assert row.state == "waiting" and row.pending == "not created yet" and row.job == ""
    assert list(snap.trials[0].params) == ["lr", "layers"]  # as the study file lists them
    # the study's figures are those of the cluster: the waiting rows are counted once
    assert snap.studies[0].states["waiting"] == 10 - len(created)
    assert snap.studies[0].attempts == len(created)
    # without every_trial (wait, logs): the trials with jobs only, as before
    assert {t.trial for t in collect(cluster, NS, "loop", now=5000.0 + clock()).trials} == created


def test_the_table_of_the_first_trials_takes_them_by_name_created_or_not(study_file, monkeypatch):
    monkeypatch.setattr("stratctl.backends.kubernetes.loop.keeper.SUMMARY_EVERY", 0.0)
    cluster, clock, trials = started(study_file, cycles=2)
    now = 5000.0 + clock()
    full = collect(cluster, NS, "loop", now=now, every_trial=True)
    fast = collect(cluster, NS, "loop", now=now, shown=4, every_trial=True)
    assert fast.studies[0].as_of is not None  # read from the loop's summary, not from every job
    assert [(t.trial, t.state, t.params) for t in fast.trials] == [
        (t.trial, t.state, t.params) for t in full.trials[:4]
    ]
    assert fast.total_trials == 10  # "6 more trials not shown": every trial counts, created or not


def test_after_drain_suspended_trials_keep_their_parameters_and_waiting_ones_say_why(study_file):
    cluster, clock, trials = started(study_file)
    [outcome] = drain(cluster, NS, "loop", settle=0)
    assert outcome.suspended
    snap = collect(cluster, NS, "loop", now=5000.0 + clock(), every_trial=True)
    assert len(snap.trials) == 10
    by_name = {t.name: t for t in trials}
    states = {}
    for row in snap.trials:
        assert row.params == dict(by_name[row.trial].params), row
        states[row.trial] = row.state
    assert {t for t, s in states.items() if s == "suspended"} == set(outcome.suspended)
    waiting = [r for r in snap.trials if r.state == "waiting"]
    assert waiting and all(r.pending == "not created yet; the study is drained" for r in waiting)
    # the suspended rows come from the marks alone: params there even without the roster
    plain = collect(cluster, NS, "loop", now=5000.0 + clock())
    assert all(r.params for r in plain.trials if r.state == "suspended")


def test_a_study_whose_every_trial_has_a_job_is_not_expanded(study_file, monkeypatch):
    cluster, clock, trials = started(study_file, cycles=12)
    assert len(cluster.trial_names()) == 10

    def refuse(record):
        raise AssertionError("expanded")

    monkeypatch.setattr(roster, "expected", refuse)
    assert len(collect(cluster, NS, "loop", now=5000.0 + clock(), every_trial=True).trials) == 10


def test_rows_without_parameters_get_them_and_the_missing_trials_come_in_order(study_file):
    study = load_study(study_file())
    trials = expand(study)
    record = StudyRecord(study="loop", spec_hash="h", trials=10, source=open(study_file()).read())
    cleaned = TrialRow("loop", trials[3].name, "succeeded", -1)  # known only as finished to the record
    rows = roster.complete(record, [cleaned], trials)
    assert len(rows) == 10 and [r.trial for r in rows] == sorted(t.name for t in trials)
    done = next(r for r in rows if r.trial == trials[3].name)
    assert done.state == "succeeded" and done.params == dict(trials[3].params) and done.index == 3
    below = sorted(t.name for t in trials)[5]
    assert [r.trial for r in roster.complete(record, [], trials, below)] == sorted(t.name for t in trials)[:5]


def test_a_record_that_cannot_be_expanded_leaves_the_rows_as_they_are():
    broken = StudyRecord(study="old", spec_hash="h", trials=4, source="name: old\nspace: [not, a, mapping]\n")
    assert roster.expected(broken) is None
    row = TrialRow("old", "old-1", "running", 0)
    cm = record_manifest(broken, NS)
    assert roster.every_trial([cm], [row]) == [row]


def test_a_closed_loop_search_lists_the_trials_it_asked_only(study_file):
    text = open(study_file()).read().replace("strategy: {kind: grid}", "strategy: {kind: tpe, trials: 10, seed: 1}")
    record = StudyRecord(study="loop", spec_hash="h", trials=10, source=text)
    assert roster.expected(record) is None  # the trials not asked yet have no parameters to show
    assert json.dumps(roster.complete(record, [], None)) == "[]"
