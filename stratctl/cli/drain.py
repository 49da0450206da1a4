"""`stratctl drain` and `stratctl resume`: hand a study's GPUs back, and take them again."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from stratctl.cli.options import ContextOpt, KubeconfigOpt, NamespaceOpt


def drain(
    study: Annotated[Optional[str], typer.Argument(help="The study to drain.")] = None,
    all_noncritical: Annotated[bool, typer.Option("--all-noncritical", help="Drain every non-critical study.")] = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    settle: Annotated[float, typer.Option("--settle", min=0, help="Seconds before a second pass catches trials a "
                                          "submit loop created meanwhile.")] = 3.0,
    output_json: Annotated[bool, typer.Option("--json", help="Print what was done as JSON.")] = False,
) -> None:
    """Stop admitting trials of non-critical studies and suspend their running trials.

    Suspended trials keep their checkpoints; `stratctl resume STUDY` brings them back.
    Critical studies are never touched.
    """
    from stratctl.engine import drain as core
    from stratctl.engine.connect import Connection, one_shot

    cluster = one_shot(Connection(kubeconfig, context, namespace))
    try:
        outcomes = core.drain(cluster, cluster.namespace, study, all_noncritical, settle=settle)
    finally:
        cluster.close()
    if output_json:
        typer.echo(json.dumps([o.as_dict() for o in outcomes], indent=2))
        return
    from rich.console import Console

    out = Console(highlight=False)
    for o in outcomes:
        if o.skipped:
            out.print(f"{o.study}: left running ({o.skipped})")
        else:
            out.print(f"{o.study}: drained, {len(o.suspended)} running trial(s) suspended")


def resume(
    study: Annotated[str, typer.Argument(help="The drained study.")],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    output_json: Annotated[bool, typer.Option("--json", help="Print what was done as JSON.")] = False,
) -> None:
    """Undo `drain`: suspended trials come back from their checkpoints; new trials are admitted again."""
    from stratctl.engine import drain as core
    from stratctl.engine.connect import Connection, one_shot

    cluster = one_shot(Connection(kubeconfig, context, namespace))
    try:
        outcome = core.resume(cluster, cluster.namespace, study)
    finally:
        cluster.close()
    if output_json:
        typer.echo(json.dumps(outcome.as_dict(), indent=2))
        return
    from rich.console import Console

    out = Console(highlight=False)
    out.print(f"{outcome.study}: resumed, {len(outcome.resumed)} trial(s) back from their checkpoints")
    if outcome.left:
        out.print(f"{len(outcome.left)} trial(s) left for the submit loop: {outcome.note}")


def register(app: typer.Typer) -> None:
    app.command()(drain)
    app.command()(resume)
