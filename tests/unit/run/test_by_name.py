"""A study on Slurm or YARN found by name and where it lives: its study directory (beside
the study file, whatever the working directory), the catalog of names, which backend a
name means, the messages of `wait` on a study nothing follows, of `logs` and `delete`."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from stratctl.backends import named_study
from stratctl.backends.batch import catalog
from stratctl.backends.batch import delete as attemptdelete
from stratctl.backends.batch.following import LOOP, Heartbeat, follower
from stratctl.backends.batch.scheduler import cwd_directory, study_directory
from stratctl.errors import ExitCode, UsageError
from stratctl.run.finish import unadmitted, unfollowed_text, wait
from stratctl.trialstate import TrialState
from tests.unit.fakes import FakeClock
from tests.unit.run.test_wait import row
from tests.unit.studies import load, write

SLURM = """\
name: sw
backend: slurm
slurm: {partition: research}
space: {lr: {type: choice, values: [0.1, 0.2]}}
strategy: {kind: grid}
trial: {command: ["true"], resources: {limits: {nvidia.com/gpu: 1}}}
"""


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_the_study_directory_is_beside_the_study_file_whatever_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "proj").mkdir()
    study = load(tmp_path / "proj", SLURM)
    for cwd in (tmp_path, tmp_path / "proj"):
        monkeypatch.chdir(cwd)
        assert study_directory(study) == (tmp_path / "proj" / "stratctl-out" / "sw").resolve()
    # where stratctl once put it, against the working directory: a different place from tmp_path
    monkeypatch.chdir(tmp_path)
    assert cwd_directory(study) == tmp_path.resolve() / "stratctl-out" / "sw"
    absolute = load(tmp_path / "proj", SLURM.replace("partition: research", f"output_dir: {tmp_path}/shared"))
    assert study_directory(absolute) == tmp_path / "shared" / "sw" and cwd_directory(absolute) is None


def test_a_submitted_study_is_found_by_name_and_the_name_chooses_its_backend(tmp_path, state, monkeypatch):
    path = write(tmp_path, SLURM)
    study = load(tmp_path, SLURM)
    directory = study_directory(study)
    catalog.keep(catalog.Entry("sw", "slurm", str(directory), str(path), "slurm:research"), study.text)
    monkeypatch.chdir("/")
    found = named_study("sw")
    assert found is not None and found[0].name == "sw" and found[1].output == directory
    assert named_study("sw", backend="kubernetes") is None  # a Kubernetes study of the same name
    assert named_study("other") is None  # a name no batch scheduler knows: Kubernetes'
    with pytest.raises(UsageError, match=r"no yarn study sw is known here .*give the study's file"):
        named_study("sw", backend="yarn")
    with pytest.raises(UsageError, match="--backend nomad: expected one of kubernetes, slurm, yarn"):
        named_study("sw", backend="nomad")
    with pytest.raises(UsageError, match=r"is a study on slurm, not yarn: leave --backend out"):
        named_study(str(path), backend="yarn")
    with pytest.raises(UsageError, match="--rm names a YARN ResourceManager: study sw runs on slurm"):
        named_study(str(path), rm="http://rm:8088")


def test_a_name_two_backends_know_is_refused_saying_which(tmp_path):
    found = [catalog.Entry("s", "slurm", "/a/s"), catalog.Entry("s", "yarn", "/b/s")]
    with pytest.raises(UsageError) as refused:
        catalog.choose("s", found, None)
    assert str(refused.value) == (
        "study s is known on slurm (/a/s) and yarn (/b/s): say which with --backend slurm or --backend yarn"
    )
    assert refused.value.exit_code == ExitCode.INVALID_INPUT
    assert catalog.choose("s", found, "yarn") == found[1]


def test_a_deleted_study_directory_is_no_entry_and_forget_removes_the_name(tmp_path, state):
    directory = tmp_path / "out" / "s"
    entry = catalog.Entry("s", "yarn", str(directory))
    catalog.keep(entry, "name: s\n")
    assert catalog.entries("s") == [entry]
    catalog.forget(entry)
    assert catalog.entries("s") == []
    catalog.keep(entry, "name: s\n")
    (directory / catalog.SPEC).unlink()
    assert catalog.entries("s") == []


def test_wait_says_at_once_that_nothing_follows_a_study_with_trials_to_admit_then_waits():
    clock = FakeClock()
    said: list[str] = []
    follows = iter([False, False, True, True])
    code = wait(
        lambda: row(waiting=3, succeeded=1),
        said.append,
        timeout=5,
        interval=2,
        clock=clock,
        sleep=clock.sleep,
        followed=lambda: next(follows),
        follow_with="stratctl submit /p/study.yaml",
    )
    assert code == ExitCode.TIMEOUT
    assert said == [
        "s: 3 waiting, 1 succeeded",
        "s: no submit loop follows this study, and 3 trials wait to be admitted: nothing will admit them until "
        "`stratctl submit /p/study.yaml` runs (it follows the study to its end)",
        "s: a submit loop follows it now",
        "s: timed out after 5s, not finished (3 waiting, 1 succeeded); trials keep running",
    ]


def test_trials_not_created_count_as_waiting_to_be_admitted_and_none_means_no_word():
    assert unadmitted(row(succeeded=1, running=1)) == 2  # 4 trials, 2 listed
    assert unadmitted(row(running=4)) == 0
    assert "1 trial waits to be admitted: nothing will admit it until `x` runs" in unfollowed_text(
        row(waiting=1, running=3), "x"
    )
    said: list[str] = []
    clock = FakeClock()
    wait(lambda: row(running=4), said.append, timeout=1, clock=clock, sleep=clock.sleep, followed=lambda: False)
    assert not any("no submit loop" in line for line in said)


def test_the_heartbeat_says_a_loop_follows_until_it_stops_or_dies_or_goes_stale(tmp_path):
    now = [1000.0]
    beat = Heartbeat(tmp_path, wall=lambda: now[0])
    assert follower(tmp_path, now[0]) is None
    beat.update(None)
    assert follower(tmp_path, now[0])["pid"] == os.getpid()
    assert follower(tmp_path, now[0] + 91) is None  # stale: a loop gone without a word
    beat.stop()
    assert follower(tmp_path, now[0]) is None
    marker = {"at": time.time(), "running": True, "host": socket.gethostname(), "pid": 999999999}
    (tmp_path / LOOP).write_text(json.dumps(marker))
    assert follower(tmp_path, time.time()) is None  # killed on this machine


def test_delete_refuses_while_a_loop_follows_and_asks_on_a_terminal(tmp_path):
    study = load(tmp_path, SLURM)
    loop = {"at": 100.0, "running": True, "host": "login1", "pid": 42}
    with pytest.raises(attemptdelete.Followed) as refused:
        attemptdelete.check(study, loop, 112.0, force=False, yes=True, interactive=False)
    assert str(refused.value) == (
        "a submit loop on login1 (pid 42) is following study sw (heartbeat 12 s ago): stop it first, or pass --force"
    )
    assert attemptdelete.check(study, loop, 112.0, force=True, yes=False, interactive=True) is True
    with pytest.raises(UsageError, match="deleting study sw needs a confirmation: pass --yes"):
        attemptdelete.check(study, None, 0.0, force=False, yes=False, interactive=False)


def test_logs_names_a_trial_that_does_not_exist_and_one_that_has_not_started(tmp_path):
    from stratctl.backends.batch import logs as attemptlogs

    study = load(tmp_path, SLURM)
    with pytest.raises(UsageError) as refused:
        attemptlogs.trial_of(study, "nosuch")
    assert str(refused.value) == "study sw has no trial nosuch (`stratctl status sw -o name` lists its trials)"

    class Quiet:
        title = "Slurm"

        def attempts(self):
            return {}

        def log_files(self, trial, name):
            return []

    trial = attemptlogs.trial_of(study, "0")
    with pytest.raises(UsageError) as silent:
        attemptlogs.sources(study, Quiet(), trial, None)  # type: ignore[arg-type]
    assert str(silent.value) == (
        f"trial {trial.name} of study sw has logged nothing yet: it is {TrialState.WAITING.value} (not submitted yet)"
    )


def test_a_study_whose_marks_are_where_the_working_directory_put_them_is_refused_saying_where_to_move_them(
    tmp_path, monkeypatch
):
    from stratctl.backends.launch import _not_moved
    from stratctl.errors import StudyMoved

    (tmp_path / "proj").mkdir()
    study = load(tmp_path / "proj", SLURM)
    monkeypatch.chdir(tmp_path)
    old = tmp_path.resolve() / "stratctl-out" / "sw"
    new = study_directory(study)
    _not_moved(study, new, "Slurm controller")  # nothing there: nothing to say
    (old / "sw-0").mkdir(parents=True)
    with pytest.raises(StudyMoved) as refused:
        _not_moved(study, new, "Slurm controller")
    assert refused.value.exit_code == ExitCode.CONFLICT
    assert f"`mv {old} {new}`" in str(refused.value)
    assert str(refused.value).endswith("would send again every trial the Slurm controller has forgotten")
    new.mkdir(parents=True)
    _not_moved(study, new, "Slurm controller")  # moved (or already used): goes ahead


def test_wait_on_a_kubernetes_study_its_loop_stopped_says_nothing_admits_the_trials_left(study_file, monkeypatch):
    from typer.testing import CliRunner

    from stratctl.cli.main import app
    from tests.unit.fake_cluster import FakeCluster
    from tests.unit.loop import make

    cluster, clock = FakeCluster(), FakeClock()
    submitter, _ = make(study_file(), cluster, clock, timeout=5.0, max_inflight=2, parallelism="static")
    submitter.sleep = clock.sleep  # the cluster stands still: the loop stops at its timeout, 8 trials not admitted
    assert submitter.run().timed_out
    monkeypatch.setattr(cluster, "close", lambda: None, raising=False)
    monkeypatch.setattr("stratctl.backends.kubernetes.api.connect.one_shot", lambda *a, **k: cluster)
    monkeypatch.setenv("STRATCTL_STATE_DIR", str(study_file().rsplit("/", 1)[0] + "/state"))
    result = CliRunner().invoke(app, ["wait", "loop", "--timeout", "0.5s", "--interval", "0.2"])
    assert result.exit_code == ExitCode.TIMEOUT, result.stderr
    said = [line for line in result.stdout.splitlines() if "no submit loop" in line]
    assert said == [
        "loop: no submit loop follows this study, and 8 trials wait to be admitted: nothing will admit them "
        "until `stratctl submit STUDY_FILE` runs (it follows the study to its end)"
    ], result.stdout
