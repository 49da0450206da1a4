"""`stratctl submit`: parse kubectl-style flags, run the submit loop, show it, summarise."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from stratctl.backends.kubernetes.api.connect import Connection
    from stratctl.run.progress import Progress

from stratctl.cli.options import ContextOpt, KubeconfigOpt, NamespaceOpt, duration_option, on_scheduler
from stratctl.errors import ExitCode, UsageError


class DryRun(StrEnum):
    client = "client"
    server = "server"


class Parallelism(StrEnum):
    adaptive = "adaptive"
    static = "static"


class Output(StrEnum):
    text = "text"
    json = "json"


def submit(
    file: Annotated[Path, typer.Argument(help="The study file.", exists=False)],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = None,
    qps: Annotated[
        float | None,
        typer.Option(help="Client-side requests per second (0: unlimited; default: the study's throttle.qps)."),
    ] = None,
    burst: Annotated[int | None, typer.Option(help="Token-bucket burst (default: the study's throttle.burst).")] = None,
    max_inflight: Annotated[
        int | None,
        typer.Option(
            "--max-inflight", min=1, help="Upper bound on trials in flight (default: the study's parallelism.max)."
        ),
    ] = None,
    dry_run: Annotated[
        DryRun | None,
        typer.Option(
            "--dry-run", help="client: render only; server: send every manifest with dryRun=All, create nothing."
        ),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="Return once every trial is submitted instead of waiting for them to finish."),
    ] = False,
    poll_interval: Annotated[
        float, typer.Option("--poll-interval", min=0.1, help="Seconds between reconcile cycles.")
    ] = 2.0,
    workers: Annotated[int, typer.Option("--workers", min=1, max=256, help="Concurrent create requests.")] = 16,
    parallelism: Annotated[
        Parallelism,
        typer.Option(
            "--parallelism",
            help="adaptive: follow cluster pressure within the study's bounds; static: keep --max-inflight.",
        ),
    ] = Parallelism.adaptive,
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            "--prometheus-url",
            help=(
                "Prometheus with etcd and Volcano scheduler metrics: etcd p99 above 250 ms holds new submissions (and"
                " drains the study if its throttle.on_breaker is drain); Volcano scheduling p90 above 2 s halves the "
                "target."
            ),
        ),
    ] = None,
    outage_timeout: Annotated[
        float,
        typer.Option(
            "--outage-timeout",
            min=1,
            help=(
                "Seconds the API server (or the Slurm controller, the YARN ResourceManager) may not answer "
                "(restarting, etcd paused), or refuse every request of this user (HTTP 429: throttling), before "
                "submit gives up with exit 3 (at most --timeout); meanwhile it retries."
            ),
        ),
    ] = 300.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", min=1, max=65535, help="Serve Prometheus metrics on this port while submitting."
        ),
    ] = None,
    metrics_address: Annotated[
        str,
        typer.Option(
            "--metrics-address",
            metavar="ADDRESS",
            help="Address the metrics are served on (0.0.0.0 for every interface).",
        ),
    ] = "127.0.0.1",
    output: Annotated[Output, typer.Option("-o", "--output", help="Final summary format.")] = Output.text,
    rerun_changed: Annotated[
        bool,
        typer.Option(
            "--rerun-changed",
            help=(
                "The study was edited since it was submitted: give changed trials new attempts with the new spec "
                "(unchanged ones are kept)."
            ),
        ),
    ] = False,
    move_waiting: Annotated[
        bool,
        typer.Option(
            "--move-waiting",
            help=(
                "A study listing several queues: take a trial that has not started out of a full queue and create it "
                "again in one of the study's queues with room."
            ),
        ),
    ] = False,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            metavar="DURATION",
            help=(
                "Stop following the study after this long (45s, 30m, 2h), trials left running, exit 124; rerun to "
                "resume."
            ),
        ),
    ] = None,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over",
            help=(
                "Take the study over from the loop that drives it now (another terminal, CI job or "
                "pod): it hands over at its next cycle and ends; this one goes on from there."
            ),
        ),
    ] = False,
    in_cluster: Annotated[
        bool,
        typer.Option(
            "--in-cluster",
            help=(
                "Run the study's loop in the cluster, as a Job of one pod (its driver, `stratctl rbac --driver`; "
                "on Slurm a job of one CPU), and return once it drives the study: it goes on while this machine "
                "sleeps."
            ),
            rich_help_panel="In the cluster",
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="With --in-cluster: then show the study's table, read from the cluster, until its driver ends.",
            rich_help_panel="In the cluster",
        ),
    ] = False,
    driver_image: Annotated[
        str | None,
        typer.Option(
            "--driver-image",
            envvar="STRATCTL_DRIVER_IMAGE",
            metavar="IMAGE",
            help="The driver's image (default: stratctl:VERSION, this version's, as the Containerfile builds it).",
            rich_help_panel="In the cluster",
        ),
    ] = None,
    driver_node_selector: Annotated[
        list[str] | None,
        typer.Option(
            "--driver-node-selector",
            envvar="STRATCTL_DRIVER_NODE_SELECTOR",
            metavar="KEY=VALUE",
            help="Run the driver on nodes labelled KEY=VALUE, tolerating a taint on KEY (repeatable).",
            rich_help_panel="In the cluster",
        ),
    ] = None,
    driver_scheduler: Annotated[
        str | None,
        typer.Option(
            "--driver-scheduler",
            envvar="STRATCTL_DRIVER_SCHEDULER",
            metavar="NAME",
            help="The scheduler that places the driver's pod (default: the cluster's default scheduler).",
            rich_help_panel="In the cluster",
        ),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            metavar="URL",
            help=(
                "Mirror a closed-loop search into this Optuna storage for optuna-dashboard: journal:PATH, PATH.log, "
                "or a database URL (sqlite:///search.db, postgresql://...)."
            ),
        ),
    ] = None,
) -> None:
    """Submit a study's trials, throttled and exactly once, and follow them to the end.

    Safe to rerun at any time: trials already in the cluster are recognised, never duplicated.
    """
    from stratctl.backends.kubernetes.api.connect import Connection
    from stratctl.backends.launch import submit_study
    from stratctl.run.options import SubmitOptions
    from stratctl.run.progress import Fanout
    from stratctl.view.display import LiveDisplay, LogDisplay, summary, summary_json

    options = SubmitOptions(
        max_inflight=max_inflight,
        dry_run=dry_run.value if dry_run else None,
        detach=detach,
        poll_interval=poll_interval,
        workers=workers,
        parallelism=parallelism.value,
        prometheus_url=prometheus_url,
        outage_timeout=outage_timeout,
        timeout=duration_option(timeout, "--timeout"),
        move_waiting=move_waiting,
        storage=storage,
        take_over=take_over,
    )
    if in_cluster or follow:
        if not in_cluster:
            raise UsageError("--follow follows a study's driver in the cluster: give it with --in-cluster")
        if dry_run or metrics_port or take_over or detach:
            raise UsageError(
                "--in-cluster hands the study to a driver (which takes it over, serves its metrics and returns at "
                "once): --dry-run, --metrics-port, --take-over and --detach are for a loop run here"
            )
        from stratctl.cli.incluster import run

        passed = {
            "--qps": qps,
            "--burst": burst,
            "--max-inflight": max_inflight,
            "--poll-interval": poll_interval,
            "--workers": workers,
            "--parallelism": parallelism.value,
            "--prometheus-url": prometheus_url,
            "--outage-timeout": outage_timeout,
            "--timeout": timeout,
            "--storage": storage,
        }
        flags = [part for flag, value in passed.items() if value is not None for part in (flag, str(value))]
        flags += [flag for flag, on in (("--move-waiting", move_waiting), ("--rerun-changed", rerun_changed)) if on]
        run(
            file,
            Connection(kubeconfig, context, namespace),
            options,
            flags,
            driver_image,
            driver_node_selector or [],
            driver_scheduler,
            follow,
            output is Output.json,
        )
        return
    _stop_on_sigterm()
    err = _terminal() if output is Output.text else None
    display = LiveDisplay(err) if err is not None else LogDisplay(sys.stderr)
    metrics = None
    if metrics_port:  # prometheus_client is loaded for this alone
        from stratctl.view.metrics import MetricsReporter

        metrics = MetricsReporter().serve(metrics_port, metrics_address)
    with display:
        progress = submit_study(
            file,
            Connection(kubeconfig, context, namespace),
            options,
            qps=qps,
            burst=burst,
            reporter=Fanout(display, metrics),
            rerun_changed=rerun_changed,
        )
    if output is Output.json:
        typer.echo(summary_json(progress))
    else:
        typer.echo(summary(progress, width=_terminal_width()))
        if progress.succeeded and not options.dry_run and not detach:
            typer.echo(_best(file, Connection(kubeconfig, context, namespace), progress.study), nl=False)
    _exit_for(progress, bool(options.dry_run), timeout, err)


def _exit_for(progress: Progress, dry_run: bool, timeout: str | None, err: Console | None) -> None:
    """Exit with the code of how the submit ended (interrupted, timed out, refused
    manifests, conflicting trials, failures), saying so on stderr; return when it succeeded."""
    if progress.handed_over:
        (err or _stderr()).print(
            f"handed over: study {progress.study} is driven by {progress.handed_over} now; "
            f"`stratctl status {progress.study}` follows it",
            soft_wrap=True,  # one line, as a log reader greps it
        )
        return
    if progress.interrupted:
        (err or _stderr()).print(
            "[yellow]interrupted[/]: no more trials submitted. Run the same command again to resume; "
            "trials already in the cluster are recognised, never duplicated."
        )
        raise typer.Exit(ExitCode.INTERRUPTED)
    if progress.timed_out:
        (err or _stderr()).print(
            f"[yellow]timed out[/] after {timeout}: trials keep running; run the same command "
            "again to follow the study to its end (nothing is submitted twice)."
        )
        raise typer.Exit(ExitCode.TIMEOUT)
    if progress.errors and dry_run:
        raise typer.Exit(ExitCode.INVALID_INPUT)  # the server refused manifests: the study needs fixing
    if progress.conflicts:  # objects of the study's trials exist with another spec: the user must choose
        (err or _stderr()).print(
            f"[red]{len(progress.conflicts)} trial(s) exist in the cluster with a different spec "
            "hash[/]: delete their jobs or rename the study"
        )
        raise typer.Exit(ExitCode.CONFLICT)
    if progress.errors or progress.failed:
        raise typer.Exit(ExitCode.FAILURE)


def _stop_on_sigterm() -> None:
    """SIGTERM stops the loop as Ctrl-C does (its mark let go, exit 130, rerun to resume): what a
    driver's pod gets when it is deleted or evicted, a Slurm job on scancel, a process on `kill`;
    so the next driver takes the study at once instead of after the pod's grace period."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _terminal() -> Console | None:
    """A rich console on stderr when stderr is a terminal (rich decides, honouring
    FORCE_COLOR and TTY_COMPATIBLE), else None: CI logs and pipes start without rich."""
    if not sys.stderr.isatty() and not any(os.environ.get(v) for v in ("FORCE_COLOR", "TTY_COMPATIBLE")):
        return None
    err = _stderr()
    return err if err.is_terminal else None


def _terminal_width() -> int | None:
    """The width to wrap the summary at: the terminal's; None into a pipe (one line per item)."""
    import shutil

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _best(file: Path, connection: Connection, study: str) -> str:
    """The line naming the study's best trial and its parameters, when trials report
    results ("" otherwise, or when the cluster cannot tell: the summary is said already)."""
    from dataclasses import replace

    from stratctl.backends.kubernetes.api.connect import one_shot
    from stratctl.backends.kubernetes.verbs.status import best_trial
    from stratctl.core.spec import load_study
    from stratctl.errors import StratctlError
    from stratctl.view.statusout import best_line

    try:
        batch = load_study(file)
        scheduled = on_scheduler(batch)
        if scheduled:  # a study on a batch scheduler: its trials as `status` shows them
            from stratctl.backends.batch.status import snapshot
            from stratctl.run.ranking import best_of

            first = batch.objectives[0] if batch.objectives else None
            ranking = (("-" if first.direction == "maximize" else "") + first.metric) if first else None
            found = best_of(snapshot(*scheduled).trials, ranking)
            return best_line(*found) + "\n" if found else ""
        cluster = one_shot(replace(connection, namespace=connection.namespace or batch.namespace))
        try:
            found = best_trial(cluster, cluster.namespace, study)
        finally:
            cluster.close()
    except StratctlError:
        return ""
    return best_line(*found) + "\n" if found else ""


def register(app: typer.Typer) -> None:
    app.command()(submit)
