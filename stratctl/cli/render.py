"""`stratctl render FILE`: what each trial would be submitted as, as its backend submits it."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer


class Format(StrEnum):
    yaml = "yaml"
    json = "json"
    script = "script"


def render(
    file: Annotated[Path, typer.Argument(help="The study file.", show_default=False)],
    output_dir: Annotated[
        Path | None,
        typer.Option("-o", "--output-dir", help="Write one FILE per trial into this directory instead of stdout."),
    ] = None,
    attempt: Annotated[
        int, typer.Option("--attempt", min=0, help="Render this attempt number (0 = first submission).")
    ] = 0,
    resume: Annotated[bool, typer.Option("--resume", help="Render as a resumed attempt (STRATCTL_RESUME=1).")] = False,
    trial: Annotated[
        list[str] | None, typer.Option("--trial", "-t", help="Only this trial (name or index); repeatable.")
    ] = None,
    form: Annotated[
        Format | None,
        typer.Option(
            "--format",
            help=(
                "yaml or json; script (Slurm's sbatch script). Default: the backend's own (Kubernetes yaml, Slurm "
                "script, YARN json)."
            ),
        ),
    ] = None,
) -> None:
    """Render what each trial would be sent as, without sending it.

    Kubernetes manifests, Slurm sbatch scripts or YARN application requests, as the study's
    backend sends them.
    """
    from stratctl.backends.preview import preview, suffix
    from stratctl.core.merging import checked_by_render
    from stratctl.core.space import expand
    from stratctl.core.spec import load_study
    from stratctl.errors import UsageError

    study = load_study(file)
    shown = preview(study)
    chosen = shown.form(form.value if form else None)
    trials = expand(study)
    if trial:
        wanted = set(trial)
        trials = [t for t in trials if t.name in wanted or str(t.index) in wanted]
        if not trials:
            raise UsageError(f"no trial of study {study.name} matches {', '.join(sorted(wanted))}")
    for note in shown.notes:
        typer.echo(f"note: {note}", err=True)
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
    if attempt == 0 and not trial and not resume and checked_by_render(study):  # sent as blocks
        from stratctl.backends.launch import prepare
        from stratctl.backends.preview import blocks

        prepare(study)  # trials that cannot share a block: refused here as by submit

        sent = blocks(study, shown.renderer, trials)
        typer.echo(
            f"note: merge: auto: {len(trials)} trials as {len(sent)} block(s), each a ConfigMap of the trials' "
            "scripts and an Indexed Job (parallelism: where the adaptive target starts); --trial shows a trial "
            "as a Job of its own, as its next attempts are sent",
            err=True,
        )
        for s in sent:
            if output_dir is None:
                sys.stdout.write(_text([s], chosen))
            else:
                (output_dir / f"{s.name}{suffix(chosen)}").write_text(_text([s], chosen))
        if output_dir is not None:
            typer.echo(f"wrote {len(sent)} files to {output_dir}", err=True)
        return
    # in chunks, each written before the next is rendered: memory stays flat however many trials
    for start in range(0, len(trials), CHUNK):
        submissions = shown.render(trials[start : start + CHUNK], attempt=attempt, resume=resume)
        if output_dir is None:
            sys.stdout.write(_text(submissions, chosen))
            continue
        for s in submissions:
            (output_dir / f"{s.name}{suffix(chosen)}").write_text(_text([s], chosen))
    if output_dir is not None:
        typer.echo(f"wrote {len(trials)} files to {output_dir}", err=True)


def _text(submissions: list[Any], form: str) -> str:
    """Submissions in `form`: their scripts, YAML documents or JSON objects (one a document)."""
    if form == "script":
        return "".join(s.script for s in submissions)
    docs = [doc for s in submissions for doc in (s.data if isinstance(s.data, list) else [s.data])]
    if form == "json":
        import json

        return "".join(json.dumps(doc, indent=2, ensure_ascii=False) + "\n" for doc in docs)
    from stratctl.view.yamlout import dump_all

    return dump_all(docs, blocks=any(s.script is not None for s in submissions))


CHUNK = 500  # trials rendered and written at a time
