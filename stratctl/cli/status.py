"""`stratctl status`: the studies of a namespace, or one study and its trials, as a table
(plain columns into a pipe), wide table, names, CSV, JSON or YAML; `--watch` live."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from typing import Annotated

import typer

from stratctl.cli.options import ContextOpt, KubeconfigOpt, NamespaceOpt, _studies, file_study
from stratctl.errors import UsageError
from stratctl.run.ranking import sort_trials


class Output(StrEnum):
    table = "table"
    wide = "wide"
    name = "name"
    csv = "csv"
    json = "json"
    yaml = "yaml"


def status(
    study: Annotated[
        str | None,
        typer.Argument(
            metavar="STUDY",
            autocompletion=_studies,
            help="One study and its trials (default: the namespace's studies).",
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[
        bool, typer.Option("-A", "--all-namespaces", help="The studies of every namespace.")
    ] = False,
    selector: Annotated[
        str | None, typer.Option("-l", "--selector", help="Only studies whose records match this label selector.")
    ] = None,
    output: Annotated[
        Output, typer.Option("-o", "--output", metavar="FORMAT", help="table, wide, name, csv, json or yaml.")
    ] = Output.table,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort",
            metavar="METRIC",
            help="Best trials first by a result metric: 'loss' lowest first, '-accuracy' highest first.",
        ),
    ] = None,
    best: Annotated[
        int | None, typer.Option("--best", min=1, metavar="N", help="Only the N best trials by --sort.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Trials shown in the table (0: all).")] = 50,
    watch: Annotated[bool, typer.Option("-w", "--watch", help="Keep the table updated.")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.5, help="Seconds between updates with --watch.")] = 2.0,
) -> None:
    """Show the studies (trials by state, in flight against target, GPU-hours, outcome or latest
    decision) or one study's trials (parameters, result metrics, state, duration, why pending or failed).

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    from rich.console import Console
    from rich.live import Live

    from stratctl.backends.kubernetes import status as core
    from stratctl.backends.kubernetes.connect import Connection, one_shot
    from stratctl.view import statusout
    from stratctl.view.yamlout import dump_all

    if study and (all_namespaces or selector):
        raise UsageError("a STUDY is one study: -A/--all-namespaces and -l/--selector choose among studies")
    if best and not study:
        raise UsageError("--best N ranks the trials of one study: name the STUDY")
    on_scheduler = file_study(study)  # the FILE of a study on a batch scheduler: its commands, no Kubernetes
    cluster = None if on_scheduler else one_shot(Connection(kubeconfig, context, namespace), pool_size=24)
    if best and not sort:  # the study's objective ranks them, when it declares one
        if on_scheduler:
            sort = _ranking(on_scheduler.study)
        elif cluster is not None and study is not None:  # --best names one study (checked above)
            sort = core.declared_ranking(cluster, cluster.namespace, study)
        if not sort:
            raise UsageError(
                "--best N ranks trials by a metric: give it with --sort METRIC (the study declares no objective)"
            )
    table = output in (Output.table, Output.wide)
    console = Console()
    terminal = console.is_terminal

    def snapshot(ns: str):
        if on_scheduler:
            from stratctl.run.attemptstatus import snapshot as scheduler_snapshot

            snap = scheduler_snapshot(*on_scheduler)
            snap.trials = sort_trials(snap.trials, sort)[: best or None]
            return snap
        if not study:  # the studies only; machine outputs exact (every trial counted)
            return core.collect(
                cluster,
                ns,
                None,
                reasons_for_all=False,
                shown=0 if table or output is Output.name else None,
                selector=selector,
            )
        # A table of `limit` trials needs the study's summary and those trials only;
        # other outputs, --sort and --limit 0 need every trial.
        everything = not table or not limit or bool(sort)
        snap = core.collect(cluster, ns, study, reasons_for_all=everything, shown=None if everything else limit)
        snap.trials = sort_trials(snap.trials, sort)
        if best:
            snap.trials = snap.trials[:best]
        if not everything:
            core.explain_pending(cluster, ns, snap.trials[: limit or None])
        return snap

    def read():
        if not all_namespaces:
            return snapshot(cluster.namespace if cluster else ""), None
        snaps = [snapshot(ns) for ns in core.namespaces_with_studies(cluster, selector)]
        merged = core.Snapshot("", time.time(), [s for snap in snaps for s in snap.studies], [])
        return merged, [snap.namespace for snap in snaps for _ in snap.studies]

    def picture(snap, namespaces):
        if not snap.studies:
            return statusout.empty_line(None if all_namespaces or not cluster else cluster.namespace)
        return statusout.picture(snap, bool(study), console.width, output is Output.wide, limit or None, namespaces)

    try:
        if watch and table and terminal:
            with Live(picture(*read()), console=console, auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(picture(*read()), refresh=True)
        snap, namespaces = read()
        if output is Output.json:
            typer.echo(statusout.json_text(statusout.document(snap, bool(study), namespaces)))
        elif output is Output.yaml:
            typer.echo(dump_all([statusout.document(snap, bool(study), namespaces)]), nl=False)
        elif not snap.studies:
            print(statusout.empty_line(None if all_namespaces or not cluster else cluster.namespace), file=sys.stderr)
        elif output is Output.name:
            typer.echo(statusout.names(snap, bool(study)), nl=False)
        elif output is Output.csv:
            typer.echo(statusout.csv(snap, bool(study), namespaces), nl=False)
        elif terminal:
            console.print(picture(snap, namespaces))
        else:
            typer.echo(statusout.text(snap, bool(study), output is Output.wide, limit or None, namespaces), nl=False)
            if study and statusout.hidden(snap, limit or None):  # on stderr: the columns stay parseable
                print(statusout.hidden(snap, limit or None), file=sys.stderr)
    finally:
        if cluster is not None:
            cluster.close()


def _ranking(study) -> str | None:
    first = study.objectives[0] if study.objective is not None else None
    return None if first is None else ("-" if first.direction == "maximize" else "") + first.metric


def register(app: typer.Typer) -> None:
    app.command()(status)
