"""Benchmarks time stratctl as a user has it installed: pip writes every module's bytecode
at install time, so no command compiles its own source while it is timed. A checkout whose
sources changed since `make venv` holds stale bytecode, and under PYTHONDONTWRITEBYTECODE
(set by some shells and CI images) Python never writes it back: each timed process would
compile every changed module again (tens of milliseconds of start-up that no user pays).
`compiled()` writes it first."""

from __future__ import annotations

import compileall
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compiled(*sources: str | Path) -> None:
    """Bring the bytecode of stratctl (and of each other checkout in `sources`) up to date."""
    for source in (ROOT / "stratctl", *sources):
        if not compileall.compile_dir(str(source), quiet=1):
            raise SystemExit(f"cannot compile {source}")
