"""Generate the shell completion scripts in completions/ (`make completions`).

The scripts are Typer's, produced as `_STRATCTL_COMPLETE=source_bash stratctl` would
(Typer spells the instruction `source_bash`, not click 8's `bash_source`). They call
back into `stratctl` at completion time, so they stay valid as commands are added, and
complete study names (read from the cluster within about a second, `engine.names`) and
kubeconfig contexts through the callbacks here, imported only when a Tab asks. Run as
`python -m stratctl.cli.completions DIR`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer


def studies(ctx: typer.Context | None, incomplete: str) -> list[str]:
    """Completion of a STUDY argument: the studies of the namespace, read within ~1 s."""
    import time

    started = time.monotonic()  # the budget counts the imports too
    from stratctl.backends.kubernetes.verbs.shellnames import study_names

    params = ctx.params if ctx is not None else {}
    found = study_names(params.get("kubeconfig"), params.get("context"), params.get("namespace"), started=started)
    return [n for n in found if n.startswith(incomplete or "")]


def contexts(ctx: typer.Context | None, incomplete: str) -> list[str]:
    """Completion of --context: the contexts of the kubeconfig (no request to a cluster)."""
    from stratctl.backends.kubernetes.api.kubeconfig import context_names

    kubeconfig = (ctx.params if ctx is not None else {}).get("kubeconfig")
    return [n for n in context_names(kubeconfig) if n.startswith(incomplete or "")]


SHELLS = {"bash": "stratctl.bash", "zsh": "_stratctl", "fish": "stratctl.fish"}


def script(shell: str) -> str:
    env = {**os.environ, "_STRATCTL_COMPLETE": f"source_{shell}"}
    done = subprocess.run([sys.executable, "-m", "stratctl"], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for shell, name in SHELLS.items():
        path = directory / name
        path.write_text(script(shell))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "completions")):
        print(path)
