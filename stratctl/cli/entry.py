"""The `stratctl` console script: answers a Tab through `fastcomplete` when it can,
otherwise runs the Typer application (`main`)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    instruction = os.environ.get("_STRATCTL_COMPLETE")
    if instruction:
        from stratctl.cli.fastcomplete import answer

        out = answer(instruction)
        if out is not None:
            sys.stdout.write(out + "\n")
            sys.exit(0)
    from stratctl.cli.main import main as run

    run()
