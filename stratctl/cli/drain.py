"""`stratctl drain` and `stratctl resume`: hand a study's GPUs back, and take them again."""

from __future__ import annotations

from typing import Annotated

import typer

from stratctl.cli.options import (
    BackendOpt,
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    OptionalStudyArg,
    Output,
    OutputOpt,
    RmOpt,
    StudyArg,
    emit,
    file_study,
)

JsonOpt = Annotated[bool, typer.Option("--json", hidden=True, help="Same as -o json.")]


def drain(
    study: OptionalStudyArg = None,
    all_noncritical: Annotated[bool, typer.Option("--all-noncritical", help="Drain every non-critical study.")] = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            min=0,
            metavar="SECONDS",
            help="Seconds before a second pass catches trials a submit loop created meanwhile.",
        ),
    ] = 3.0,
    output: OutputOpt = Output.table,
    output_json: JsonOpt = False,
    backend: BackendOpt = None,
    rm: RmOpt = None,
) -> None:
    """Stop admitting trials of non-critical studies and suspend their running trials.

    Suspended trials keep their checkpoints; `stratctl resume STUDY` brings them back.
    Critical studies are never touched.

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    on_scheduler = file_study(study, backend, rm)
    if on_scheduler:
        from stratctl.backends.batch import drain as attemptdrain

        outcomes = [attemptdrain.drain(*on_scheduler)]
    else:
        from stratctl.backends.kubernetes.api.connect import Connection, one_shot
        from stratctl.backends.kubernetes.verbs import drain as core

        cluster = one_shot(Connection(kubeconfig, context, namespace))
        try:
            outcomes = core.drain(cluster, cluster.namespace, study, all_noncritical, settle=settle)
        finally:
            cluster.close()
    if emit([o.as_dict() for o in outcomes], Output.json if output_json else output):
        return
    from rich.console import Console

    out = Console(highlight=False)
    for o in outcomes:
        if o.skipped:
            out.print(f"{o.study}: left running ({o.skipped})")
        else:
            out.print(f"{o.study}: drained, {len(o.suspended)} running trial(s) suspended")


def resume(
    study: StudyArg,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    output: OutputOpt = Output.table,
    output_json: JsonOpt = False,
    backend: BackendOpt = None,
    rm: RmOpt = None,
) -> None:
    """Undo `drain`: suspended trials resume from their checkpoints, new ones are admitted.

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    on_scheduler = file_study(study, backend, rm)
    if on_scheduler:
        from stratctl.backends.batch import drain as attemptdrain

        outcome = attemptdrain.resume(*on_scheduler)
    else:
        from stratctl.backends.kubernetes.api.connect import Connection, one_shot
        from stratctl.backends.kubernetes.verbs import drain as core

        cluster = one_shot(Connection(kubeconfig, context, namespace))
        try:
            outcome = core.resume(cluster, cluster.namespace, study)
        finally:
            cluster.close()
    if emit(outcome.as_dict(), Output.json if output_json else output):
        return
    from rich.console import Console

    out = Console(highlight=False)
    out.print(f"{outcome.study}: resumed, {len(outcome.resumed)} trial(s) back from their checkpoints")
    if outcome.left:
        out.print(f"{len(outcome.left)} trial(s) left for the submit loop: {outcome.note}")


def register(app: typer.Typer) -> None:
    app.command()(drain)
    app.command()(resume)
