"""`stratctl logs STUDY [TRIAL | --best]`: what a trial's containers printed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster

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
    driver: Annotated[
        bool,
        typer.Option("--driver", help="The study's driver (`submit --in-cluster`: a pod, a Slurm job): its output."),
    ] = False,
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

    if driver and (trial or best or task):
        raise UsageError("--driver shows the study's driver: no TRIAL, --best or --task with it")
    if not driver and bool(trial) == best:
        raise UsageError(
            f"name one trial of {study} (`stratctl status {study} -o name` lists them), or pass --best"
            if not best
            else "name a trial or pass --best, not both"
        )
    on_scheduler = file_study(study, backend, rm)
    if on_scheduler:
        refuse_kubernetes_options(on_scheduler, kubeconfig=kubeconfig, context=context, namespace=namespace)
        if driver:
            _slurm_driver_logs(on_scheduler, follow, tail)
        else:
            _scheduler_logs(on_scheduler, trial, best, sort, task, follow, tail)
        return
    cluster = one_shot(Connection(kubeconfig, context, namespace))
    try:
        ns = cluster.namespace
        if driver:
            _driver_logs(cluster, ns, study, follow, tail)
            return
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


def _driver_logs(cluster: Cluster, ns: str, study: str, follow: bool, tail: int | None) -> None:
    """Every pod of the study's driver Job, oldest first (each line prefixed with its pod when
    there were several); following, the newest one alone."""
    from stratctl.backends.kubernetes.verbs import logs as core
    from stratctl.backends.kubernetes.verbs.incluster import driver_pods
    from stratctl.errors import UsageError

    pods = driver_pods(cluster, ns, study)
    started = [p for p in pods if (p.get("status") or {}).get("containerStatuses")]
    if not started:
        raise UsageError(
            f"study {study} has no driver pod that started in {ns} (`submit --in-cluster` runs one)"
            if not pods
            else f"the driver pod {pods[-1]['metadata']['name']} of study {study} has not started yet: nothing logged"
        )
    found = core.sources(started[-1:] if follow else started)
    for prefix, line in core.lines(cluster, ns, found, tail=tail, follow=follow):
        typer.echo(f"{prefix} {line}" if prefix else line)


def _slurm_driver_logs(on_scheduler: OnScheduler, follow: bool, tail: int | None) -> None:
    """The logs of the study's driver jobs (Slurm, `submit --in-cluster`), oldest first, each
    line prefixed with its file when there were several; following, the newest one alone."""
    from stratctl.backends.batch import logs as attemptlogs
    from stratctl.backends.slurm.driver import log_files
    from stratctl.errors import UsageError

    study, scheduler = on_scheduler
    if study.backend != "slurm":
        raise UsageError(f"--driver shows a study's driver (`submit --in-cluster`): {scheduler.title} runs none")
    found = log_files(scheduler.output)
    if not found:
        raise UsageError(f"study {study.name} has no driver log (`submit --in-cluster` runs its driver as a job)")
    shown = found[-1:] if follow or len(found) == 1 else found
    files = [("" if len(shown) == 1 else path.stem, path) for path in shown]
    for prefix, line in attemptlogs.lines(files, tail=tail, follow=follow, running=lambda: bool(scheduler.driver())):
        typer.echo(f"{prefix} {line}" if prefix else line)


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
