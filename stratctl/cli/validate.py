"""`stratctl validate FILE...`: check study files without touching a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stratctl.errors import StudyError


def validate(
    files: Annotated[list[Path], typer.Argument(help="Study files to check (-: standard input).", show_default=False)],
) -> None:
    """Check study files without touching a cluster.

    Schema, values, templates, expansion, a render of every trial, and what the study's
    backend cannot honour.

    Exits 0 when every file is valid, else 2 with every problem on stderr as FILE:LINE:COL: message.
    """
    from stratctl.backends import rendezvous_for
    from stratctl.core.merging import checked_by_render
    from stratctl.core.render import validate as check

    problems = []
    for file in files:
        try:
            study, trials = check(file, rendezvous_for)
            if checked_by_render(study):  # trials that cannot share a block: refused here as by submit
                from stratctl.backends.launch import prepare

                prepare(study)
        except StudyError as e:
            problems += e.problems
        else:
            count = (
                f"up to {study.strategy.trials} trials chosen from results ({study.strategy.kind})"
                if study.strategy.closed_loop
                else f"{len(trials)} trials"
            )
            typer.echo(f"{study.file}: valid: study {study.name}, {count}")
    if problems:
        raise StudyError(problems)
