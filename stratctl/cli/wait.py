"""`stratctl wait`: block until a study has finished; the exit code says how it ended."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from stratctl.run.rows import StudyRow

from stratctl.cli.options import (
    BackendOpt,
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    RmOpt,
    StudyArg,
    duration_option,
    file_study,
    refuse_kubernetes_options,
)


def wait(
    study: StudyArg,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    timeout: Annotated[
        str | None,
        typer.Option("--timeout", metavar="DURATION", help="Give up after this long (45s, 30m, 2h): exit 124."),
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", min=0.2, metavar="SECONDS", help="Seconds between two reads.")
    ] = 2.0,
    backend: BackendOpt = None,
    rm: RmOpt = None,
) -> None:
    """Wait until every trial of a study has ended; the exit code says how.

    Exit 0 if all succeeded, 1 if some failed, 124 on --timeout. Prints a line when the
    trials' states change, and at once when no submit loop follows the study while trials
    wait to be admitted (with the command that would follow it); then waits until --timeout.

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    from stratctl.run.finish import wait as wait_for

    seconds = duration_option(timeout, "--timeout")
    on_scheduler = file_study(study, backend, rm)
    if on_scheduler:
        refuse_kubernetes_options(on_scheduler, kubeconfig=kubeconfig, context=context, namespace=namespace)
        from stratctl.backends.batch.following import follower
        from stratctl.backends.batch.status import snapshot

        source = on_scheduler.study.source
        code = wait_for(
            lambda: snapshot(*on_scheduler).studies[0],
            typer.echo,
            timeout=seconds,
            interval=interval,
            followed=lambda: follower(on_scheduler.scheduler.output, time.time()) is not None,
            follow_with=f"stratctl submit {source}" if source else "stratctl submit STUDY_FILE",
        )
        raise typer.Exit(int(code))

    from stratctl.backends.kubernetes.api.connect import Connection, one_shot
    from stratctl.backends.kubernetes.objects.record import followed
    from stratctl.backends.kubernetes.verbs import status as core

    cluster = one_shot(Connection(kubeconfig, context, namespace), pool_size=4)

    def read() -> StudyRow:
        # every trial, as `status -o json` reads them: the summary a submit loop keeps in the
        # record is a cycle behind, and stays for 30 s after a loop that stopped
        return core.collect(cluster, cluster.namespace, study, reasons_for_all=False).studies[0]

    try:
        code = wait_for(
            read,
            typer.echo,
            timeout=seconds,
            interval=interval,
            followed=lambda: followed(cluster, cluster.namespace, study, time.time()),
            follow_with="stratctl submit STUDY_FILE",
        )
    finally:
        cluster.close()
    raise typer.Exit(int(code))
