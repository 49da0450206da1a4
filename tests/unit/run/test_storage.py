"""A closed-loop search mirrored into an Optuna storage (`submit --storage`,
backends/kubernetes/search/storage.py): a journal file, a SQLite database and a PostgreSQL server started here
as a local process (Debian's package, installed by testbed/packages.sh), each trial once
across loops, a failing storage never stopping the loop."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile

import optuna
import pytest

from stratctl.core.spec import load_study
from stratctl.errors import UsageError
from stratctl.run.storage import TRIAL_ATTR, StorageMirror, open_storage
from tests.unit.backends.kubernetes.test_closedloop import SEARCH, SearchCluster, kill_after, loss, make, told
from tests.unit.fakes import FakeClock


@pytest.fixture
def search_file(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(SEARCH)
    return str(path)


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of its own (initdb in a scratch directory, trust auth, a free port
    on 127.0.0.1), as the postgres user when run as root; stopped at the end."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: testbed/packages.sh installs it")
        pytest.skip("PostgreSQL is not installed (bash testbed/packages.sh)")
    bindir = os.path.dirname(found[-1])
    data = tempfile.mkdtemp(prefix="stratctl-pg-")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(data, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(
        [*as_user, f"{bindir}/initdb", "-D", f"{data}/db", "-A", "trust", "-U", "stratctl"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *as_user,
            f"{bindir}/pg_ctl",
            "-D",
            f"{data}/db",
            "-l",
            f"{data}/log",
            "-w",
            "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://stratctl@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, f"{bindir}/pg_ctl", "-D", f"{data}/db", "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(data, ignore_errors=True)


def mirrored(url: str) -> list:
    return optuna.load_study(study_name="tpe", storage=open_storage(url)).get_trials()


@pytest.mark.parametrize("scheme", ["journal", "sqlite", "postgresql"])
def test_every_ended_trial_is_mirrored_once_across_a_killed_loop_and_its_rerun(search_file, tmp_path, scheme, request):
    url = {"journal": f"journal:{tmp_path / 'search.log'}", "sqlite": f"sqlite:///{tmp_path / 'search.db'}"}.get(scheme)
    if scheme == "postgresql":
        url = request.getfixturevalue("postgres")
    cluster, clock = SearchCluster(), FakeClock()
    first, _ = make(search_file, cluster, clock)
    first.storage = StorageMirror.open(url, first.study)
    kill_after(first, cluster, clock, 3)
    some = {t.user_attrs[TRIAL_ATTR] for t in mirrored(url)}
    assert some and some <= set(told(cluster))  # only what the record says ended
    second, _ = make(search_file, cluster, clock)
    second.storage = StorageMirror.open(url, second.study)
    assert second.storage.mirrored >= some
    second.run()
    trials = mirrored(url)
    names = [t.user_attrs[TRIAL_ATTR] for t in trials]
    assert sorted(names) == sorted(told(cluster)) and len(names) == len(set(names)) == 9
    for trial in trials:
        assert trial.state is optuna.trial.TrialState.COMPLETE
        assert trial.value == pytest.approx(loss(trial.params))
        assert told(cluster)[trial.user_attrs[TRIAL_ATTR]]["params"] == trial.params


def test_pruned_and_failed_trials_keep_their_state_and_curve(tmp_path, search_file):
    study = load_study(search_file)
    mirror = StorageMirror.open(f"{tmp_path / 'search.log'}", study)
    entries = {
        "tpe-a": {"index": 0, "params": {"x": 1.0}, "state": "complete", "values": [1.0]},
        "tpe-b": {"index": 1, "params": {"x": 4.0}, "state": "pruned", "steps": [[0, 9.0], [1, 8.5]]},
        "tpe-c": {"index": 2, "params": {"x": 0.5}, "state": "failed"},
        "tpe-d": {"index": 3, "params": {"x": 99.0}, "state": "complete", "values": [3.0]},  # outside today's space
    }
    assert mirror.sync(entries) == 4 and mirror.sync(entries) == 0
    by_name = {t.user_attrs[TRIAL_ATTR]: t for t in mirrored(str(tmp_path / "search.log"))}
    State = optuna.trial.TrialState
    assert by_name["tpe-a"].state is State.COMPLETE and by_name["tpe-a"].value == 1.0
    assert by_name["tpe-b"].state is State.PRUNED and by_name["tpe-b"].intermediate_values == {0: 9.0, 1: 8.5}
    assert by_name["tpe-c"].state is State.FAIL
    assert by_name["tpe-d"].state is State.FAIL and by_name["tpe-d"].params == {}
    assert [by_name[n].number for n in ("tpe-a", "tpe-b", "tpe-c", "tpe-d")] == [0, 1, 2, 3]  # in asked order


def test_a_storage_that_fails_is_said_once_and_the_search_goes_on(search_file):
    class Broken(StorageMirror):  # the mirror's own cycle step, over a storage that fails
        def __init__(self):
            self.failing, self.calls = False, 0

        def sync(self, told):
            self.calls += 1
            raise OSError("database is locked")

    cluster, clock = SearchCluster(), FakeClock()
    submitter, _ = make(search_file, cluster, clock)
    submitter.storage = broken = Broken()
    events = []
    submitter.reporter.event = events.append
    progress = submitter.run()
    assert progress.succeeded == 9 and broken.calls > 1
    assert [e for e in events if "--storage" in e] == [
        "--storage: mirroring failed (OSError: database is locked); trying again each cycle"
    ]


def test_what_cannot_be_mirrored_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="not a storage URL"):
        open_storage(str(tmp_path / "search.txt"))
    with pytest.raises(UsageError, match="cannot open it"):
        open_storage("nosuchdb://x")
    random = tmp_path / "random.yaml"
    random.write_text(SEARCH.replace("kind: tpe", "kind: random"))
    with pytest.raises(UsageError, match="closed-loop search"):
        StorageMirror.open(f"journal:{tmp_path / 'x.log'}", load_study(random))


def test_submit_refuses_a_storage_it_cannot_use_before_touching_the_cluster(tmp_path):
    from typer.testing import CliRunner

    from stratctl.cli.main import app

    random = tmp_path / "random.yaml"
    random.write_text(SEARCH.replace("kind: tpe", "kind: random"))
    result = CliRunner().invoke(
        app,
        ["submit", str(random), "--storage", f"journal:{tmp_path / 's.log'}", "--kubeconfig", str(tmp_path / "none")],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--storage mirrors a closed-loop search" in result.stderr
