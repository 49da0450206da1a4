"""`stratctl delete STUDY`: remove a study's jobs, PodGroups, pods and record from the cluster."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from stratctl.cli.options import (
    BackendOpt,
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    OnScheduler,
    Output,
    OutputOpt,
    RmOpt,
    StudyArg,
    emit,
    file_study,
    refuse_kubernetes_options,
)


def interactive() -> bool:
    """Whether someone at a terminal can answer a confirmation."""
    return sys.stdin.isatty()


def delete(
    study: StudyArg,
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask for a confirmation (for scripts).")] = False,
    keep_record: Annotated[
        bool,
        typer.Option("--keep-record", help="Keep the study record (its spec, flags and finished trials' outcomes)."),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Delete even while a submit loop is following the study.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, metavar="SECONDS", help="Seconds to wait for the objects to be gone.")
    ] = 60.0,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    output: OutputOpt = Output.table,
    backend: BackendOpt = None,
    rm: RmOpt = None,
) -> None:
    """Delete a study and what it left on its cluster.

    On Kubernetes its jobs (their pods go with them), PodGroups and record. On Slurm and
    YARN: its pending and running jobs or applications ended, its study directory (logs,
    marks, results) removed.

    Asks for a confirmation on a terminal; `--yes` for scripts. Refuses while a submit loop
    is following the study, unless `--force`.

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    from stratctl.backends.kubernetes.api.connect import Connection, one_shot
    from stratctl.backends.kubernetes.verbs import delete as core
    from stratctl.errors import StillThrottled, Unreachable

    on_scheduler = file_study(study, backend, rm)
    if on_scheduler:
        refuse_kubernetes_options(on_scheduler, kubeconfig=kubeconfig, context=context, namespace=namespace)
        _scheduler_delete(on_scheduler, yes, keep_record, force, output)
        return
    cluster = one_shot(Connection(kubeconfig, context, namespace))
    try:
        ns = cluster.namespace
        found = core.survey(cluster, ns, study, time.time())
        if core.check(found, time.time(), force, yes, interactive()):
            if not typer.confirm(f"Delete study {study} in namespace {ns}: {found.describe()}?", default=False):
                typer.echo("not deleted", err=True)
                raise typer.Exit(1)
        try:
            outcome = core.delete(cluster, ns, study, keep_record=keep_record, timeout=timeout)
        except (StillThrottled, Unreachable) as exc:  # cut short: the record goes last, so a rerun finds the study
            raise type(exc)(
                f"{exc}; the study's record was kept: run the same command again", status=exc.status, reason=exc.reason
            ) from None
    finally:
        cluster.close()
    if not emit(outcome.as_dict(), output):
        d = outcome.deleted
        from rich.console import Console

        out = Console(highlight=False)
        services = f"{d['services']} Service(s), " if d.get("services") else ""
        services += f"{d['scripts']} block ConfigMap(s), " if d.get("scripts") else ""
        driver = "its driver (Job stratctl-driver-" + study + "), " if d.get("driver") else ""
        out.print(
            f"{study}: deleted {driver}{d['jobs']} job(s), {d['podgroups']} PodGroup(s), {services}{d['pods']} pod(s)"
            + (", and its record" if d.get("record") else "")
        )
        if outcome.left:
            left = ", ".join(f"{n} {k}" for k, n in outcome.left.items())
            out.print(f"still there after {timeout:g} s: {left}; the record was kept, run the same command again")
    if outcome.left:
        raise typer.Exit(1)


def _scheduler_delete(on_scheduler: OnScheduler, yes: bool, keep_record: bool, force: bool, output: Output) -> None:
    from stratctl.backends.batch import delete as attemptdelete

    study, scheduler = on_scheduler
    loop = attemptdelete.following(scheduler, time.time())
    driver = scheduler.driver()
    if attemptdelete.check(study, loop, time.time(), force, yes, interactive(), driver):
        where = f"{scheduler.title} study {study.name} (its study directory {scheduler.output})"
        where += f" and its driver (slurm job {driver})" if driver else ""
        if not typer.confirm(f"Delete {where}?", default=False):
            typer.echo("not deleted", err=True)
            raise typer.Exit(1)
    removal = attemptdelete.delete(study, scheduler, keep_record=keep_record)
    if not emit(removal.as_dict(), output):
        kept = "kept its study directory" if keep_record else "removed its study directory"
        drivers = "".join(f"cancelled its driver, job {job}; " for job in removal.drivers)
        typer.echo(
            f"{study.name}: {drivers}ended {len(removal.ended)} {scheduler.title} attempt(s) still in flight, "
            f"{kept} {removal.directory}"
        )
