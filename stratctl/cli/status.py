"""`stratctl status`: the studies of a namespace, or one study and its trials, as a table
(plain columns into a pipe), wide table, names, CSV, JSON or YAML; `--watch` live."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from stratctl.cli.options import (
    STUDY_HELP,
    BackendOpt,
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    OnScheduler,
    RmOpt,
    _studies,
    file_study,
)
from stratctl.errors import UsageError
from stratctl.run.ranking import sort_trials
from stratctl.run.rows import Snapshot

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.core.spec import Study


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
            help=f"{STUDY_HELP} Default: the namespace's Kubernetes studies.",
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
    backend: BackendOpt = None,
    rm: RmOpt = None,
) -> None:
    """Show the studies of a namespace, or one study and every one of its trials.

    The studies: trials by state, in flight against target, GPU-hours, outcome or latest
    decision. One study's trials, created or not: parameters, result metrics, state,
    duration, why pending or failed.

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    from rich.console import Console
    from rich.live import Live

    from stratctl.backends.kubernetes.api.connect import Connection, one_shot

    if study and (all_namespaces or selector):
        raise UsageError("a STUDY is one study: -A/--all-namespaces and -l/--selector choose among studies")
    if best and not study:
        raise UsageError("--best N ranks the trials of one study: name the STUDY")
    if not study and (backend or rm) and backend != "kubernetes":
        raise UsageError("status without a STUDY lists a namespace's Kubernetes studies: name the STUDY")
    on_scheduler = file_study(study, backend, rm)  # a study on a batch scheduler: its commands, no Kubernetes
    cluster = None if on_scheduler else one_shot(Connection(kubeconfig, context, namespace), pool_size=24)
    if best and not sort:  # the study's objective ranks them, when it declares one
        sort = _declared_ranking(study, on_scheduler, cluster)
    asked = _Asked(study, selector, sort, best, limit, output, all_namespaces, on_scheduler, cluster)
    console = Console()
    try:
        if watch and asked.table and console.is_terminal:
            with Live(asked.picture(*asked.read(), console.width), console=console, auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(asked.picture(*asked.read(), console.width), refresh=True)
        asked.show(*asked.read(), console)
    finally:
        if cluster is not None:
            cluster.close()


def _declared_ranking(study: str | None, on_scheduler: OnScheduler | None, cluster: Cluster | None) -> str:
    """The metric the study's objective ranks its trials by, for --best without --sort."""
    from stratctl.backends.kubernetes.verbs import status as core

    sort = None
    if on_scheduler:
        sort = _ranking(on_scheduler.study)
    elif cluster is not None and study is not None:  # --best names one study (checked by the caller)
        sort = core.declared_ranking(cluster, cluster.namespace, study)
    if not sort:
        raise UsageError(
            "--best N ranks trials by a metric: give it with --sort METRIC (the study declares no objective)"
        )
    return sort


@dataclass(frozen=True)
class _Asked:
    """What `status` was asked to show, and where from: the study file's scheduler
    (`on_scheduler`) or the cluster."""

    study: str | None
    selector: str | None
    sort: str | None
    best: int | None
    limit: int
    output: Output
    all_namespaces: bool
    on_scheduler: OnScheduler | None
    cluster: Cluster | None

    @property
    def kube(self) -> Cluster:
        """The cluster, connected to for every study not on a batch scheduler."""
        assert self.cluster is not None, "a study on a batch scheduler reads no cluster"
        return self.cluster

    @property
    def table(self) -> bool:
        return self.output in (Output.table, Output.wide)

    def snapshot(self, ns: str) -> Snapshot:
        """The studies of namespace `ns`, or the one study's trials, as much as the output needs."""
        from stratctl.backends.kubernetes.verbs import status as core

        study, sort, best, limit = self.study, self.sort, self.best, self.limit
        if self.on_scheduler:
            from stratctl.backends.batch.status import snapshot as scheduler_snapshot

            snap = scheduler_snapshot(*self.on_scheduler)
            snap.trials = sort_trials(snap.trials, sort)[: best or None]
            return snap
        if not study:  # the studies only; machine outputs exact (every trial counted)
            return core.collect(
                self.kube,
                ns,
                None,
                reasons_for_all=False,
                shown=0 if self.table or self.output is Output.name else None,
                selector=self.selector,
            )
        # A table of `limit` trials needs the study's summary and those trials only;
        # other outputs, --sort and --limit 0 need every trial.
        everything = not self.table or not limit or bool(sort)
        snap = core.collect(
            self.kube, ns, study, reasons_for_all=everything, shown=None if everything else limit, every_trial=True
        )
        snap.trials = sort_trials(snap.trials, sort)
        if best:
            snap.trials = snap.trials[:best]
        if not everything:
            from stratctl.backends.kubernetes.objects.waiting import explain_pending

            explain_pending(self.kube, ns, snap.trials[: limit or None])
        return snap

    def read(self) -> tuple[Snapshot, list[str] | None]:
        """The snapshot (of every namespace with studies, with -A) and each study row's namespace."""
        from stratctl.backends.kubernetes.verbs import status as core

        if not self.all_namespaces:
            return self.snapshot(self.cluster.namespace if self.cluster else ""), None
        snaps = [self.snapshot(ns) for ns in core.namespaces_with_studies(self.kube, self.selector)]
        merged = Snapshot("", time.time(), [s for snap in snaps for s in snap.studies], [])
        return merged, [snap.namespace for snap in snaps for _ in snap.studies]

    def empty(self) -> str:
        from stratctl.view import statusout

        return statusout.empty_line(None if self.all_namespaces or not self.cluster else self.cluster.namespace)

    def picture(self, snap: Snapshot, namespaces: list[str] | None, width: int) -> RenderableType:
        """The table a terminal shows."""
        from stratctl.view import statusout

        if not snap.studies:
            return self.empty()
        wide = self.output is Output.wide
        return statusout.picture(snap, bool(self.study), width, wide, self.limit or None, namespaces)

    def show(self, snap: Snapshot, namespaces: list[str] | None, console: Console) -> None:
        """Print the snapshot in the output asked for."""
        from stratctl.view import statusout
        from stratctl.view.yamlout import dump_all

        one = bool(self.study)
        if self.output is Output.json:
            typer.echo(statusout.json_text(statusout.document(snap, one, namespaces)))
        elif self.output is Output.yaml:
            typer.echo(dump_all([statusout.document(snap, one, namespaces)]), nl=False)
        elif not snap.studies:
            print(self.empty(), file=sys.stderr)
        elif self.output is Output.name:
            typer.echo(statusout.names(snap, one), nl=False)
        elif self.output is Output.csv:
            typer.echo(statusout.csv(snap, one, namespaces), nl=False)
        elif console.is_terminal:
            console.print(self.picture(snap, namespaces, console.width))
        else:
            limit = self.limit or None
            typer.echo(statusout.text(snap, one, self.output is Output.wide, limit, namespaces), nl=False)
            if self.study and statusout.hidden(snap, limit):  # on stderr: the columns stay parseable
                print(statusout.hidden(snap, limit), file=sys.stderr)


def _ranking(study: Study) -> str | None:
    first = study.objectives[0] if study.objective is not None else None
    return None if first is None else ("-" if first.direction == "maximize" else "") + first.metric


def register(app: typer.Typer) -> None:
    app.command()(status)
