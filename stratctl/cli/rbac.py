"""`stratctl rbac`: the least-privilege RBAC stratctl needs, for a cluster admin to apply."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated

import typer

from stratctl.errors import UsageError


def rbac(
    namespace: Annotated[
        str, typer.Option("-n", "--namespace", metavar="NAMESPACE", help="The namespace studies run in.")
    ] = "default",
    user: Annotated[list[str] | None, typer.Option("--user", metavar="NAME", help="Bind a user (repeatable).")] = None,
    group: Annotated[
        list[str] | None, typer.Option("--group", metavar="NAME", help="Bind a group (repeatable).")
    ] = None,
    service_account: Annotated[
        list[str] | None,
        typer.Option(
            "--service-account",
            metavar="NAME",
            help="Bind a service account of the namespace (repeatable; default: stratctl, for CI jobs in the cluster).",
        ),
    ] = None,
    cluster_wide_reads: Annotated[
        bool,
        typer.Option(
            "--cluster-wide-reads",
            help="Also read nodes, pods of every namespace and HyperNodes: the adaptive loop's "
            "GPU and yielding signals (without it they degrade, said once).",
        ),
    ] = False,
    report_service_account: Annotated[
        str | None,
        typer.Option(
            "--report-service-account",
            metavar="NAME",
            help="The service account trials run as, allowed to report "
            "intermediate values to their own pod (studies with a pruner).",
        ),
    ] = None,
    driver: Annotated[
        bool,
        typer.Option(
            "--driver",
            help="Also what a study's driver pod (`submit --in-cluster`) runs as: ServiceAccount "
            "stratctl-driver, bound to the submit loop's rights, and PriorityClass stratctl-driver.",
        ),
    ] = False,
) -> None:
    """Print the Role, ClusterRoles and bindings stratctl needs, for `kubectl apply -f -`."""
    from stratctl.backends.kubernetes.verbs.rbac import Subject, text

    subjects = (
        [Subject("User", u) for u in user or []]
        + [Subject("Group", g) for g in group or []]
        + [Subject("ServiceAccount", s, namespace) for s in service_account or []]
    )
    if not subjects:
        subjects = [Subject("ServiceAccount", "stratctl", namespace)]
    if any(not s.name for s in subjects):
        raise UsageError("a subject needs a name")
    command = (
        "stratctl " + " ".join(shlex.quote(a) for a in sys.argv[sys.argv.index("rbac") :]) if "rbac" in sys.argv else ""
    )
    typer.echo(text(namespace, subjects, cluster_wide_reads, report_service_account, command, driver), nl=False)
