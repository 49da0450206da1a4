"""`submit --in-cluster` on the command line: the flags that pass through to the driver, the
line saying where it runs (a pod, a Slurm job), and `--follow`'s table until a Kubernetes
driver ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from stratctl.backends.kubernetes.api.connect import Connection
from stratctl.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from stratctl.run.options import SubmitOptions


def node_selector(given: Sequence[str]) -> dict[str, str]:
    """--driver-node-selector KEY=VALUE (repeated, or space-separated in its variable)."""
    chosen: dict[str, str] = {}
    for item in (part for text in given for part in text.split()):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--driver-node-selector {item}: give it as KEY=VALUE")
        chosen[key] = value
    return chosen


def run(
    file: Path,
    connection: Connection,
    options: SubmitOptions,
    flags: Sequence[str],
    image: str | None,
    selector: Sequence[str],
    scheduler: str | None,
    follow: bool,
    as_json: bool,
) -> None:
    import json

    from stratctl.backends.incluster import DEFAULT_IMAGE, DriverOptions, hand_over

    driver = DriverOptions(image or DEFAULT_IMAGE, node_selector(selector), scheduler)
    study, driven = hand_over(file, connection, options, flags, driver, follow)
    typer.echo(json.dumps({"study": study, **driven.as_dict()}) if as_json else driven.line(study))
    warning = driven.version_warning()
    if warning:
        print(warning, file=sys.stderr)
    if follow:  # a Kubernetes driver (hand_over refused it elsewhere)
        ns = driven.as_dict()["namespace"]
        _follow(Connection(connection.kubeconfig, connection.context, ns), study)


def _follow(connection: Connection, study: str, interval: float = 2.0) -> None:
    """The study's table, read from the cluster, until its driver ends; exit 1 when the
    driver ended without every trial done."""
    from rich.console import Console
    from rich.live import Live

    from stratctl.backends.kubernetes.api.connect import one_shot
    from stratctl.backends.kubernetes.verbs import status as core
    from stratctl.backends.kubernetes.verbs.incluster import outcome
    from stratctl.view import statusout

    cluster = one_shot(connection)
    ns = cluster.namespace
    console = Console()

    def picture() -> object:
        snap = core.collect(cluster, ns, study, reasons_for_all=False, shown=20, every_trial=True)
        return statusout.picture(snap, True, console.width, False, 20, None) if snap.studies else ""

    try:
        ended = outcome(cluster, ns, study)
        if console.is_terminal:
            with Live(picture(), console=console, auto_refresh=False) as live:  # type: ignore[arg-type]
                while ended is None:
                    time.sleep(interval)
                    live.update(picture(), refresh=True)  # type: ignore[arg-type]
                    ended = outcome(cluster, ns, study)
        else:
            while ended is None:
                time.sleep(interval)
                ended = outcome(cluster, ns, study)
            snap = core.collect(cluster, ns, study, reasons_for_all=False, shown=None, every_trial=True)
            typer.echo(statusout.text(snap, True, False, None, None), nl=False)
    finally:
        cluster.close()
    done, said = ended
    print(said, file=sys.stderr)
    if not done:
        raise typer.Exit(ExitCode.FAILURE)
