"""Submitting an edited study again: refused with nothing created, or (`--rerun-changed`) the
changed trials rerun as new attempts with the new spec, never two attempts of a trial at once."""

from __future__ import annotations

import json

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB
from stratctl.backends.kubernetes.verbs.revision import revise
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import StudyChanged
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import Events, FakeClock
from tests.unit.loop import STUDY, make
from tests.unit.rendering import Renderer

EDITED = STUDY.replace("image: busybox", "image: busybox:1.36").replace('"train"', '"train2"')


def again(cluster, path, rerun=False, events=None):
    """What `submit` does before its loop starts, for the study file as it is now."""
    study = load_study(path)
    trials = expand(study)
    renderer = Renderer(study)
    manifests = {t.name: m for t, m in zip(trials, renderer.render_all(trials))}
    return revise(cluster, study, trials, renderer, manifests, VOLCANO_JOB, rerun, events or Events(), file=path)


def submitted(tmp_path, text=STUDY, **options):
    """A study submitted and followed to its end (or, detached, left running)."""
    path = tmp_path / "study.yaml"
    path.write_text(text)
    cluster = FakeCluster()
    make(str(path), cluster, FakeClock(), **options)[0].run()
    return cluster, path


def image_of(job):
    return job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"]


def env_of(job):
    return {e["name"]: e.get("value") for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}


def in_flight_per_trial(cluster) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in cluster.jobs(lambda p: p in ("Pending", "Running")):
        trial = job["metadata"]["labels"][labels.TRIAL]
        counts[trial] = counts.get(trial, 0) + 1
    return counts


def test_an_unchanged_rerun_passes_and_the_record_keeps_the_spec(tmp_path):
    cluster, path = submitted(tmp_path)
    spec = json.loads(cluster.record("loop")["data"]["spec"])
    assert spec["trial"]["image"] == "busybox"
    c = again(cluster, path)
    assert not c.refused and c.unchanged == 10 and c.fields == ()
    assert again(FakeCluster(), path) is None  # never submitted: nothing to compare


def test_an_edited_study_is_refused_with_exit_4_and_nothing_created(tmp_path):
    cluster, path = submitted(tmp_path)
    creates, record = list(cluster.creates), dict(cluster.record("loop")["data"])
    path.write_text(EDITED)
    with pytest.raises(StudyChanged) as refused:
        again(cluster, path)
    assert refused.value.exit_code == 4
    message = str(refused.value)
    assert "(trial.command.0, trial.image): 10 of 10 trial(s) in the cluster would run with a different spec" in message
    assert f"stratctl submit {path} --rerun-changed" in message and "new name" in message
    assert cluster.creates == creates and cluster.record("loop")["data"] == record


def test_rerun_changed_gives_changed_trials_new_attempts_with_the_new_spec(tmp_path):
    cluster, path = submitted(tmp_path, detach=True)  # some finished, some still running
    running = {j["metadata"]["name"] for j in cluster.jobs(lambda p: p in ("Pending", "Running"))}
    assert running
    path.write_text(EDITED)
    events = Events()
    c = again(cluster, path, rerun=True, events=events)
    assert len(c.changed) == 10
    jobs = {j["metadata"]["name"]: j for j in cluster.jobs()}
    for trial in c.changed:
        new = jobs[f"{trial}-a1"]
        assert image_of(new) == "busybox:1.36" and env_of(new)[labels.ENV_RESUME] == "0"
        assert new["metadata"]["annotations"][labels.REQUEUED_BECAUSE].startswith("study changed (trial.command.0")
    assert not running & set(jobs)  # the old attempts that were still running are gone
    assert all(n == 1 for n in in_flight_per_trial(cluster).values())
    assert events.about("runs the new spec")
    # the loop follows the new attempts to their end; a further rerun finds nothing to do
    progress = make(str(path), cluster, FakeClock())[0].run()
    assert progress.succeeded == 10 and progress.created == 0
    creates = list(cluster.creates)
    assert not again(cluster, path, rerun=True).refused and cluster.creates == creates
    assert json.loads(cluster.record("loop")["data"]["spec"])["trial"]["image"] == "busybox:1.36"


class Killed(BaseException):
    """The launcher dying between creating the new attempt and deleting the old one."""


def test_a_crash_between_the_new_attempt_and_the_delete_never_leaves_two_running(tmp_path):
    cluster, path = submitted(tmp_path, detach=True)
    path.write_text(EDITED)
    delete = cluster.delete

    def die(*args, **kwargs):
        raise Killed()

    cluster.delete = die
    with pytest.raises(Killed):
        again(cluster, path, rerun=True)
    assert max(in_flight_per_trial(cluster).values()) == 2  # one trial has both attempts running
    cluster.delete = delete
    events = Events()
    again(cluster, path, rerun=True, events=events)  # the same command again
    assert all(n == 1 for n in in_flight_per_trial(cluster).values())
    assert events.about("replaced by")
    # every trial got its new attempt exactly once, across the two runs
    reruns = [name for name in cluster.creates if name.endswith("-a1")]
    assert len(reruns) == len(set(reruns)) == 10


def test_an_older_record_without_the_spec_compares_trials_and_says_fields_unknown(tmp_path):
    cluster, path = submitted(tmp_path)
    del cluster.record("loop")["data"]["spec"]
    path.write_text(EDITED)
    with pytest.raises(StudyChanged, match="fields unknown: .*10 of 10 trial"):
        again(cluster, path)


def test_a_template_that_renders_nothing_differently_or_more_trials_is_allowed(tmp_path):
    cluster, path = submitted(tmp_path)
    path.write_text("# a comment\n" + STUDY.replace("qps: 100", "qps: 50"))
    events = Events()
    c = again(cluster, path, events=events)
    assert not c.refused and c.fields == ("throttle.qps",)
    assert events.about("no trial in the cluster renders differently")
    path.write_text(STUDY.replace("0.00001]", "0.00001, 0.000001]"))  # two more trials
    c = again(cluster, path)
    assert not c.refused and len(c.added) == 2 and c.unchanged == 10


def test_trials_dropped_from_the_study_are_refused_and_their_running_jobs_stopped_on_rerun(tmp_path):
    cluster, path = submitted(tmp_path, detach=True)
    path.write_text(STUDY.replace(", 0.00001]", "]"))
    with pytest.raises(StudyChanged, match="2 trial.s. in the cluster are no longer in the study"):
        again(cluster, path)
    again(cluster, path, rerun=True)
    dropped = {
        j["metadata"]["labels"][labels.TRIAL]
        for j in cluster.jobs()
        if json.loads(j["metadata"]["annotations"][labels.PARAMS])["lr"] == 0.00001
    }
    assert not any(t in in_flight_per_trial(cluster) for t in dropped)
    progress = make(str(path), cluster, FakeClock())[0].run()
    assert progress.succeeded == 8
    c = again(cluster, path)  # the change was accepted: the same command again goes through
    assert not c.refused and c.unchanged == 8


def test_cleaned_up_trials_are_compared_through_the_recorded_spec_and_run_again(tmp_path):
    cluster, path = submitted(tmp_path, STUDY + "cleanup: delete\n")
    assert not cluster.jobs() and len(json.loads(cluster.record("loop")["data"]["finished"])) == 10
    path.write_text(STUDY.replace("qps: 100", "qps: 50") + "cleanup: delete\n")
    assert not again(cluster, path).refused  # a loop setting: the old spec renders them alike
    path.write_text(EDITED + "cleanup: delete\n")
    with pytest.raises(StudyChanged, match=r"\(trial.command.0, trial.image\): 10 of 10"):
        again(cluster, path)
    again(cluster, path, rerun=True)
    assert json.loads(cluster.record("loop")["data"]["finished"]) == {}
    progress = make(str(path), cluster, FakeClock())[0].run()
    assert progress.succeeded == 10 and progress.created == 10
