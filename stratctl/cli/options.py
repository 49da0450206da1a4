"""Options shared by the commands that talk to a cluster (kubectl's spelling)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

if TYPE_CHECKING:
    from stratctl.core.spec import Study


def _studies(ctx: typer.Context, incomplete: str) -> list[str]:
    from stratctl.cli.completions import studies  # at Tab time only

    return studies(ctx, incomplete)


def _contexts(ctx: typer.Context, incomplete: str) -> list[str]:
    from stratctl.cli.completions import contexts

    return contexts(ctx, incomplete)


KubeconfigOpt = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig", metavar="FILE", help="Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)."
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", metavar="CONTEXT", autocompletion=_contexts, help="The kubeconfig context to use."),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "-n", "--namespace", metavar="NAMESPACE", help="Namespace for the study's objects (default: the study's)."
    ),
]


class Output(StrEnum):
    """`-o/--output` of the commands that print data."""

    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="table, json or yaml.")]
STUDY_HELP = "The study: its name (from any directory, on any backend), or its study file (which names its backend)."
StudyArg = Annotated[str, typer.Argument(metavar="STUDY", help=STUDY_HELP, autocompletion=_studies, show_default=False)]
OptionalStudyArg = Annotated[
    str | None,
    typer.Argument(metavar="STUDY", autocompletion=_studies, help=STUDY_HELP, show_default=False),
]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        metavar="BACKEND",
        help="Where the study NAME runs: kubernetes, slurm or yarn (default: the one that knows the name, "
        "else kubernetes; a study file names its own).",
    ),
]
RmOpt = Annotated[
    str | None,
    typer.Option(
        "--rm",
        metavar="URL",
        help="YARN: the ResourceManager to ask (default: the study's yarn.resource_managers); implies --backend yarn.",
    ),
]


def emit(data: Any, output: Output) -> bool:
    """Print `data` as JSON or YAML when `output` asks for it; whether it did (a table is the
    command's own)."""
    if output is Output.json:
        import json

        typer.echo(json.dumps(data, indent=2))
    elif output is Output.yaml:
        from stratctl.view.yamlout import dump_all

        typer.echo(dump_all([data]), nl=False)
    return output is not Output.table


def duration_option(text: str | None, flag: str) -> float | None:
    """Seconds from a duration option (`45s`, `30m`, `2h`, or plain seconds); None when not given."""
    from stratctl.core.model import parse_duration
    from stratctl.errors import UsageError

    if text is None:
        return None
    try:
        return parse_duration(float(text) if text.replace(".", "", 1).isdigit() else text)
    except ValueError as e:
        raise UsageError(f"{flag} {text!r}: {e}") from None


def file_study(argument: str | None, backend: str | None = None, rm: str | None = None) -> OnScheduler | None:
    """Where a command's STUDY argument runs, decided once for every command
    (backends.named_study): a study FILE names its backend, a NAME is looked up among the
    studies submitted to Slurm and YARN (`--backend` names one where several could be
    meant; `--rm` the YARN ResourceManager to ask). Returns that study and its scheduler
    (`.study`, `.scheduler`), or None for a Kubernetes study, named by its record in the cluster."""
    from stratctl.backends import named_study

    found = named_study(argument, backend, rm)
    return OnScheduler(*found) if found else None


def refuse_kubernetes_options(on: OnScheduler | None, **given: object) -> None:
    """A Kubernetes option given for a study on a batch scheduler: refused in one line."""
    from stratctl.errors import UsageError

    if on is None:
        return
    named = [flag for flag, value in given.items() if value]
    if named:
        flags = ", ".join("--" + flag.replace("_", "-") for flag in named)
        raise UsageError(f"{flags}: Kubernetes options, and study {on.study.name} runs on {on.scheduler.title}")


def on_scheduler(study: Study) -> OnScheduler | None:
    """The study and its scheduler when its backend is a batch scheduler; None on Kubernetes."""
    from stratctl.backends import scheduler_for
    from stratctl.backends.batch.scheduler import is_attempt_backend

    return OnScheduler(study, scheduler_for(study)) if is_attempt_backend(study) else None


class OnScheduler(NamedTuple):
    """A study on a batch scheduler, and that scheduler."""

    study: Any
    scheduler: Any
