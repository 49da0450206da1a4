"""Options shared by the commands that talk to a cluster (kubectl's spelling)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

KubeconfigOpt = Annotated[Optional[str], typer.Option("--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")]
ContextOpt = Annotated[Optional[str], typer.Option("--context", help="The kubeconfig context to use.")]
NamespaceOpt = Annotated[Optional[str], typer.Option("-n", "--namespace", help="Namespace for the study's objects (default: the study's).")]
