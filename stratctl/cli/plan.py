"""`stratctl plan FILE`: the trials a study expands to and what they will cost."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def plan(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="The study file.", show_default=False)],
    output: Annotated[Format, typer.Option("-o", "--output", help="table, json or yaml.")] = Format.table,
    max_rows: Annotated[
        int, typer.Option("--max-rows", min=0, metavar="N", help="Trials shown in the table (0: all).")
    ] = 50,
) -> None:
    """Show the trials with their parameters and the cost estimate."""
    from stratctl.backends import rendezvous_for
    from stratctl.core.merging import checked_by_render
    from stratctl.core.plan import as_json, make_plan, table

    result = make_plan(file, rendezvous_for)
    if checked_by_render(result.study):  # trials that cannot share a block: refused here as by submit
        from stratctl.backends.launch import prepare

        prepare(result.study)
    if output is Format.json:
        typer.echo(json.dumps(as_json(result), indent=2))
    elif output is Format.yaml:
        from stratctl.view.yamlout import dump_all

        typer.echo(dump_all([as_json(result)]), nl=False)
    elif sys.stdout.isatty():
        from rich.console import Console

        Console(soft_wrap=False).print(table(result, max_rows or None))
    else:  # into a pipe: plain, whole columns (as `status` prints them), for grep, awk and sort
        from stratctl.core.plan import grid, notes
        from stratctl.view.columns import Column
        from stratctl.view.plaintext import plain

        title, headers, rows = grid(result, max_rows or None)
        columns = [
            Column(key=h, header=h, numeric=numeric, cells=[r[i] for r in rows])
            for i, (h, numeric) in enumerate(headers)
        ]
        typer.echo(title + "\n" + plain(columns) + "\n".join(notes(result, len(rows))))
