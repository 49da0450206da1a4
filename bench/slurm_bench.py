"""Slurm: stratctl against the way Slurm users throttle a sweep today, side by side on
the Slurm testbed (testbed/slurm/: 4 nodes × 4 fake GPUs), every method as a process.

Submission throughput, N trials of one GPU that sleep long (16 start, the rest pend):
  loop      a shell loop of N `sbatch` calls, one job each (what a sweep script does);
  array     one `sbatch --array=0-(N-1)`: one request for all N, the controller's ceiling;
  stratctl  `stratctl submit FILE --detach --qps 0 --parallelism static --max-inflight N`,
            one job per trial (`merge: off`), timed from exec to exit (start-up, render and
            the study's listing included);
  merged    the same with `merge: auto`: the trials as one job array (core/merging.py);
  start-up  `stratctl --version`, the command's own start-up, for scale.
Each runs `--repeat` times, interleaved (loop, array, stratctl, merged, ...); medians compared.

Makespan, M trials of one GPU that each sleep S seconds (the cluster holds 16 at once):
  array%K   `sbatch --array=0-(M-1)%K`, the static cap Slurm users set, for K = 4 (a
            cautious user) and 16 (a user who knows exactly how many GPUs are free);
  stratctl  `stratctl submit FILE` with the adaptive policy and no cap given, a job per trial;
  merged    the same with `merge: auto`: one array, its throttle following the adaptive target.
From the first submit to the last job's end (squeue's end times), and the GPU
utilisation over that span (busy GPU-seconds / (16 × makespan)).

Every run has its own job names; everything is cancelled after each run. Figures go to
stdout and bench/results/slurm.json with the commit they were measured at.

    python bench/slurm_bench.py [--trials 200] [--sweep 48] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import save

REPO = Path(__file__).resolve().parent.parent
GPUS = 16  # the testbed's: 4 nodes × 4


def slurm_env() -> dict[str, str]:
    given = os.environ.get("STRATCTL_TEST_SLURM_CONF")
    if given:
        return {**os.environ, "SLURM_CONF": given}
    subprocess.run(["bash", str(REPO / "testbed/slurm/packages.sh")], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(
        ["bash", str(REPO / "testbed/slurm/up.sh")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    env = dict(os.environ)
    for line in Path(out.strip().splitlines()[-1]).read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export ") :].split("=", 1)
            env[key] = value
    return env


ENV: dict[str, str] = {}


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env=ENV, capture_output=True, text=True, check=True, **kw)


def jobs(prefix: str) -> list[dict]:
    out = json.loads(run("squeue", "--json", "--all").stdout)["jobs"]
    return [j for j in out if str(j.get("name") or "").startswith(prefix)]


def cancel(prefix: str) -> None:
    ids = [str(j["job_id"]) for j in jobs(prefix) if j.get("job_state") in ("PENDING", "RUNNING", "COMPLETING")]
    if ids:
        run("scancel", *ids)


def study(path: Path, name: str, trials: int, seconds: float, parallelism: str = "", merge: bool = False) -> Path:
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        backend: slurm
        merge: {"auto" if merge else "off"}
        slurm: {{partition: research, time_limit: 10m}}
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
        strategy: {{kind: grid}}
        trial:
          command: ["sleep", "{seconds:g}"]
          resources: {{limits: {{nvidia.com/gpu: 1}}}}
          tasks: [{{name: worker, replicas: 1}}]
        {parallelism}
        """)
    )
    return path


def wait_ended(prefix: str, count: int, timeout: float = 900) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = jobs(prefix)
        ended = [j for j in seen if j.get("job_state") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")]
        if len(ended) >= count:
            return ended
        time.sleep(0.5)
    raise TimeoutError(f"{prefix}: {count} jobs did not end in {timeout}s")


# -- submission throughput --------------------------------------------------------------------


def submit_loop(n: int, tag: str) -> float:
    script = (
        f"for i in $(seq 1 {n}); do sbatch --parsable --job-name={tag}-$i --partition=research "
        f"--gpus-per-task=1 --ntasks=1 --output=/dev/null --wrap 'sleep 600' >/dev/null || exit 1; done"
    )
    started = time.perf_counter()
    run("bash", "-c", script)
    return time.perf_counter() - started


def submit_array(n: int, tag: str) -> float:
    started = time.perf_counter()
    run(
        "sbatch",
        "--parsable",
        f"--job-name={tag}",
        f"--array=0-{n - 1}",
        "--partition=research",
        "--gpus-per-task=1",
        "--ntasks=1",
        "--output=/dev/null",
        "--wrap",
        "sleep 600",
    )
    return time.perf_counter() - started


def startup() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "stratctl", "--version"], env=ENV, capture_output=True, check=True)
    return time.perf_counter() - started


def submit_stratctl(n: int, tag: str, workdir: Path, merge: bool = False) -> float:
    path = study(workdir / f"{tag}.yaml", tag, n, 600, merge=merge)
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stratctl",
            "submit",
            str(path),
            "--detach",
            "--qps",
            "0",
            "--parallelism",
            "static",
            "--max-inflight",
            str(n),
            "--workers",
            "8",
            "-o",
            "json",
        ],
        env=ENV,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or json.loads(done.stdout)["created"] != n:
        raise RuntimeError(f"stratctl submit: {done.stderr[-1000:]}")
    return elapsed


# -- makespan ---------------------------------------------------------------------------------


def span(ended: list[dict], started: float, seconds: float) -> dict:
    end = max(j["end_time"] for j in ended)
    makespan = end - started
    return {"makespan_s": round(makespan, 1), "gpu_utilisation": round(len(ended) * seconds / (GPUS * makespan), 3)}


def sweep_array(m: int, seconds: float, cap: int, tag: str) -> dict:
    started = time.time()
    run(
        "sbatch",
        "--parsable",
        f"--job-name={tag}",
        f"--array=0-{m - 1}%{cap}",
        "--partition=research",
        "--gpus-per-task=1",
        "--ntasks=1",
        "--output=/dev/null",
        "--wrap",
        f"sleep {seconds:g}",
    )
    return span(wait_ended(tag, m), int(started), seconds)


def sweep_stratctl(m: int, seconds: float, tag: str, workdir: Path, merge: bool = False) -> dict:
    path = study(workdir / f"{tag}.yaml", tag, m, seconds, merge=merge)
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "stratctl", "submit", str(path), "--poll-interval", "0.5", "-o", "json"],
        env=ENV,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
    )
    progress = json.loads(done.stdout)
    if done.returncode != 0 or progress["succeeded"] != m:
        raise RuntimeError(f"stratctl submit: {done.stderr[-1000:]}")
    return {**span(wait_ended(tag, m), int(started), seconds), "sbatch": progress["api_writes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="trials of the submission-throughput runs")
    parser.add_argument("--sweep", type=int, default=48, help="trials of the makespan runs")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of the submission runs")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each makespan trial runs")
    args = parser.parse_args()
    ENV.update(slurm_env())
    stamp = int(time.time()) % 100000
    figures: dict = {"trials": args.trials, "sweep": args.sweep, "seconds": args.seconds, "gpus": GPUS}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(
            f"submission of {args.trials} one-GPU jobs (16 run, the rest pend), wall seconds, median of "
            f"{args.repeat} interleaved runs:"
        )
        runs: dict[str, list[float]] = {"loop": [], "array": [], "stratctl": [], "merged": [], "start-up": []}
        for round_ in range(args.repeat):
            for method in runs:
                tag = f"bs{method}{stamp}r{round_}"
                try:
                    if method == "loop":
                        runs[method].append(submit_loop(args.trials, tag))
                    elif method == "array":
                        runs[method].append(submit_array(args.trials, tag))
                    elif method == "start-up":
                        runs[method].append(startup())
                    else:
                        runs[method].append(submit_stratctl(args.trials, tag, workdir, merge=method == "merged"))
                finally:
                    cancel(tag)
        for method, times in runs.items():
            seconds = statistics.median(times)
            figures[f"submit_{method}_s"] = round(seconds, 2)
            figures[f"submit_{method}_runs"] = [round(t, 2) for t in times]
            print(
                f"  {method:9} {seconds:6.2f} s  {args.trials / seconds:7.1f} jobs/s  (runs: "
                f"{', '.join(f'{t:.2f}' for t in times)})"
            )
        ratio = figures["submit_loop_s"] / figures["submit_stratctl_s"]
        figures["stratctl_vs_loop"] = round(ratio, 2)
        merged = figures["submit_stratctl_s"] / figures["submit_merged_s"]
        figures["merged_vs_stratctl"] = round(merged, 2)
        over = figures["submit_merged_s"] - figures["submit_start-up_s"]
        figures["merged_less_startup_vs_array"] = round(over / figures["submit_array_s"], 2)
        print(
            f"  stratctl {ratio:.2f}x the sbatch loop's throughput; merged {merged:.2f}x stratctl's; the one-request "
            f"array {figures['submit_array_s']:.2f} s is the ceiling (merged less its start-up: "
            f"{figures['merged_less_startup_vs_array']:.1f}x it)"
        )
        time.sleep(3)
        print(f"\nmakespan of {args.sweep} trials of {args.seconds:g}s on {GPUS} GPUs:")
        for method, cap in (("array%4", 4), ("array%16", 16), ("stratctl", None), ("merged", None)):
            tag = f"bm{method.replace('%', 'c')}{stamp}"
            try:
                result = (
                    sweep_stratctl(args.sweep, args.seconds, tag, workdir, merge=method == "merged")
                    if cap is None
                    else sweep_array(args.sweep, args.seconds, cap, tag)
                )
            finally:
                cancel(tag)
            figures[f"makespan_{method}"] = result
            print(f"  {method:9} {result['makespan_s']:6.1f} s  GPU utilisation {result['gpu_utilisation']:.0%}")
            time.sleep(3)
    save("slurm", figures)


if __name__ == "__main__":
    main()
