"""`stratctl render FILE`: the manifests each trial would be submitted as."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer


def render(
    file: Annotated[Path, typer.Argument(help="The study file.", show_default=False)],
    output_dir: Annotated[Optional[Path], typer.Option("-o", "--output-dir",
                                                       help="Write one FILE per trial into this directory instead of stdout.")] = None,
    attempt: Annotated[int, typer.Option("--attempt", min=0, help="Render this attempt number (0 = first submission).")] = 0,
    resume: Annotated[bool, typer.Option("--resume", help="Render as a resumed attempt (STRATCTL_RESUME=1).")] = False,
    trial: Annotated[Optional[list[str]], typer.Option("--trial", "-t",
                                                       help="Only this trial (name or index); repeatable.")] = None,
) -> None:
    """Render the manifests of every trial as multi-document YAML."""
    from stratctl.errors import UsageError
    from stratctl.study.render import Renderer
    from stratctl.study.space import attempt_name, expand
    from stratctl.study.spec import load_study
    from stratctl.view.yamlout import dump_all

    study = load_study(file)
    trials = expand(study)
    if trial:
        wanted = set(trial)
        trials = [t for t in trials if t.name in wanted or str(t.index) in wanted]
        if not trials:
            raise UsageError(f"no trial of study {study.name} matches {', '.join(sorted(wanted))}")
    renderer = Renderer(study)
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
    # in chunks, each written before the next is rendered: memory stays flat however many trials
    for start in range(0, len(trials), CHUNK):
        chunk = trials[start:start + CHUNK]
        manifests = renderer.render_all(chunk, attempt=attempt, resume=resume)
        if output_dir is None:
            sys.stdout.write(dump_all(doc for docs in manifests for doc in docs))
            continue
        for t, docs in zip(chunk, manifests):
            (output_dir / f"{attempt_name(t, attempt)}.yaml").write_text(dump_all(docs))
    if output_dir is not None:
        typer.echo(f"wrote {len(trials)} files to {output_dir}", err=True)


CHUNK = 500  # trials rendered and written at a time
