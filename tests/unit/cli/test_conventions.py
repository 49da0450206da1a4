"""The command-line conventions every command follows: readable metavars in help, usage
errors on one line with exit 2, `--traceback` anywhere, `-o` on the commands that print data."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from stratctl.cli import conventions
from stratctl.cli.main import COMMANDS, app, main
from stratctl.errors import ExitCode
from tests.unit.backends.kubernetes.test_drain import submitted
from tests.unit.fake_cluster import FakeCluster

COMMAND_NAMES = sorted(set(COMMANDS) | {"resume"})
PYTHON_TYPE = re.compile(r"<(?:list|tuple|dict|str|int|float|bool|path|Path|[a-z]+ range)\b|<[^>\s]*\[")


def invoke(*args: str, **kwargs):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, **kwargs)


@pytest.mark.parametrize("command", COMMAND_NAMES)
def test_help_names_values_not_python_types(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0, result.output
    assert not PYTHON_TYPE.search(result.stdout), result.stdout
    assert "[[" not in result.stdout  # no doubled brackets around an optional argument in the usage line


def test_help_metavars_say_what_a_value_is():
    assert re.search(r"--kubeconfig\s+FILE", invoke("status", "--help").stdout)
    assert re.search(r"--max-rows\s+N\b", invoke("plan", "--help").stdout)
    assert re.search(r"--outage-timeout\s+SECONDS", invoke("submit", "--help").stdout)
    assert re.search(r"--trial\s+-t\s+TEXT", invoke("render", "--help").stdout)
    assert re.search(r"--output\s+-o\s+table\|json\|yaml", invoke("drain", "--help").stdout)
    assert re.search(r"\*\s+FILE\s+Study files", invoke("validate", "--help").stdout)


def test_the_top_level_help_still_lists_the_commands():
    out = invoke("--help").stdout
    for command in ("submit", "status", "drain", "resume", "delete", "logs", "wait"):
        assert re.search(rf"^\W*{command}\s", out, re.M), out
    assert not PYTHON_TYPE.search(out), out  # typer's own --install-completion included


@pytest.mark.parametrize(
    "args, hint",
    [
        (["status", "--nope"], "see stratctl status --help"),
        (["nope"], "see stratctl --help"),
        (["plan"], "see stratctl plan --help"),
        (["status", "-o", "xml"], "see stratctl status --help"),
        (["delete", "a", "b"], "see stratctl delete --help"),
    ],
)
def test_a_usage_error_is_one_line_and_a_hint_with_exit_2(args, hint):
    result = invoke(*args)
    assert result.exit_code == ExitCode.INVALID_INPUT == 2
    error, see = result.stderr.strip().splitlines()
    assert error.startswith("error: ") and see == hint and result.stdout == ""


def test_a_usage_error_through_the_entry_point_too(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["drain", "--settle", "soon"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    error, see = err.splitlines()
    assert error.startswith("error: Invalid value for '--settle': ") and see == "see stratctl drain --help"


def test_traceback_after_the_command_reraises(tmp_path):
    missing = str(tmp_path / "missing.yaml")
    plain = invoke("validate", missing)
    assert plain.exit_code == 2 and "Traceback" not in plain.output
    after = invoke("validate", missing, "--traceback")
    assert after.exit_code == 1 and after.exception is not None  # re-raised, not reported
    assert type(after.exception).__name__ == "StudyError"


def test_hoist_moves_the_flag_before_the_command_but_not_past_a_double_dash():
    assert conventions.hoist(["validate", "x", "--traceback"]) == ["--traceback", "validate", "x"]
    assert conventions.hoist(["render", "--", "--traceback"]) == ["render", "--", "--traceback"]
    assert conventions.hoist(["status"]) == ["status"]


# -- -o on drain, resume and plan ------------------------------------------------------


@pytest.fixture
def fake(tmp_path, monkeypatch):
    from stratctl.backends.kubernetes.api import connect

    cluster = FakeCluster()
    cluster.close = lambda: None
    submitted(tmp_path, cluster, "sweep")
    cluster.advance()
    monkeypatch.setattr(connect, "one_shot", lambda *a, **k: cluster)
    return cluster


def test_drain_and_resume_print_yaml_and_json_and_keep_the_old_json_flag(fake):
    drained = invoke("drain", "sweep", "--settle", "0", "-o", "yaml")
    assert drained.exit_code == 0, drained.output
    [outcome] = yaml.safe_load(drained.stdout)
    assert outcome["study"] == "sweep" and len(outcome["suspended"]) == 3
    resumed = invoke("resume", "sweep", "--json")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["study"] == "sweep"
    assert "--json" not in invoke("resume", "--help").stdout  # kept working, no longer advertised
    assert json.loads(invoke("drain", "sweep", "--settle", "0", "-o", "json").stdout)[0]["study"] == "sweep"


def test_plan_prints_yaml(tmp_path):
    from tests.unit.loop import STUDY

    path = tmp_path / "s.yaml"
    path.write_text(STUDY)
    result = invoke("plan", str(path), "-o", "yaml")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == json.loads(invoke("plan", str(path), "-o", "json").stdout)
