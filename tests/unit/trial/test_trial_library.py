"""The trial-side library (stratctl.trial), as a training script meets it: imported with the
standard library alone, its place in the gang from the environment, checkpoints that a
crash never tears, a SIGTERM that ends in a saved checkpoint, and a result stratctl reads."""

from __future__ import annotations

import configparser
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from stratctl import rendezvous, trial
from stratctl.attempt import RESULT, StudyFiles
from stratctl.backends.kubernetes.verbs.status import results_in
from stratctl.core.space import expand
from stratctl.trial import checkpoint, metrics
from stratctl.trial.checkpoint import Checkpoints
from tests.unit.rendering import Renderer
from tests.unit.studies import MINIMAL, load

ROOT = Path(__file__).parents[3]


def _child(code: str, env: dict[str, str], **kwargs) -> subprocess.Popen:
    """A Python process running `code`, as a training script would, with stratctl importable."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        **kwargs,
    )


# ---------------------------------------------------------------- standard library only


def test_importing_the_library_loads_the_standard_library_alone():
    # what the import adds to what the interpreter loaded at start (site, the editable install's finder)
    code = "import sys; before = set(sys.modules); import stratctl.trial; print(' '.join(set(sys.modules) - before))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = set(done.stdout.split())
    assert "stratctl.trial" in loaded
    outside = {m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "stratctl"}
    assert outside == set()
    assert not {"typer", "rich", "yaml", "jinja2", "pydantic", "kubernetes", "urllib3", "orjson"} & loaded
    assert {m for m in loaded if m.startswith("stratctl.")} <= {
        "stratctl.trial",
        "stratctl.trial.checkpoint",
        "stratctl.trial.contract",
        "stratctl.trial.metrics",
        "stratctl.trial.preempt",
        "stratctl.labels",
        "stratctl.rendezvous",
        "stratctl.attempt",
        "stratctl.trialstate",
        "stratctl.version",  # the package's __init__ names its version from it
    }


def test_the_import_contract_forbids_every_declared_dependency():
    # a dependency added to pyproject.toml and not to the contract would go unchecked by lint-imports
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    forbidden = set(config["importlinter:contract:trial"]["forbidden_modules"].split())
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    modules_of: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(_normal(dist), set()).add(module)
    for requirement in declared:
        dist = _normal(requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip())
        modules = {m for m in modules_of.get(dist, ()) if not m.startswith("_")}
        assert modules, f"{requirement}: not installed in the test environment"
        assert modules & forbidden, f"{requirement} ({', '.join(sorted(modules))}) is not forbidden to stratctl.trial"


def _normal(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


# ---------------------------------------------------------------- the contract


def test_the_contract_of_a_ps_trial_from_the_environment_its_backend_gives():
    roles = [("ps", ["t-ps-0.t", "t-ps-1.t"]), ("worker", ["t-worker-0.t", "t-worker-1.t", "t-worker-2.t"])]
    env = rendezvous.environment(roles, rank=3, port=rendezvous.derived_port(1234))
    c = trial.contract(env)
    assert (c.num_nodes, c.rank, c.task, c.task_index) == (5, 3, "worker", 1)
    assert c.addrs == ("t-ps-0.t", "t-ps-1.t", "t-worker-0.t", "t-worker-1.t", "t-worker-2.t")
    assert (c.master_addr, c.master_port) == ("t-ps-0.t", 21234)
    assert c.roles == (
        trial.Role("ps", ("t-ps-0.t", "t-ps-1.t")),
        trial.Role("worker", ("t-worker-0.t", "t-worker-1.t", "t-worker-2.t")),
    )
    assert c.hosts("worker") == ("t-worker-0.t", "t-worker-1.t", "t-worker-2.t") and c.hosts("evaluator") == ()
    assert not c.is_master and trial.contract({**env, **rendezvous.environment(roles, 0, 1)}).is_master


def test_a_script_run_by_hand_is_one_node_of_rank_0_on_this_machine():
    c = trial.contract({})
    assert (c.num_nodes, c.rank, c.addrs, c.master_addr, c.master_port) == (1, 0, ("127.0.0.1",), "127.0.0.1", 29500)
    assert (c.task, c.task_index, c.roles) == ("worker", 0, (trial.Role("worker", ("127.0.0.1",)),))
    assert c.is_master
    assert trial.contract({"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "23456"}).addrs == ("10.0.0.5",)
    assert (trial.backend({}), trial.params({}), trial.resuming({})) == ("local", {}, False)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"STRATCTL_NUM_NODES": "two"}, "STRATCTL_NUM_NODES='two' is not a whole number"),
        ({"STRATCTL_NUM_NODES": "2"}, "STRATCTL_NODE_ADDRS is not set"),
        ({"STRATCTL_NUM_NODES": "2", "STRATCTL_NODE_ADDRS": "a"}, "lists 1 addresses for STRATCTL_NUM_NODES=2"),
        ({"STRATCTL_NUM_NODES": "2", "STRATCTL_NODE_ADDRS": "a,b", "STRATCTL_NODE_RANK": "2"}, "outside 0..1"),
    ],
)
def test_a_contract_that_contradicts_itself_is_an_error_naming_the_variable(env, message):
    with pytest.raises(ValueError, match=message):
        trial.contract(env)


def test_identity_parameters_resume_and_backend():
    env = {"STRATCTL_TRIAL": "s-1a2b", "STRATCTL_PARAMS": '{"lr": 0.01, "bs": 32}', "STRATCTL_RESUME": "1"}
    assert trial.params(env) == {"lr": 0.01, "bs": 32}
    assert trial.resuming(env) and trial.backend(env) == "kubernetes"
    assert trial.backend({**env, "STRATCTL_OUTPUT_DIR": "out/s/t", "SLURM_JOB_ID": "7"}) == "slurm"
    assert trial.backend({**env, "STRATCTL_OUTPUT_DIR": "/shared/out/s/t"}) == "yarn"


# ---------------------------------------------------------------- checkpoints


def test_checkpoint_directory_from_the_study_or_beside_the_trials_output(tmp_path):
    assert trial.checkpoint_dir({"STRATCTL_CHECKPOINT_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    assert trial.checkpoint_dir({"STRATCTL_CHECKPOINT_DIR": f"file://{tmp_path}/c"}) == tmp_path / "c"
    assert trial.checkpoint_dir({"STRATCTL_OUTPUT_DIR": str(tmp_path)}) == tmp_path / "checkpoints"
    # relative to where the trial started (Slurm's output directory is relative), whatever it chdir'd to since
    assert trial.checkpoint_dir({"STRATCTL_CHECKPOINT_DIR": "ckpt"}) == Path(checkpoint.START, "ckpt")
    with pytest.raises(ValueError, match="'s3://b/s/t' is not a local directory"):
        trial.checkpoint_dir({"STRATCTL_CHECKPOINT_DIR": "s3://b/s/t"})


def test_save_and_latest_round_trip_objects_and_bytes_and_keep_the_last_k(tmp_path):
    ckpt = Checkpoints(tmp_path, keep=2)
    assert ckpt.latest() is None
    for step in range(1, 5):
        ckpt.save({"step": step, "w": [step] * 3}, step)
    saved = ckpt.latest()
    assert (saved.step, saved.load()) == (4, {"step": 4, "w": [4, 4, 4]})
    ckpt.save(b"\x00raw", 5)
    assert (ckpt.latest().step, ckpt.latest().load()) == (5, b"\x00raw")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000000004.pkl", "step-000000005.bin"]
    # as readable as any file the process writes (stratctl may read a result as another user)
    mask = os.umask(0o022)
    os.umask(mask)
    assert {p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == {0o666 & ~mask}


def test_the_module_functions_use_the_trials_checkpoint_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATCTL_CHECKPOINT_DIR", str(tmp_path / "trial-1"))
    trial.save({"epoch": 2}, 200)
    assert (trial.latest().step, trial.latest().load()) == (200, {"epoch": 2})
    assert (tmp_path / "trial-1" / "latest").read_text() == "step-000000200.pkl\n"


def test_a_crash_between_write_and_rename_leaves_the_previous_latest_whole(tmp_path, monkeypatch):
    ckpt = Checkpoints(tmp_path)
    ckpt.save({"step": 1}, 1)
    replace = os.replace

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="No space left"):
        ckpt.save({"step": 2}, 2)
    monkeypatch.setattr(os, "replace", replace)
    assert (ckpt.latest().step, ckpt.latest().load()) == (1, {"step": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000000001.pkl"]  # no debris


def test_a_crash_before_the_pointer_moves_keeps_the_previous_latest(tmp_path, monkeypatch):
    ckpt = Checkpoints(tmp_path)
    ckpt.save({"step": 1}, 1)
    replace, calls = os.replace, []

    def crash_on_the_pointer(src, dst):
        calls.append(dst)
        if Path(dst).name == "latest":
            raise KeyboardInterrupt  # what a Ctrl-C or a SystemExit from a signal handler is
        replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_the_pointer)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save({"step": 2}, 2)
    monkeypatch.setattr(os, "replace", replace)
    assert [Path(c).name for c in calls] == ["step-000000002.pkl", "latest"]
    assert (ckpt.latest().step, ckpt.latest().load()) == (1, {"step": 1})  # the pointer, not the newest file
    ckpt.save({"step": 3}, 3)
    assert ckpt.latest().load() == {"step": 3}


def test_a_process_killed_mid_save_leaves_the_previous_latest_readable(tmp_path):
    # the child blocks once the new checkpoint's bytes are written, before its rename: SIGKILL there
    child = _child(
        """
        import os, sys, time
        from stratctl.trial import Checkpoints
        ckpt = Checkpoints(os.environ["DIR"])
        ckpt.save({"step": 1, "weights": list(range(1000))}, 1)
        def stuck(fd):
            print("writing", flush=True)
            time.sleep(60)
        os.fsync = stuck
        ckpt.save({"step": 2, "weights": list(range(1000))}, 2)
    """,
        {"DIR": str(tmp_path)},
    )
    try:
        assert child.stdout.readline() == "writing\n"
        child.kill()
    finally:
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    ckpt = Checkpoints(tmp_path)
    assert (ckpt.latest().step, ckpt.latest().load()["step"]) == (1, 1)
    debris = [p for p in tmp_path.iterdir() if p.name.startswith(".step-000000002.pkl.tmp-")]
    assert len(debris) == 1
    # the next save removes what the crash left, once it is surely no live save's
    os.utime(debris[0], (time.time() - 2 * checkpoint.STALE_SECONDS,) * 2)
    ckpt.save({"step": 2}, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000000001.pkl", "step-000000002.pkl"]


# ---------------------------------------------------------------- preemption


_PREEMPTED = """
    import os, signal, sys, time
    from stratctl import trial

    def previous(signum, frame):
        print("previous handler", flush=True)
    signal.signal(signal.SIGTERM, previous)
    calls = []

    def save():
        calls.append(1)
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM while saving: not a second save
        trial.save({"step": state["step"], "calls": len(calls)}, state["step"])
    trial.on_preempt(save, exit=EXIT)
    state = {"step": 0}
    for step in range(1, 6):
        state["step"] = step
    print("ready", flush=True)
    deadline = time.time() + 30
    while not trial.preempted() and time.time() < deadline:
        time.sleep(0.01)
    print("preempted, stopping", flush=True)
"""


def test_sigterm_saves_the_current_step_then_exits_143(tmp_path):
    child = _child(_PREEMPTED.replace("EXIT", "True"), {"STRATCTL_CHECKPOINT_DIR": str(tmp_path)})
    assert child.stdout.readline() == "ready\n"
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 143, err
    assert out == "previous handler\n"  # chained, and the loop never went on
    saved = Checkpoints(tmp_path).latest()
    assert (saved.step, saved.load()) == (5, {"step": 5, "calls": 1})


def test_sigterm_without_exit_lets_the_program_stop_on_its_own(tmp_path):
    child = _child(_PREEMPTED.replace("EXIT", "False"), {"STRATCTL_CHECKPOINT_DIR": str(tmp_path)})
    assert child.stdout.readline() == "ready\n"
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 0, err
    assert out == "previous handler\npreempted, stopping\n"
    assert Checkpoints(tmp_path).latest().load() == {"step": 5, "calls": 1}


# ---------------------------------------------------------------- results and reports


@pytest.mark.parametrize("backend_env", [{"SLURM_JOB_ID": "41"}, {"CONTAINER_ID": "container_1_0001_01_000002"}])
def test_result_on_slurm_and_yarn_is_the_result_file_the_scheduler_reads(tmp_path, monkeypatch, backend_env):
    study_output = tmp_path / "stratctl-out" / "study"
    monkeypatch.setenv("STRATCTL_TRIAL", "study-1a2b3c4d5e")
    monkeypatch.setenv("STRATCTL_OUTPUT_DIR", str(study_output / "study-1a2b3c4d5e"))
    for name, value in backend_env.items():
        monkeypatch.setenv(name, value)
    written = trial.result(loss=0.231, accuracy=_Scalar(0.91), checkpoint="/ckpt/step-9000")
    assert written == study_output / "study-1a2b3c4d5e" / RESULT
    files = StudyFiles()
    files.output = study_output
    assert files.result("study-1a2b3c4d5e") == {"loss": 0.231, "accuracy": 0.91, "checkpoint": "/ckpt/step-9000"}


def test_result_on_kubernetes_is_the_termination_message_status_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATCTL_TRIAL", "study-1a2b3c4d5e")
    monkeypatch.delenv("STRATCTL_OUTPUT_DIR", raising=False)
    monkeypatch.setattr(metrics, "TERMINATION_LOG", str(tmp_path / "termination-log"))
    trial.result(loss=0.231, accuracy=0.91)
    message = (tmp_path / "termination-log").read_text()
    pod = {
        "metadata": {"labels": {"volcano.sh/job-name": "study-1a2b3c4d5e"}},
        "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": message}}}]},
    }
    jobs = {"study-1a2b3c4d5e": {"metadata": {"name": "study-1a2b3c4d5e"}}}
    assert results_in([pod], jobs) == {"study-1a2b3c4d5e": {"loss": 0.231, "accuracy": 0.91}}
    with pytest.raises(ValueError, match="termination message keeps 4096"):
        trial.result(log="x" * 5000)


def test_result_by_hand_is_said_and_written_nowhere(monkeypatch, capsys):
    for name in ("STRATCTL_TRIAL", "STRATCTL_OUTPUT_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert trial.result(loss=0.5) is None
    assert capsys.readouterr().err == 'stratctl.trial: result (not in a trial, written nowhere): {"loss":0.5}\n'


class _FakeAM:
    """The gang AM's report server (yarn-am/Reports.java) as the library sees it: a local
    HTTP server recording each POST (path with query, body) and answering `status`."""

    def __init__(self, status: int = 204):
        import http.server
        import threading

        self.posts: list[tuple[str, str]] = []
        am = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                am.posts.append((self.path, body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/s3cret/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def yarn_trial(tmp_path, monkeypatch):
    """A YARN container's environment (an output directory, no SLURM_JOB_ID), the AM's
    report server faked; the library's notices said afresh."""
    monkeypatch.setattr(metrics, "_said", set())
    monkeypatch.setenv("STRATCTL_TRIAL", "s-1")
    monkeypatch.setenv("STRATCTL_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("STRATCTL_ATTEMPT", "2")
    monkeypatch.setenv("STRATCTL_NODE_RANK", "0")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    am = _FakeAM()
    monkeypatch.setenv("STRATCTL_REPORT_URL", am.url)
    yield am
    am.close()


def test_report_on_yarn_is_posted_to_the_gang_am_and_kept_in_report_jsonl(tmp_path, yarn_trial, capsys):
    assert trial.report(1, loss=0.5) is True
    assert trial.report(2, loss=0.25, acc=float("inf")) is True
    line1 = '{"attempt":2,"rank":0,"step":1,"values":{"loss":0.5}}'
    line2 = '{"attempt":2,"rank":0,"step":2,"values":{"loss":0.25}}'
    assert yarn_trial.posts == [
        ("/s3cret/report?step=1&rank=0", line1),
        ("/s3cret/report?step=2&rank=0", line2),
    ]
    assert (tmp_path / "report.jsonl").read_text() == f"{line1}\n{line2}\n"  # for the user, as on Slurm
    assert [metrics.parse_report_record(line) for line in (line1, line2)] == [
        (1, 0, {"loss": 0.5}),
        (2, 0, {"loss": 0.25}),
    ]
    assert "pruner does not run" not in capsys.readouterr().err


def test_result_on_yarn_is_posted_to_the_gang_am_and_written_to_result_json(tmp_path, yarn_trial):
    written = trial.result(loss=0.125, checkpoint="/ckpt/9")
    assert written == tmp_path / RESULT and json.loads(written.read_text()) == {"loss": 0.125, "checkpoint": "/ckpt/9"}
    assert yarn_trial.posts == [("/s3cret/result?rank=0", '{"loss":0.125,"checkpoint":"/ckpt/9"}')]


def test_on_yarn_an_am_that_does_not_take_them_is_said_once_and_never_stops_the_training(
    tmp_path, yarn_trial, monkeypatch, capsys
):
    yarn_trial.close()  # nothing listens there any more: connection refused
    slept: list[float] = []
    monkeypatch.setattr(metrics.time, "sleep", slept.append)
    assert trial.report(1, loss=0.5) is False
    assert trial.report(2, loss=0.4) is False
    assert trial.result(loss=0.4) == tmp_path / RESULT  # written all the same
    assert slept == [1.0, 1.0]  # the result tried 3 times, a second apart
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("Connection refused" in line for line in err), err
    assert err[0].startswith("stratctl.trial: the gang AM did not take the report (")
    assert err[1].startswith("stratctl.trial: the gang AM did not take the result (")
    assert len((tmp_path / "report.jsonl").read_text().splitlines()) == 2

    refusing = _FakeAM(status=413)  # too large for the AM: its answer is said
    monkeypatch.setenv("STRATCTL_REPORT_URL", refusing.url)
    monkeypatch.setattr(metrics, "_said", set())
    try:
        assert trial.report(3, loss=0.3) is False
    finally:
        refusing.close()
    assert "did not take the report (HTTP 413)" in capsys.readouterr().err


def test_on_yarn_without_a_report_url_the_values_stay_in_the_output_directory(
    tmp_path, yarn_trial, monkeypatch, capsys
):
    monkeypatch.delenv("STRATCTL_REPORT_URL")
    assert trial.report(1, loss=0.5) is False
    assert trial.report(2, loss=0.5) is False
    assert capsys.readouterr().err == (
        "stratctl.trial: STRATCTL_REPORT_URL is not set (a gang AM older than this library?): "
        "report kept in the trial's output directory only\n"
    )
    assert yarn_trial.posts == []


def test_report_on_slurm_appends_the_values_the_loop_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(metrics, "_said", set())
    monkeypatch.setenv("STRATCTL_TRIAL", "s-1")
    monkeypatch.setenv("STRATCTL_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("STRATCTL_ATTEMPT", "1")
    monkeypatch.setenv("STRATCTL_NODE_RANK", "0")
    assert trial.report(1, loss=0.5) is True
    assert trial.report(2, loss=0.4, acc=float("nan")) is True
    err = capsys.readouterr().err
    assert "pruner does not run" not in err
    assert "step 2: values that are not finite numbers are left out (acc)" in err
    lines = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    assert lines == [
        {"attempt": 1, "rank": 0, "step": 1, "values": {"loss": 0.5}},
        {"attempt": 1, "rank": 0, "step": 2, "values": {"loss": 0.4}},
    ]
    with pytest.raises(ValueError, match="step must be a whole number"):
        trial.report(-1, loss=0.1)
    with pytest.raises(ValueError, match="'low' is not a number"):
        trial.report(3, loss="low")


def test_report_on_kubernetes_is_a_line_of_output_the_loop_reads(monkeypatch, capsys):
    """In a pod, a report is one line on stdout, which the loop's reader parses back: no
    Kubernetes client, no token, no request from the pod (the library loads no client)."""
    import sys as _sys

    monkeypatch.setenv("STRATCTL_TRIAL", "s-1")
    monkeypatch.delenv("STRATCTL_OUTPUT_DIR", raising=False)
    loaded = set(_sys.modules)
    assert trial.report(3, flush=True, loss=_Scalar(0.41), acc=1) is True
    assert trial.report(4, loss=float("nan"), acc=0.5) is True  # the finite values alone
    assert not {m for m in set(_sys.modules) - loaded if m.startswith(("kubernetes", "urllib3", "stratctl.backends"))}
    out = capsys.readouterr().out
    assert out == (
        'stratctl.report {"step":3,"values":{"loss":0.41,"acc":1.0}}\nstratctl.report {"step":4,"values":{"acc":0.5}}\n'
    )
    assert [metrics.parse_report_line(line) for line in out.splitlines()] == [
        (3, {"loss": 0.41, "acc": 1.0}),
        (4, {"acc": 0.5}),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "loss 0.41",
        "stratctl.report",
        "stratctl.report {not json",
        'stratctl.report {"step":-1,"values":{"loss":1}}',
        'stratctl.report {"step":true,"values":{"loss":1}}',
        'stratctl.report {"step":2,"values":{"loss":"low"}}',
        'stratctl.report {"step":2,"values":[1]}',
        'stratctl.report ["step",2]',
        ' stratctl.report {"step":2,"values":{"loss":1}}',
    ],
)
def test_a_line_that_only_looks_like_a_report_is_the_programs_own_output(line):
    assert metrics.parse_report_line(line) is None


class _Scalar:
    """A numpy or torch scalar as json sees it: not a float, with `.item()`."""

    def __init__(self, value: float):
        self.value = value

    def item(self) -> float:
        return self.value


# ---------------------------------------------------------------- the grace period


def test_the_grace_period_is_the_pods_termination_grace_period(tmp_path):
    study = load(tmp_path, MINIMAL + "checkpoint: {location: /ckpt, grace_seconds: 120}\n")
    [job] = Renderer(study).render(expand(study)[0])
    assert [t["template"]["spec"]["terminationGracePeriodSeconds"] for t in job["spec"]["tasks"]] == [120]
    batch = load(tmp_path, MINIMAL + "workload: batch\ncheckpoint: {grace_seconds: 0}\n")
    _, job, _ = Renderer(batch).render(expand(batch)[0])
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 0
    [job] = Renderer(load(tmp_path, MINIMAL)).render(expand(load(tmp_path, MINIMAL))[0])
    assert "terminationGracePeriodSeconds" not in job["spec"]["tasks"][0]["template"]["spec"]  # Kubernetes' 30 s
