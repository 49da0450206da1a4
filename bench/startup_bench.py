"""Benchmark: how long the commands an operator types every day take to start and answer.

    .venv/bin/python bench/startup_bench.py [--runs N] [--src DIR]

Each command runs as a fresh process N times (as a shell would start it); the table shows
the median, min and max wall-clock time and the median's ratio to `python -c pass` (the
interpreter's own start-up, which no command can beat). Commands:
  - `stratctl --version` (the CLI imported, no command run),
  - `stratctl validate examples/demo.yaml` (target: median <= 0.3 s),
  - `stratctl validate examples/ppo-tuning.yaml`, the quasi-random (Sobol) example (<= 0.5 s),
  - one Tab of bash completion, `stratctl sta<Tab>` (<= 0.2 s), as the completion script in
    completions/ asks it: `_STRATCTL_COMPLETE=complete_bash COMP_WORDS=... stratctl`.
Commands run as `python -m stratctl`; `--src DIR` puts another checkout of stratctl first on
PYTHONPATH, to measure a version before a change with the same interpreter.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TARGETS = {"validate demo": 0.3, "validate quasi-random": 0.5, "complete `sta<Tab>`": 0.2}


def commands() -> list[tuple[str, list[str], dict[str, str]]]:
    stratctl = [sys.executable, "-m", "stratctl"]
    complete = {"_STRATCTL_COMPLETE": "complete_bash", "COMP_WORDS": "stratctl sta", "COMP_CWORD": "1"}
    return [
        ("python -c pass", [sys.executable, "-c", "pass"], {}),
        ("stratctl --version", [*stratctl, "--version"], {}),
        ("validate demo", [*stratctl, "validate", str(ROOT / "examples/demo.yaml")], {}),
        ("validate quasi-random", [*stratctl, "validate", str(ROOT / "examples/ppo-tuning.yaml")], {}),
        ("complete `sta<Tab>`", stratctl, complete),
    ]


def measure(argv: list[str], env: dict[str, str], runs: int, cwd: Path) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="processes started per command")
    parser.add_argument("--src", type=Path, help="a checkout of stratctl to measure instead of this one")
    args = parser.parse_args()
    base = {**os.environ}
    src = (args.src or ROOT).resolve()
    base["PYTHONPATH"] = str(src) + os.pathsep + base.get("PYTHONPATH", "")
    rows = []
    for name, argv, extra in commands():
        # run in the source directory: `python -m` puts the working directory first on sys.path
        measure(argv, {**base, **extra}, 1, src)  # warm the file cache and .pyc files
        times = measure(argv, {**base, **extra}, args.runs, src)
        rows.append((name, statistics.median(times), min(times), max(times)))
    floor = rows[0][1]
    print(f"stratctl start-up, {args.runs} processes per command, {os.cpu_count()} CPUs, "
          f"source {src}")
    print(f"{'command':<24} {'median':>8} {'min':>8} {'max':>8} {'x pass':>7}  target")
    for name, median, low, high in rows:
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target:.1f} s {'ok' if median <= target else 'MISSED'}"
        print(f"{name:<24} {median:8.3f} {low:8.3f} {high:8.3f} {median / floor:7.1f}  {verdict}")


if __name__ == "__main__":
    main()
