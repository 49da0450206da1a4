"""`stratctl wait` and `submit --timeout`: how long they block and the exit code they end with,
in virtual time."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stratctl.cli.main import app
from stratctl.errors import ExitCode, StudyChanged
from stratctl.run.finish import finished, wait
from stratctl.run.rows import StudyRow
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make
from tests.unit.studies import MINIMAL, write

runner = CliRunner()


def row(**states) -> StudyRow:
    counts = {"waiting": 0, "pending": 0, "running": 0, "succeeded": 0, "failed": 0, **states}
    return StudyRow(
        study="s",
        critical=False,
        drained=False,
        trials=4,
        states=counts,
        in_flight=0,
        target=None,
        decision="",
        attempts=0,
        preemptions=0,
        gpu_hours=0.0,
        gpu_hours_lost=0.0,
    )


def reader(clock, timeline):
    """The study's row as read at each moment: `timeline` is [(from time, row), ...]; the
    times of the reads are kept."""
    reads = []

    def read():
        reads.append(clock())
        return [r for at, r in timeline if at <= clock()][-1]

    return read, reads


def test_wait_returns_0_when_every_trial_succeeded_saying_only_changes():
    clock, lines = FakeClock(0.0), []
    read, reads = reader(
        clock,
        [
            (0, row(pending=2, waiting=2)),
            (5, row(running=2, waiting=2)),
            (9, row(running=2, succeeded=2)),
            (15, row(succeeded=4)),
        ],
    )
    assert wait(read, lines.append, interval=2.0, clock=clock, sleep=clock.sleep) == ExitCode.OK
    assert lines == [
        "s: 2 waiting, 2 pending",
        "s: 2 waiting, 2 running",
        "s: 2 running, 2 succeeded",
        "s: finished, 4 succeeded",
    ]
    assert clock.now == 16.0 and reads == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0]


def test_wait_returns_1_when_some_trials_failed():
    clock, lines = FakeClock(0.0), []
    read, _ = reader(clock, [(0, row(running=1, succeeded=3)), (3, row(failed=1, succeeded=3))])
    assert wait(read, lines.append, interval=1.0, clock=clock, sleep=clock.sleep) == ExitCode.FAILURE == 1
    assert lines[-1] == "s: finished, 3 succeeded, 1 failed"


def test_wait_times_out_with_124_at_the_timeout_not_a_poll_later():
    clock, lines = FakeClock(0.0), []
    read, _ = reader(clock, [(0, row(running=4))])
    assert wait(read, lines.append, timeout=5.0, interval=2.0, clock=clock, sleep=clock.sleep) == ExitCode.TIMEOUT
    assert clock.sleeps == [2.0, 2.0, 1.0] and ExitCode.TIMEOUT == 124
    assert lines == ["s: 4 running", "s: timed out after 5s, not finished (4 running); trials keep running"]


def test_a_suspended_trial_is_not_finished():
    assert not finished(row(succeeded=3, suspended=1)) and finished(row(succeeded=3, failed=1))


def test_stratctl_wait_on_a_finished_study(study_file, monkeypatch):
    cluster = FakeCluster()
    make(study_file(), cluster, FakeClock())[0].run()
    cluster.close = lambda: None
    monkeypatch.setattr("stratctl.backends.kubernetes.api.connect.one_shot", lambda *a, **k: cluster)
    result = runner.invoke(app, ["wait", "loop", "--timeout", "1m"])
    assert result.exit_code == 0 and result.stdout == "loop: finished, 10 succeeded\n"
    result = runner.invoke(app, ["wait", "loop", "--timeout", "soon"])
    assert result.exit_code == 2 and "--timeout 'soon'" in result.stderr


def test_submit_timeout_stops_the_loop_with_trials_running_and_a_rerun_completes_without_duplicates(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    path = study_file()
    submitter, trials = make(path, cluster, clock, timeout=5.0)
    submitter.sleep = clock.sleep  # the cluster stands still: nothing finishes
    started = clock.now
    progress = submitter.run()
    assert progress.timed_out and clock.now - started == 5.0
    assert cluster.jobs() and all(cluster.phase(j) == "Pending" for j in cluster.jobs())
    assert cluster.record("loop")["data"]["spec-hash"]  # the record stays for the rerun
    progress = make(path, cluster, FakeClock())[0].run()
    assert progress.succeeded == 10 and not progress.timed_out
    assert sorted(cluster.creates) == sorted(t.name for t in trials)  # each trial created once


def test_submit_exit_codes_for_a_changed_study_and_a_timeout(tmp_path, monkeypatch):
    from stratctl.run.progress import Progress

    def changed(*args, **kwargs):
        raise StudyChanged("study tiny changed since it was submitted (trial.image): 5 of 5 trial(s) ...")

    monkeypatch.setattr("stratctl.backends.launch.submit_study", changed)
    result = runner.invoke(app, ["submit", str(write(tmp_path, MINIMAL))])
    assert result.exit_code == 4 and "error: study tiny changed since it was submitted (trial.image)" in result.stderr
    seen = {}

    def timed_out(path, connection, options, **kwargs):
        seen.update(timeout=options.timeout, rerun=kwargs["rerun_changed"])
        return Progress(study="tiny", total=5, running=2, timed_out=True)

    monkeypatch.setattr("stratctl.backends.launch.submit_study", timed_out)
    result = runner.invoke(app, ["submit", str(write(tmp_path, MINIMAL)), "--timeout", "90s", "--rerun-changed"])
    assert result.exit_code == 124 and "timed out" in result.stderr
    assert seen == {"timeout": 90.0, "rerun": True}


@pytest.mark.parametrize("text", ["0s", "-1", "abc"])
def test_submit_refuses_a_timeout_that_is_no_duration(tmp_path, text):
    result = runner.invoke(app, ["submit", str(write(tmp_path, MINIMAL)), "--timeout", text])
    assert result.exit_code == 2 and "--timeout" in result.stderr
