"""`stratctl wait`: block until a study has finished; the exit code says how it ended."""

from __future__ import annotations

from typing import Annotated

import typer

from stratctl.cli.options import ContextOpt, KubeconfigOpt, NamespaceOpt, StudyArg, duration_option


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
) -> None:
    """Wait until every trial of STUDY succeeded or failed: exit 0 if all succeeded, 1 if some
    failed, 124 on --timeout. Prints a line when the trials' states change.

    An API server that does not answer, or that refuses every request of this user
    (HTTP 429: throttling), is waited for up to 25 s, with one line saying so; then exit 3.
    """
    from stratctl.backends.kubernetes import status as core
    from stratctl.backends.kubernetes.connect import Connection, one_shot
    from stratctl.run.finish import wait as wait_for

    seconds = duration_option(timeout, "--timeout")
    cluster = one_shot(Connection(kubeconfig, context, namespace), pool_size=4)

    def read():
        # every trial, as `status -o json` reads them: the summary a submit loop keeps in the
        # record is a cycle behind, and stays for 30 s after a loop that stopped
        return core.collect(cluster, cluster.namespace, study, reasons_for_all=False).studies[0]

    try:
        code = wait_for(read, typer.echo, timeout=seconds, interval=interval)
    finally:
        cluster.close()
    raise typer.Exit(int(code))
