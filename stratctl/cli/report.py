"""`stratctl report --step N METRIC=VALUE...`: a running trial reports intermediate values."""

from __future__ import annotations

from typing import Annotated

import typer

from stratctl.cli.options import ContextOpt, KubeconfigOpt


def report(
    values: Annotated[
        list[str],
        typer.Argument(metavar="METRIC=VALUE...", help="Values at this step, e.g. loss=0.41.", show_default=False),
    ],
    step: Annotated[int, typer.Option("--step", min=0, metavar="N", help="The step (epoch, iteration) they are of.")],
    pod: Annotated[
        str | None,
        typer.Option(
            "--pod",
            metavar="NAME",
            help="The trial's pod (default: $STRATCTL_POD, else $HOSTNAME: the pod this runs in).",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "-n", "--namespace", metavar="NAMESPACE", help="The pod's namespace (default: the service account's)."
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    flush: Annotated[
        bool, typer.Option("--flush", help="Write now, even if the last write was under 5 s ago.")
    ] = False,
) -> None:
    """Report a running trial's intermediate values, for the study's pruner.

    Written to the trial's own pod (annotation stratctl.io/report) at most every 5 s,
    reports in between riding on the next write. Inside a trial's container it needs
    nothing else; the pod's service account needs `patch` on pods (see `stratctl rbac`).
    """
    from stratctl.backends.kubernetes.search.intermediate import parse_values
    from stratctl.backends.kubernetes.search.intermediate import report as write

    write(step, parse_values(values), pod=pod, namespace=namespace, kubeconfig=kubeconfig, context=context, flush=flush)
