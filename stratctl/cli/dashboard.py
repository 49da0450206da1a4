"""`stratctl dashboard`: the Grafana board for strategy-parallel search (or its alerting rules)."""

from __future__ import annotations

from typing import Annotated

import typer


def dashboard(
    rules: Annotated[bool, typer.Option("--rules", help="Print the Prometheus alerting rules instead.")] = False,
) -> None:
    """Print the Grafana dashboard JSON, or with --rules the alerting rules for Prometheus.

    Import the dashboard in Grafana and choose the Prometheus that scrapes the cluster and
    `submit --metrics-port`.
    """
    from importlib.resources import files

    name = "stratctl-rules.yaml" if rules else "stratctl.json"
    typer.echo(files("stratctl.dashboards").joinpath(name).read_text(), nl=False)
