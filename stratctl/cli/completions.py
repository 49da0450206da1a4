"""Generate the shell completion scripts in completions/ (`make completions`).

The scripts are Typer's, produced as `_STRATCTL_COMPLETE=source_bash stratctl` would
(Typer spells the instruction `source_bash`, not click 8's `bash_source`). They call
back into `stratctl` at completion time, so they stay valid as commands are added. Run as `python -m stratctl.cli.completions DIR`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
