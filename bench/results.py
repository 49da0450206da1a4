"""Where the benchmarks write their figures: bench/results/<name>.json, with the commit they
were measured at (and whether the work tree had changes), the machine and the time."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def commit() -> tuple[str, bool]:
    repo = RESULTS.parent.parent
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True, text=True
    )
    return head.stdout.strip() or "unknown", bool(dirty.stdout.strip())


def save(name: str, figures: dict) -> Path:
    head, dirty = commit()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "benchmark": name,
                "commit": head,
                "dirty": dirty,
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                **figures,
            },
            indent=2,
            sort_keys=False,
        )
        + "\n"
    )
    print(f"figures written to {path.relative_to(RESULTS.parent.parent)} (commit {head}{', dirty' if dirty else ''})")
    return path


def scalars(run) -> dict:
    """A run's figures (a dataclass) without its timelines and tallies: what a results file keeps."""
    return {k: v for k, v in asdict(run).items() if not isinstance(v, list | dict)}
