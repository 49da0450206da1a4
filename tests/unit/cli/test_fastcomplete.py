"""The fast completion path (`cli.fastcomplete`) answers exactly as Typer does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stratctl.cli.fastcomplete import COMMAND_NAMES, answer
from tests.unit.backends.kubernetes.test_completion import kubeconfig, server  # noqa: F401 (a fixture)

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts:
- {name: admin, context: {cluster: c, user: u}}
- {name: restricted, context: {cluster: c, user: u}}
current-context: admin
"""

CASES = [
    {"_STRATCTL_COMPLETE": "complete_bash", "COMP_WORDS": "stratctl ", "COMP_CWORD": "1"},
    {"_STRATCTL_COMPLETE": "complete_bash", "COMP_WORDS": "stratctl s", "COMP_CWORD": "1"},
    {"_STRATCTL_COMPLETE": "complete_bash", "COMP_WORDS": "stratctl status --context ", "COMP_CWORD": "3"},
    {"_STRATCTL_COMPLETE": "complete_bash", "COMP_WORDS": "stratctl logs --context r", "COMP_CWORD": "3"},
    {"_STRATCTL_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "stratctl status --context "},
    {"_STRATCTL_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "stratctl status --context zz"},
    {
        "_STRATCTL_COMPLETE": "complete_fish",
        "_TYPER_COMPLETE_FISH_ACTION": "get-args",
        "_TYPER_COMPLETE_ARGS": "stratctl drain --context a",
    },
]


def _run(code: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    return done.stdout


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.get("COMP_WORDS") or c["_TYPER_COMPLETE_ARGS"])
def test_fast_answer_matches_typer(case, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    env = {**os.environ, **case, "KUBECONFIG": str(config)}
    fast = _run(
        "import sys; from stratctl.cli.entry import main; main(); sys.exit(3)", env
    )  # exits 0 itself only when it answered
    typer = _run("from stratctl.cli.main import main; main()", env)
    assert fast == typer
    assert fast.strip() or case["_STRATCTL_COMPLETE"] == "complete_zsh"


def test_fast_path_does_not_import_typer(tmp_path):
    env = {**os.environ, **CASES[1]}
    code = (
        "import sys\nfrom stratctl.cli.fastcomplete import answer\nout = answer('complete_bash')\n"
        "print(out is not None, 'typer' in sys.modules, 'click' in sys.modules)"
    )
    assert _run(code, env).split() == ["True", "False", "False"]


def test_command_names_are_the_registered_commands():
    from stratctl.cli.main import app

    assert COMMAND_NAMES == [c.name or c.callback.__name__ for c in app.registered_commands]


def test_other_questions_go_to_typer(monkeypatch):
    monkeypatch.setenv("COMP_WORDS", "stratctl status --")
    monkeypatch.setenv("COMP_CWORD", "2")
    assert answer("complete_bash") is None  # options
    monkeypatch.setenv("COMP_WORDS", "stratctl status --sort loss ")
    monkeypatch.setenv("COMP_CWORD", "4")
    assert answer("complete_bash") is None  # a study after other options: Typer's parser knows them
    monkeypatch.setenv("_TYPER_COMPLETE_ARGS", "stratctl s")
    assert answer("complete_zsh") is None  # command help lives in Typer
    assert answer("source_bash") is None


def test_study_names_are_read_without_typer_or_the_kubernetes_client(tmp_path, server):  # noqa: F811 (the fixture)
    path = kubeconfig(tmp_path, server.server_port)
    env = {
        **os.environ,
        "_STRATCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "stratctl delete -n other --context prod s",
        "COMP_CWORD": "6",
        "KUBECONFIG": path,
    }
    code = (
        "import sys\nfrom stratctl.cli.fastcomplete import answer\nout = answer('complete_bash')\n"
        "print(out, 'typer' in sys.modules, 'kubernetes' in sys.modules)"
    )
    assert _run(code, env).split() == ["sweep", "False", "False"]
    assert server.handler.paths[-1].startswith("/api/v1/namespaces/other/configmaps?labelSelector=")
    fast = _run("import sys; from stratctl.cli.entry import main; main(); sys.exit(3)", env)
    assert fast == _run("from stratctl.cli.main import main; main()", env) == "sweep\n"


def test_a_kubeconfig_with_an_exec_plugin_goes_the_clients_way(tmp_path, monkeypatch):
    from stratctl.backends.kubernetes.api import quickread

    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG.replace("user: {token: t}", "user: {exec: {command: get-token}}"))
    assert quickread.study_names(str(config), None, "ns", timeout=0.5) is None
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.setenv("COMP_WORDS", "stratctl status ")
    monkeypatch.setenv("COMP_CWORD", "2")
    assert answer("complete_bash") is None


@pytest.mark.parametrize(
    "args, where",
    [
        (["status"], (None, None, None)),
        (["logs", "-n", "ml", "--context=lab", "--kubeconfig", "k"], ("k", "lab", "ml")),
        (["wait", "--namespace=ml"], (None, None, "ml")),
        (["status", "sweep"], None),  # the STUDY is given: a TRIAL or an option comes next
        (["status", "-n"], None),  # completing the namespace
        (["plan"], None),
    ],
)
def test_where_a_study_name_is_completed(args, where):
    from stratctl.cli.fastcomplete import _study_position

    assert _study_position(args) == where
