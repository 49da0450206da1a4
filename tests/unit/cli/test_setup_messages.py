"""Setup mistakes as a user meets them on the command line: one line saying what is wrong
and what would be right, exit 2, no traceback and no client's raw text."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stratctl.cli.main import app
from stratctl.errors import ExitCode
from tests.unit.cli.test_cli import unreachable_kubeconfig

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("command", [["status"], ["status", "s", "-o", "json"], ["drain", "s"], ["logs", "s", "t"]])
def test_a_misspelt_context_names_the_contexts_with_a_did_you_mean(tmp_path, command):
    path = unreachable_kubeconfig(tmp_path)  # one context: down
    result = run(*command, "--kubeconfig", path, "--context", "dwon")
    assert result.exit_code == ExitCode.INVALID_INPUT == 2, result.output
    [line] = result.stderr.splitlines()
    assert (
        line
        == f"error: no context 'dwon' in the kubeconfig {path} (--context) (did you mean 'down'?); its contexts: down"
    )
    assert "Invalid kube-config" not in result.stderr and result.stdout == ""


def test_the_top_level_help_names_every_backend_and_each_command_in_one_whole_sentence():
    import inspect

    from stratctl.cli.main import app

    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    intro = " ".join(result.stdout.split("Options")[0].split())
    assert all(name in intro for name in ("Kubernetes", "Volcano", "Slurm", "YARN")), intro
    names = []
    for command in app.registered_commands:
        summary = inspect.cleandoc(command.callback.__doc__).split("\n\n")[0]
        name = command.name or command.callback.__name__
        names.append(name)
        # typer shows the first paragraph as it is written: one line, a whole sentence
        assert "\n" not in summary and summary.endswith(".") and len(summary) <= 90, (name, summary)
        shown = summary.replace("`", "")  # help is Markdown: `drain` is shown as code, without its backticks
        [row] = [line for line in result.stdout.splitlines() if f" {name} " in line and shown[:20] in line]
        assert shown in row  # shown whole, on one line
    assert {"validate", "submit", "status", "wait", "logs", "delete", "drain", "resume"} <= set(names)
