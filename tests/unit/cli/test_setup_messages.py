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
