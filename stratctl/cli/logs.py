"""`stratctl logs STUDY [TRIAL | --best]`: what a trial's containers printed."""

from __future__ import annotations

from typing import Annotated

import typer

from stratctl.cli.options import (
    BackendOpt,
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    OnScheduler,
    RmOpt,
    StudyArg,
    file_study,
    refuse_kubernetes_options,
)


def logs(
    study: StudyArg,
    trial: Annotated[
        str | None, typer.Argument(metavar="TRIAL", show_default=False, help="The trial (as `status` names it).")
    ] = None,
    best: Annotated[
        bool, typer.Option("--best", help="The best trial by --sort (what `status --sort` shows first).")
    ] = False,
    sort: Annotated[
        str,
        typer.Option("--sort", metavar="METRIC", help="With --best: 'loss' lowest first, '-accuracy' highest first."),
    ] = "loss",
    task: Annotated[
        str | None, typer.Option("--task", metavar="NAME", help="Only the pods of this task of the gang.")
    ] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new lines.")] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", min=0, metavar="N", help="Only the last N lines of each container.")
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    backend: BackendOpt = None,
    rm: RmOpt = None,
) -> None:
    """Print what a trial's processes wrote.

    Every pod of its latest attempt, each line prefixed with its pod when the gang has
    several (on Slurm the job's log, on YARN each container's, from the study directory).

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    from stratctl.backends.kubernetes.api.connect import Connection, one_shot
    from stratctl.backends.kubernetes.verbs import logs as core
    from stratctl.errors import UsageError

    if bool(trial) == best:
        raise UsageError(
            f"name one trial of {study} (`stratctl status {study} -o name` lists them), or pass --best"
            if not best
            else "name a trial or pass --best, not both"
        )
    on_scheduler = file_study(study, backend, rm)
    if on_scheduler:
        refuse_kubernetes_options(on_scheduler, kubeconfig=kubeconfig, context=context, namespace=namespace)
        _scheduler_logs(on_scheduler, trial, best, sort, task, follow, tail)
        return
    cluster = one_shot(Connection(kubeconfig, context, namespace))
    try:
        ns = cluster.namespace
        name = trial or core.best_trial(cluster, ns, study, sort)
        found = core.sources(core.pods_of(cluster, ns, study, name, task))
        if not found:
            raise UsageError(f"no pod of trial {name} has started yet: nothing logged")
        if best:
            typer.echo(f"trial {name}", err=True)
        for prefix, line in core.lines(cluster, ns, found, tail=tail, follow=follow):
            typer.echo(f"{prefix} {line}" if prefix else line)
    finally:
        cluster.close()


def _scheduler_logs(
    on_scheduler: OnScheduler,
    trial: str | None,
    best: bool,
    sort: str,
    task: str | None,
    follow: bool,
    tail: int | None,
) -> None:
    from stratctl.backends.batch import logs as attemptlogs

    study, scheduler = on_scheduler
    if best or trial is None:  # no TRIAL is --best (checked by the caller)
        found = attemptlogs.best_trial(study, scheduler, sort)
    else:
        found = attemptlogs.trial_of(study, trial)
    if best:
        typer.echo(f"trial {found.name}", err=True)

    def running() -> bool:
        attempt = scheduler.attempts().get(found.name)
        return attempt is not None and attempt.state.in_flight

    files = attemptlogs.sources(study, scheduler, found, task)
    for prefix, line in attemptlogs.lines(files, tail=tail, follow=follow, running=running):
        typer.echo(f"{prefix} {line}" if prefix else line)
