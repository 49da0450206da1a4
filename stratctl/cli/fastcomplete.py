"""Shell completion answered without loading Typer, click, rich or pydantic.

A Tab runs `stratctl` with `_STRATCTL_COMPLETE=complete_<shell>`; importing the CLI costs
most of a 0.3 s answer. `answer()` handles the questions whose answer needs no CLI
objects, in Typer's exact output per shell, and returns None for every other one (options,
study names, files), which then go through Typer as before:

- a command name in bash (zsh and fish show each command's help, which lives in Typer);
- a context after `--context` (all three shells), read from the kubeconfig as YAML;
- a study name as the STUDY of status, drain, resume, delete, logs and wait, after
  nothing but connection options, read with one HTTPS request made by the standard
  library (`kube.quickread`) within the Tab's budget, unless the kubeconfig needs the
  Kubernetes client (an exec plugin): then Typer's callback reads it.

`COMMAND_NAMES` must list what the Typer app registers; tests/unit/test_fastcomplete.py
compares it and each answer with Typer's own.
"""

from __future__ import annotations

import os
import shlex
import threading
from typing import Any

COMMAND_NAMES = [
    "validate",
    "render",
    "plan",
    "schema",
    "submit",
    "status",
    "drain",
    "resume",
    "wait",
    "delete",
    "logs",
    "report",
    "rbac",
    "dashboard",
]


STUDY_COMMANDS = ("status", "drain", "resume", "delete", "logs", "wait")
CONNECTION_OPTIONS = ("-n", "--namespace", "--context", "--kubeconfig")


def _study_position(args: list[str]) -> tuple[str | None, str | None, str | None] | None:
    """(kubeconfig, context, namespace) when the word completed is the STUDY of a study
    command given nothing but connection options before it; None otherwise."""
    if not args or args[0] not in STUDY_COMMANDS:
        return None
    rest, values, i = args[1:], {}, 0
    while i < len(rest):
        name, eq, value = rest[i].partition("=")
        if name not in CONNECTION_OPTIONS or (not eq and i + 1 >= len(rest)):
            return None
        values[name], i = (value, i + 1) if eq else (rest[i + 1], i + 2)
    return values.get("--kubeconfig"), values.get("--context"), values.get("--namespace", values.get("-n"))


def _studies(kubeconfig: str | None, context: str | None, namespace: str | None) -> list[str] | None:
    """The namespace's studies read within the Tab's budget (none past it); None when the
    kubeconfig needs the Kubernetes client."""
    from stratctl.backends.kubernetes.api import quickread
    from stratctl.backends.kubernetes.verbs.shellnames import BUDGET

    box: list[Any] = []

    def read() -> None:
        try:
            box.append(quickread.study_names(kubeconfig, context, namespace, timeout=BUDGET))
        except Exception:  # a completion says nothing rather than print an error into the shell
            box.append([])

    thread = threading.Thread(target=read, name="complete", daemon=True)
    thread.start()
    thread.join(BUDGET)
    return box[0] if box else []


def _split(line: str) -> list[str] | None:
    try:
        return shlex.split(line)
    except ValueError:  # an open quote: leave it to click's own splitting
        return None


def _words(shell: str) -> tuple[list[str], str] | None:
    """(the words before the one completed, the word completed), as Typer's classes read them."""
    if shell == "bash":
        words = _split(os.environ.get("COMP_WORDS", ""))
        try:
            cword = int(os.environ.get("COMP_CWORD", ""))
        except ValueError:
            return None
        if words is None:
            return None
        return words[1:cword], (words[cword] if cword < len(words) else "")
    line = os.environ.get("_TYPER_COMPLETE_ARGS", "")
    words = _split(line)
    if words is None:
        return None
    args = words[1:]
    if args and not line.endswith(" "):
        return args[:-1], args[-1]
    return args, ""


def _format(shell: str, values: list[str]) -> str | None:
    if shell == "bash":
        return "\n".join(values)
    if shell == "zsh":
        if not values:
            return "_files"

        def escape(s: str) -> str:
            return s.replace('"', '""').replace("'", "''").replace("$", "\\$").replace("`", "\\`").replace(":", r"\\:")

        body = "\n".join(f'"{escape(v)}"' for v in values)
        return f"_arguments '*: :(({body}))'"
    if shell == "fish" and os.environ.get("_TYPER_COMPLETE_FISH_ACTION") == "get-args" and values:
        return "\n".join(values)
    return None  # fish's is-args and empty answers: Typer's path


def _option_value(args: list[str], *names: str) -> str | None:
    value = None
    for i, word in enumerate(args):
        for name in names:
            if word == name and i + 1 < len(args):
                value = args[i + 1]
            elif word.startswith(name + "="):
                value = word[len(name) + 1 :]
    return value


def answer(instruction: str) -> str | None:
    """The completion output for `_STRATCTL_COMPLETE=instruction`, or None to ask Typer."""
    shell = instruction.removeprefix("complete_")
    if not instruction.startswith("complete_") or shell not in ("bash", "zsh", "fish"):
        return None
    words = _words(shell)
    if words is None:
        return None
    args, incomplete = words
    if args and args[-1] == "--context":
        from stratctl.backends.kubernetes.api.kubeconfig import context_names

        names = context_names(_option_value(args, "--kubeconfig"))
        return _format(shell, [n for n in names if n.startswith(incomplete)])
    where = None if incomplete.startswith("-") else _study_position(args)
    if where is not None:
        studies = _studies(*where)
        if studies is not None:
            return _format(shell, [n for n in studies if n.startswith(incomplete)])
        return None
    if shell == "bash" and not incomplete.startswith("-") and all(a in ("--traceback",) for a in args):
        return _format(shell, [n for n in COMMAND_NAMES if n.startswith(incomplete)])
    return None
