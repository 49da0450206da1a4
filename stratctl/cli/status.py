"""`stratctl status`: studies and trials of a namespace as a table, JSON or YAML; `--watch` live."""

from __future__ import annotations

import json
import time
from enum import Enum
from typing import Annotated, Optional

import typer

from stratctl.cli.options import ContextOpt, KubeconfigOpt, NamespaceOpt, _studies


class Output(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


def status(
    study: Annotated[Optional[str], typer.Argument(metavar="STUDY", autocompletion=_studies,
                                                   help="One study (default: every study in the namespace).")] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="table, json or yaml.")] = Output.table,
    sort: Annotated[Optional[str], typer.Option(
        "--sort", metavar="METRIC",
        help="Best trials first by a result metric: 'loss' lowest first, '-accuracy' highest first.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Trials shown in the table (0: all).")] = 50,
    watch: Annotated[bool, typer.Option("-w", "--watch", help="Keep the table updated.")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.5, help="Seconds between updates with --watch.")] = 2.0,
) -> None:
    """Show studies (trials by state, in flight against target, attempts, preemptions, GPU-hours)
    and their trials (parameters, state, attempt, age, why pending, result)."""
    from rich.console import Console, Group
    from rich.live import Live

    from stratctl.engine import status as core
    from stratctl.engine.connect import Connection, one_shot
    from stratctl.view import tables
    from stratctl.view.yamlout import dump_all

    cluster = one_shot(Connection(kubeconfig, context, namespace), pool_size=8)
    ns = cluster.namespace

    def snapshot():
        # A table of `limit` trials needs the studies' summaries and those trials only;
        # JSON, YAML, --sort and --limit 0 need every trial.
        everything = output is not Output.table or not limit or bool(sort)
        snap = core.collect(cluster, ns, study, reasons_for_all=everything, shown=None if everything else limit)
        snap.trials = core.sort_trials(snap.trials, sort)
        if not everything:
            core.explain_pending(cluster, ns, snap.trials[:limit])
        return snap

    def picture(snap):
        return Group(tables.studies_table(snap.studies, snap.taken_at),
                     tables.table(snap.trials, snap.taken_at, limit or None, snap.total_trials))

    try:
        if watch and output is Output.table:
            with Live(picture(snapshot()), console=Console(), auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(picture(snapshot()), refresh=True)
        snap = snapshot()
        if output is Output.json:
            typer.echo(json.dumps(snap.as_dict(), indent=2))
        elif output is Output.yaml:
            typer.echo(dump_all([snap.as_dict()]), nl=False)
        else:
            Console().print(picture(snap))
    finally:
        cluster.close()


def register(app: typer.Typer) -> None:
    app.command()(status)
