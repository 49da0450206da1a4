"""Benchmark: how long the commands an operator types every day take to start and answer.

    .venv/bin/python bench/startup_bench.py [--runs N] [--src DIR]

Each command runs as a fresh process N times (as a shell would start it), the commands taking
turns so that a busy moment of the machine spreads over all of them; the table shows the
median, min and max wall-clock time, the median's ratio to `python -c pass` (the
interpreter's own start-up, which no command can beat), and the median CPU time (user +
system) of the process, which other load on the machine disturbs less. Commands:
  - `stratctl --version` (the CLI imported, no command run),
  - `stratctl validate examples/demo.yaml` (target: median <= 0.3 s),
  - `stratctl validate examples/ppo-tuning.yaml`, the quasi-random (Sobol) example (<= 0.5 s),
  - one Tab of bash completion, `stratctl sta<Tab>` (<= 0.2 s), as the completion script in
    completions/ asks it: `_STRATCTL_COMPLETE=complete_bash COMP_WORDS=... stratctl`,
  - `stratctl status --context <Tab>` (<= 0.2 s), the contexts of $KUBECONFIG,
  - with STRATCTL_BENCH_KUBECONFIG set, `stratctl status -n $STRATCTL_BENCH_NAMESPACE
    (default stratctl-e2e) --context restricted <Tab>`: study names read from that cluster.
Commands run as `python -m stratctl`; `--src DIR` puts another checkout of stratctl first on
PYTHONPATH, to measure a version before a change with the same interpreter; repeated, the
checkouts take turns in the same rounds (`--src /tmp/before --src .`).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bytecode import compiled  # noqa: E402
from bench.results import save  # noqa: E402

TARGETS = {
    "validate demo": 0.3,
    "validate quasi-random": 0.5,
    "complete `sta<Tab>`": 0.2,
    "complete --context": 0.2,
    "complete study": 0.2,
}


def commands() -> list[tuple[str, list[str], dict[str, str]]]:
    stratctl = [sys.executable, "-m", "stratctl"]
    complete = {"_STRATCTL_COMPLETE": "complete_bash", "COMP_WORDS": "stratctl sta", "COMP_CWORD": "1"}
    study = []
    if os.environ.get("STRATCTL_BENCH_KUBECONFIG"):
        namespace = os.environ.get("STRATCTL_BENCH_NAMESPACE", "stratctl-e2e")
        study = [
            (
                "complete study",
                stratctl,
                {
                    **complete,
                    "KUBECONFIG": os.environ["STRATCTL_BENCH_KUBECONFIG"],
                    "COMP_WORDS": f"stratctl status -n {namespace} --context restricted ",
                    "COMP_CWORD": "6",
                },
            )
        ]
    return [
        ("python -c pass", [sys.executable, "-c", "pass"], {}),
        ("stratctl --version", [*stratctl, "--version"], {}),
        ("validate demo", [*stratctl, "validate", str(ROOT / "examples/demo.yaml")], {}),
        ("validate quasi-random", [*stratctl, "validate", str(ROOT / "examples/ppo-tuning.yaml")], {}),
        ("complete `sta<Tab>`", stratctl, complete),
        ("complete --context", stratctl, {**complete, "COMP_WORDS": "stratctl status --context ", "COMP_CWORD": "3"}),
        *study,
    ]


def measure(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="processes started per command")
    parser.add_argument(
        "--src",
        type=Path,
        action="append",
        help="a checkout of stratctl to measure instead of this one; repeat to compare "
        "checkouts in the same rounds (e.g. before and after a change)",
    )
    args = parser.parse_args()
    sources = [s.resolve() for s in args.src or [ROOT]]
    compiled(*(src / "stratctl" for src in sources))
    cases = commands()
    walls = {(src, name): [] for src in sources for name, _, _ in cases}
    cpus = {(src, name): [] for src in sources for name, _, _ in cases}
    for round_ in range(args.runs + 1):
        for src in sources:
            env = {**os.environ, "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            for name, argv, extra in cases:
                # run in the source directory: `python -m` puts the working directory first on sys.path
                wall, cpu = measure(argv, {**env, **extra}, src)
                if round_:  # the first round only warms the file cache
                    walls[src, name].append(wall)
                    cpus[src, name].append(cpu)
    print(
        f"stratctl start-up, {args.runs} processes per command, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    for src in sources:
        floor = statistics.median(walls[src, cases[0][0]])
        print(f"\nsource {src}")
        print(f"{'command':<24} {'median':>8} {'min':>8} {'max':>8} {'x pass':>7} {'cpu':>7}  target (median)")
        for name, _, _ in cases:
            times = walls[src, name]
            median = statistics.median(times)
            target = TARGETS.get(name)
            verdict = "" if target is None else f"<= {target:.1f} s {'ok' if median <= target else 'MISSED'}"
            print(
                f"{name:<24} {median:8.3f} {min(times):8.3f} {max(times):8.3f} {median / floor:7.1f} "
                f"{statistics.median(cpus[src, name]):7.3f}  {verdict}"
            )
    if sources == [ROOT]:  # this checkout alone: its figures are the ones to keep
        save(
            "startup",
            {
                "runs": args.runs,
                "commands": {
                    name: {
                        "median_seconds": round(statistics.median(walls[ROOT, name]), 3),
                        "min_seconds": round(min(walls[ROOT, name]), 3),
                        "median_cpu_seconds": round(statistics.median(cpus[ROOT, name]), 3),
                        "target_seconds": TARGETS.get(name),
                    }
                    for name, _, _ in cases
                },
            },
        )


if __name__ == "__main__":
    main()
