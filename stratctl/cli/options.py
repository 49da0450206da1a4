"""Options shared by the commands that talk to a cluster (kubectl's spelling)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

KubeconfigOpt = Annotated[Optional[str], typer.Option("--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")]
ContextOpt = Annotated[Optional[str], typer.Option("--context", help="The kubeconfig context to use.")]
NamespaceOpt = Annotated[Optional[str], typer.Option("-n", "--namespace", help="Namespace for the study's objects (default: the study's).")]


def duration_option(text: str | None, flag: str) -> float | None:
    """Seconds from a duration option (`45s`, `30m`, `2h`, or plain seconds); None when not given."""
    from stratctl.errors import UsageError
    from stratctl.study.model import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(float(text) if text.replace(".", "", 1).isdigit() else text)
    except ValueError as e:
        raise UsageError(f"{flag} {text!r}: {e}") from None
