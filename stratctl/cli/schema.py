"""`stratctl schema`: the JSON Schema of study files, for editors and CI."""

from __future__ import annotations

import json

import typer


def schema() -> None:
    """Print the JSON Schema of the study file, for editors (the YAML language server)."""
    from stratctl.core.spec import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))
