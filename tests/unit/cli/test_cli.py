"""The study commands as a user runs them: exit codes, stdout and stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from stratctl import __version__, labels
from stratctl.cli.main import app, main
from stratctl.errors import ExitCode
from tests.unit.studies import MINIMAL, write

EXAMPLES = sorted((Path(__file__).parents[3] / "examples").glob("*.yaml"))
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"stratctl {__version__}"


def test_every_example_is_valid():
    assert EXAMPLES, "examples/ is empty"
    result = run("validate", *EXAMPLES)
    assert result.exit_code == ExitCode.OK, result.stderr
    assert result.stdout.count(": valid: study ") == len(EXAMPLES)
    assert result.stderr == ""


def test_validate_reports_every_problem_of_every_file_and_exits_2(tmp_path):
    good = write(tmp_path, MINIMAL, "good.yaml")
    bad = write(tmp_path, MINIMAL.replace("name: tiny", "name: Tiny").replace("replicas: 2", "replicas: x"), "bad.yaml")
    empty = write(tmp_path, "", "empty.yaml")
    result = run("validate", good, bad, empty)
    assert result.exit_code == ExitCode.INVALID_INPUT == 2
    assert result.stdout == f"{good}: valid: study tiny, 5 trials\n"
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"{bad}:1:7: name: study name 'Tiny' is not a DNS-1123 label")
    assert lines[1].startswith(f"{bad}:12:17: trial.tasks.0.replicas: must be a whole number")
    assert lines[2] == f"{empty}:1:1: the file is empty: expected a study mapping"
    assert lines[3] == "3 problems"
    assert "Traceback" not in result.stderr


def test_validate_missing_file(tmp_path):
    result = run("validate", tmp_path / "nope.yaml")
    assert result.exit_code == 2
    assert "nope.yaml: cannot read the file: No such file or directory" in result.stderr


def test_hostile_file_exits_2_without_executing(tmp_path):
    marker = tmp_path / "pwned"
    text = MINIMAL.replace("image: busybox", "image: !!python/object/apply:os.system ['touch " + str(marker) + "']")
    text = text.replace(
        "--lr={{ params.lr }}", "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}"
    )
    result = run("validate", write(tmp_path, text))
    assert result.exit_code == 2
    assert not marker.exists()
    assert "unsupported YAML tag" in result.stderr and "private attributes are not allowed" in result.stderr


def test_render_writes_multi_document_yaml(tmp_path):
    result = run("render", write(tmp_path, MINIMAL))
    assert result.exit_code == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert len(docs) == 5
    assert {d["kind"] for d in docs} == {"Job"}
    assert all(d["metadata"]["labels"][labels.ATTEMPT] == "0" for d in docs)


def test_render_one_trial_attempt_into_a_directory(tmp_path):
    study = write(tmp_path, MINIMAL)
    out = tmp_path / "out"
    result = run("render", study, "-o", out, "--attempt", "2", "--resume", "--trial", "1")
    assert result.exit_code == 0, result.stderr
    [file] = out.iterdir()
    assert file.name.endswith("-a2.yaml")
    [job] = yaml.safe_load_all(file.read_text())
    env = {e["name"]: e.get("value") for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}
    assert env[labels.ENV_ATTEMPT] == "2" and env[labels.ENV_RESUME] == "1"
    assert job["metadata"]["annotations"][labels.TRIAL_INDEX] == "1"


def test_render_unknown_trial_is_a_usage_error(tmp_path):
    result = run("render", write(tmp_path, MINIMAL), "--trial", "nope")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no trial of study tiny matches nope"


def test_render_bad_option_is_exit_2(tmp_path):
    result = run("render", write(tmp_path, MINIMAL), "--attempt", "-1")
    assert result.exit_code == 2


def test_plan_table_shows_trials_and_cost(tmp_path):
    text = MINIMAL + "cost: {expected_duration: 30m, gpu_hour_price: 2.0, retry_factor: 1.5}\n"
    result = run("plan", write(tmp_path, text))
    assert result.exit_code == 0, result.stderr
    assert "study tiny: 5 trials" in result.stdout
    # 2 GPUs × 0.5 h × 5 trials × 1.5 = 7.5 GPU-hours, at 2.0/GPU-hour = 15.00
    assert "7.50 GPU-hours" in result.stdout and "15.00 USD" in result.stdout


def test_plan_of_a_slurm_study_speaks_slurm(tmp_path):
    text = MINIMAL.replace("  image: busybox\n", "  command: [train]\n").replace(
        "namespace: ns\n", "backend: slurm\nslurm: {partition: research, time_limit: 90m}\n"
    )
    result = run("plan", write(tmp_path, text + "cost: {expected_duration: 30m}\n"))
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "backend slurm; partition research; time limit 1.5h" in out and "workload" not in out
    assert "each trial: one job of 2 tasks (worker×2), 2 GPUs, expected 30m" in out
    assert "5.00 GPU-hours" in out  # 2 GPUs × 0.5 h × 5 trials, as on Kubernetes


ROLES = """\
name: ppo
namespace: ns
space: {{seed: {{type: int, low: 0, high: 1, grid: true}}}}
strategy: {{kind: grid}}
trial:
  image: busybox
  command: [ppo]
  {gang}
  tasks:
    - {{name: ps, replicas: 2}}
    - {{name: worker, replicas: {workers}, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}
    - {{name: evaluator, replicas: 1}}
    - {{name: logs, replicas: 1{logs}}}
"""


@pytest.mark.parametrize(
    "gang, logs",
    [("", ", min_available: 0"), ("min_available: 7", "")],
    ids=["a log collector outside the gang", "trial.min_available"],
)
def test_plan_counts_every_pod_and_says_how_many_must_start_together(tmp_path, gang, logs):
    result = run("plan", write(tmp_path, ROLES.format(gang=gang, logs=logs, workers=4)))
    assert result.exit_code == 0, result.stderr
    assert (
        "each trial: 8 pods, a gang of 7 that must start together (ps×2, worker×4, evaluator×1, logs×1), 4 GPUs"
    ) in " ".join(result.stdout.split())


def test_plan_of_a_gang_of_every_pod_and_of_trials_of_varying_size(tmp_path):
    result = run("plan", write(tmp_path, ROLES.format(gang="", logs="", workers=4)))
    assert "each trial: a gang of 8 pods (ps×2, worker×4, evaluator×1, logs×1)" in " ".join(result.stdout.split())
    varying = ROLES.format(gang="", logs=", min_available: 0", workers='"{{ 2 + 2 * params.seed }}"')
    result = run("plan", write(tmp_path, varying, "varying.yaml"))
    assert result.exit_code == 0, result.stderr
    assert (
        "each trial: 6–8 pods, a gang of 5–7 that must start together (ps×2, worker×by trial, evaluator×1, logs×1)"
    ) in " ".join(result.stdout.split())


def test_plan_json(tmp_path):
    text = MINIMAL.replace("values: [16, 32]", "values: [16]").replace(
        "{type: loguniform, low: 1.0e-4, high: 1.0e-1}", "{type: choice, values: [0.1, 0.2]}"
    )
    result = run("plan", write(tmp_path, text), "-o", "json")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["drawn"] == 5 and plan["duplicates"] == 3 and len(plan["trials"]) == 2
    assert plan["estimate"]["gpu_hours"] == 4.0 and plan["estimate"]["money"] is None
    assert {t["params"]["lr"] for t in plan["trials"]} == {0.1, 0.2}


def test_plan_with_a_duration_per_trial_sums_them(tmp_path):
    # bs 16 trials take 16 minutes, bs 32 trials 32 minutes
    text = MINIMAL + 'cost: {expected_duration: "{{ params.bs }}m"}\n'
    result = run("plan", write(tmp_path, text), "-o", "json")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    seconds = [t["expected_seconds"] for t in plan["trials"]]
    assert seconds == [t["params"]["bs"] * 60 for t in plan["trials"]]
    assert plan["estimate"]["gpu_hours"] == pytest.approx(2 * sum(seconds) / 3600)
    table = run("plan", write(tmp_path, text))
    assert "expected" in table.stdout and "on average" in table.stdout


def test_a_duration_template_that_renders_no_duration_names_its_line(tmp_path):
    text = MINIMAL + 'cost:\n  expected_duration: "{{ params.bs }} parsecs"\n'
    result = run("plan", write(tmp_path, text))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ":15:22: trial 0 (tiny-" in result.stderr and "'32 parsecs' is not a duration (examples" in result.stderr
    assert run("validate", write(tmp_path, text)).exit_code == 2
    unknown = MINIMAL + 'cost: {expected_duration: "{{ params.epochs }}m"}\n'
    result = run("validate", write(tmp_path, unknown))
    assert result.exit_code == 2 and "epochs" in result.stderr


def test_submit_order_is_longest_expected_first_unless_listed(tmp_path):
    from stratctl.backends.launch import prepare

    text = MINIMAL + 'cost: {expected_duration: "{{ params.bs }}m"}\n'
    prepared = prepare(write(tmp_path, text))
    listed = prepare(write(tmp_path, text + "throttle: {order: listed}\n", "listed.yaml"))
    assert [t.params["bs"] for t in prepared.trials] == sorted((t.params["bs"] for t in listed.trials), reverse=True)
    assert [t.index for t in listed.trials] == sorted(t.index for t in listed.trials)
    assert {t.name for t in prepared.trials} == {t.name for t in listed.trials} == set(prepared.manifests)


def test_plan_says_when_duplicates_were_merged(tmp_path):
    text = MINIMAL.replace("{type: loguniform, low: 1.0e-4, high: 1.0e-1}", "{type: choice, values: [0.1]}")
    result = run("plan", write(tmp_path, text))
    assert "5 combinations drawn, 3 duplicates merged: 2 distinct trials" in result.stdout


def test_plan_refuses_a_huge_grid(tmp_path):
    text = MINIMAL.replace("{kind: random, seed: 3, trials: 5}", "{kind: grid}").replace(
        "{type: loguniform, low: 1.0e-4, high: 1.0e-1}", "{type: int, low: 1, high: 1000000000}"
    )
    result = run("plan", write(tmp_path, text))
    assert result.exit_code == 2
    assert ":6:11: the study expands to 2,000,000,000 trials, above the limit of 100,000" in result.stderr


def test_schema_is_json_schema_of_the_study():
    result = run("schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "stratctl study"
    assert {"name", "space", "strategy", "trial", "throttle", "cost"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_traceback_flag_reraises(tmp_path):
    result = run("--traceback", "validate", write(tmp_path, ""))
    assert result.exit_code == 1 and result.exception is not None
    assert type(result.exception).__name__ == "StudyError"


def test_main_maps_errors_to_exit_codes(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["validate", str(write(tmp_path, "name: [\n"))])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "malformed YAML" in err and "Traceback" not in err


def test_no_arguments_shows_help():
    result = run()
    assert "validate" in result.output and "render" in result.output and "plan" in result.output


def test_completion_scripts_are_generated(tmp_path):
    from stratctl.cli.completions import write_all

    paths = {p.name: p.read_text() for p in write_all(tmp_path)}
    assert set(paths) == {"stratctl.bash", "_stratctl", "stratctl.fish"}
    assert "_STRATCTL_COMPLETE=complete_bash" in paths["stratctl.bash"]
    assert "#compdef stratctl" in paths["_stratctl"]
    assert "complete --command stratctl" in paths["stratctl.fish"]


def test_committed_completion_scripts_are_current(tmp_path):
    from stratctl.cli.completions import write_all

    committed = Path(__file__).parents[3] / "completions"
    for path in write_all(tmp_path):
        assert path.read_text() == (committed / path.name).read_text(), f"run `make completions` ({path.name})"


def unreachable_kubeconfig(tmp_path) -> Path:
    """A kubeconfig whose API server refuses connections (nothing listens on the port)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "down",
                "clusters": [
                    {
                        "name": "down",
                        "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True},
                    }
                ],
                "users": [{"name": "alice", "user": {"token": "t"}}],
                "contexts": [{"name": "down", "context": {"cluster": "down", "user": "alice", "namespace": "ns"}}],
            }
        )
    )
    return path


@pytest.mark.parametrize(
    "command", [["status"], ["status", "s", "-o", "json"], ["drain", "s", "--settle", "0"], ["resume", "s"]]
)
def test_one_shot_commands_against_a_server_that_is_down_exit_3_with_one_line_in_bounded_time(
    tmp_path, monkeypatch, command
):
    import time

    from stratctl.backends.kubernetes.api import connect

    monkeypatch.setattr(connect, "ONE_SHOT_PATIENCE", 1.0)  # 25 s in real life; the bound is what is tested
    started = time.monotonic()
    result = run(*command, "--kubeconfig", unreachable_kubeconfig(tmp_path))
    assert result.exit_code == ExitCode.CLUSTER == 3
    assert time.monotonic() - started < 1.0 + 4.0 + 1.0  # the patience, one backoff wait, slack
    [line] = result.stderr.splitlines()
    assert line.startswith("error: no answer from the API server for ") and "giving up" in line
    assert "Connection refused" in line and "HTTPSConnection" not in line and result.stdout == ""


def test_submit_exits_4_when_trials_exist_with_another_spec(tmp_path, monkeypatch):
    from stratctl.run.progress import Progress

    def submitted(*args, **kwargs):  # the loop's outcome: two trials' jobs differ from what the study renders
        return Progress(
            study="tiny",
            total=5,
            succeeded=3,
            errors={"tiny-a": "spec hash x", "tiny-b": "spec hash y"},
            conflicts=["tiny-a", "tiny-b"],
        )

    monkeypatch.setattr("stratctl.backends.launch.submit_study", submitted)
    result = run("submit", write(tmp_path, MINIMAL, "study.yaml"))
    assert result.exit_code == ExitCode.CONFLICT == 4
    assert "2 trial(s) exist in the cluster with a different spec hash" in result.stderr


def test_a_large_study_keeps_the_first_manifests_and_one_trial_of_each_shape(tmp_path, monkeypatch):
    """Every trial is rendered before the cluster is touched, but only the first KEPT stay
    in memory; preflight gets one trial of each pod shape, and a bad trial past KEPT still
    fails the command whole."""
    from stratctl.backends import launch
    from stratctl.backends.kubernetes.objects.podfit import pods_of, shape_key

    monkeypatch.setattr(launch, "KEPT", 7)
    monkeypatch.setattr(launch, "CHUNK", 4)
    text = MINIMAL.replace("trials: 5", "trials: 30").replace(
        "{limits: {nvidia.com/gpu: 1}}", '{limits: {nvidia.com/gpu: "{{ 1 if params.bs == 16 else 2 }}"}}'
    )
    prepared = launch.prepare(write(tmp_path, text))
    assert len(prepared.trials) == 30
    assert list(prepared.manifests) == [t.name for t in prepared.trials[:7]]
    assert sorted(str(pods_of(m)[0].requests["nvidia.com/gpu"]) for m in prepared.shapes) == ["1", "2"]
    assert len({shape_key(pods_of(m)) for m in prepared.shapes}) == len(prepared.shapes)
    # trial 29 alone renders a bad value: nothing prepared, the error names it
    bad = text.replace('"{{ 1 if params.bs == 16 else 2 }}"', '"{{ 1 if index < 29 else 1 // 0 }}"')
    result = run("submit", write(tmp_path, bad, "bad.yaml"), "--dry-run", "client")
    assert result.exit_code == 2 and "trial 29" in result.stderr, result.stderr


def test_a_command_is_built_alone_and_behaves_as_in_the_whole_application():
    from stratctl.cli.main import _one_command

    one = _one_command(["--traceback", "resume", "s"])
    assert [c.callback.__name__ for c in one.registered_commands] == ["resume"]
    assert _one_command(["--help"]) is app and _one_command(["nosuch"]) is app and _one_command([]) is app
    for args in (["submit", "--help"], ["resume", "--help"], ["validate"]):
        alone, whole = (CliRunner().invoke(a, args, env={"COLUMNS": "120"}) for a in (_one_command(args), app))
        assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output)


def test_plan_into_a_pipe_prints_plain_whole_columns():
    result = run("plan", "examples/ppo-tuning.yaml", "--max-rows", "3")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "study ppo-tuning: 64 trials"
    assert lines[1].split() == ["#", "trial", "lr", "clip", "gae_lambda", "minibatches", "env_seed"]
    assert not any(ch in result.stdout for ch in "│┃━─…╇") or "… 61 more trials" in result.stdout
    assert all("…" not in line for line in lines[1:5])  # no value or header cut short
    assert lines[2].split()[1] == "ppo-tuning-addaa8495d" and len(lines[2].split()) == 7
    assert "cost:" in result.stdout
