"""Two revisions of stratctl as users run them, measured side by side, interleaved.

    python bench/compare.py REV_BEFORE [REV_AFTER=HEAD] [--rounds 3] [--quick]
    python bench/compare.py --reprint     (the saved comparison's table again)

Each revision is exported with `git archive`, built into a wheel (`pip wheel`) and installed
with its dependencies into a venv of its own, ~/.cache/stratctl/bench-venvs/<commit> (reused
when it is already there). Every timed run is that venv's installed `stratctl` command as a
process, start-up included. The benchmarks' harness (the raw API ceiling, the cluster's
setup, checks and clean-up) is this checkout's bench/ code: it is the same for both sides,
only the `stratctl` command differs.

On the local Kubernetes testbed (bench/testbed.py), `--rounds` rounds, the two revisions
alternating before, after, before, after within every benchmark:

  submit    `stratctl submit --detach --qps 0` of 500 trials (bench/submit_bench.py), each
            run next to a run of the raw API ceiling (concurrent keep-alive HTTPS POSTs of
            the same manifests): seconds, and stratctl's rate over the ceiling's;
  status    `stratctl status -o json` and the table (no submit loop following the study) at
            10,000 trials (bench/status_bench.py), the Volcano scheduler paused while timed:
            seconds and peak RSS;
  adaptive  the adaptive makespan experiment (bench/adaptive_experiment.py, the `adaptive`
            strategy: three `stratctl submit` processes, gangs of 2, 3 and 4 GPUs, against
            the competing high-priority load): makespan and its ratio to the lower bound.
            --quick: 36 trials with durations and the competing schedule at half scale
            (4-12 s trials) instead of 100 trials at full scale.

The benchmarks run one after the other (status's 10,000 unschedulable gangs would load the
scheduler under the other two), each of them interleaved; `--abba` runs after first in every
second round, so a slot that is systematically loaded falls on both sides. The table gives,
per figure, the median and the spread (min-max) of each side, the ratio of the medians
(after / before) and the ratios within each round (after / the before run next to it). The
figures go to bench/results/compare.json with both commits and the date, after each
benchmark; a run of some benchmarks (`--only`) with the same two commits keeps the others'.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import adaptive_experiment, status_bench, submit_bench
from bench.results import save
from bench.testbed import scheduler_paused, testbed_target
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, PODGROUP, VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.objects.record import record_name

REPO = Path(__file__).resolve().parent.parent
VENVS = Path.home() / ".cache" / "stratctl" / "bench-venvs"
SIDES = ("before", "after")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()


def installed(sha: str) -> Path:
    """The bin directory of a venv holding the wheel of commit `sha`, built and installed when
    missing (a venv without its `.complete` mark is a broken earlier attempt: made again)."""
    where = VENVS / sha
    if (where / ".complete").exists():
        return where / "bin"
    shutil.rmtree(where, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, dist = Path(tmp) / "src", Path(tmp) / "dist"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", sha], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check", str(src)]
            + ["-w", str(dist)],
            check=True,
        )
        (wheel,) = dist.glob("stratctl-*.whl")
        subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
        # with bytecode, as pip installs for users: no timed run compiles its own modules
        subprocess.run(
            [str(where / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
            check=True,
            env=env,
        )
        print(f"  {sha[:7]}: wheel built and installed in {time.monotonic() - started:.0f} s", flush=True)
    (where / ".complete").write_text(wheel.name + "\n")
    return where / "bin"


def check_install(bin_dir: Path) -> str:
    """Where the venv's python finds stratctl: must be the venv, never this checkout."""
    found = subprocess.run(
        [str(bin_dir / "python"), "-c", "import stratctl; print(stratctl.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd="/",
    ).stdout.strip()
    assert found.startswith(str(bin_dir.parent)), found
    subprocess.run([str(bin_dir / "stratctl"), "--help"], check=True, capture_output=True)
    return found


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def order(rnd: int, abba: bool) -> tuple[str, ...]:
    """The sides of round `rnd`: before, after; with `abba`, after first in every second round
    (a slot that is loaded, e.g. right after the other side's clean-up, falls on both sides)."""
    return SIDES[::-1] if abba and rnd % 2 else SIDES


def compared(before: list[float], after: list[float]) -> dict:
    """Each side's median and spread, the ratio of the medians, and the ratio within each
    round (after / the before run next to it: the machine's drift between rounds cancels)."""
    return {
        "before": spread(before),
        "after": spread(after),
        "ratio": statistics.median(after) / statistics.median(before),
        "ratio_by_round": spread([a / b for a, b in zip(after, before)]),
    }


def table(rows: dict) -> None:
    print(
        f"{'figure':32} {'before: median [min-max]':>26} {'after: median [min-max]':>26} {'after/before':>13} "
        f"{'by round: median [min-max]':>28}"
    )
    for name, row in rows.items():
        b, a, r = (
            f"{x['median']:.2f} [{x['min']:.2f}-{x['max']:.2f}]"
            for x in (row["before"], row["after"], row["ratio_by_round"])
        )
        print(f"{name:32} {b:>26} {a:>26} {row['ratio']:13.2f} {r:>28}")


def reprint(path: Path) -> None:
    """The table of a saved comparison again, from its runs (ratios by round added to it)."""
    data = json.loads(path.read_text())
    data["figures"] = {
        name: compared(row["before"]["runs"], row["after"]["runs"]) for name, row in data["figures"].items()
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"before {data['before']['commit'][:7]}, after {data['after']['commit'][:7]}")
    for b, run in data.get("benchmarks", {}).items():
        print(f"  {b}: {run}")
    print()
    table(data["figures"])


def bench_submit(
    target, commands: dict[str, list[str]], rounds: int, trials: int, figures: dict, load: list, abba: bool = False
) -> None:
    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    creds = submit_bench.credentials(target.kubeconfig, target.admin_context)
    stamp = str(int(time.time()))[-6:]
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        for rnd in range(rounds):
            for side in order(rnd, abba):
                raw = submit_bench.time_raw(target, admin, creds, tmpdir, f"cmp-r{side[0]}{rnd}-{stamp}", trials, 32)
                took = submit_bench.time_stratctl(
                    commands[side], target, admin, tmpdir, f"cmp-s{side[0]}{rnd}-{stamp}", trials, 32
                )
                load.append(os.getloadavg()[0])
                figures["submit seconds"][side].append(took)
                figures["submit raw ceiling seconds"][side].append(raw)
                figures["submit rate / raw ceiling"][side].append(raw / took)
                print(f"  submit round {rnd + 1} {side}: {took:.2f} s (raw ceiling {raw:.2f} s)", flush=True)
    admin.close()


def bench_status(
    target, commands: dict[str, list[str]], rounds: int, trials: int, figures: dict, load: list, abba: bool = False
) -> None:
    ns = target.namespace
    cluster = Cluster.connect(target.kubeconfig, target.admin_context, ns, pool_size=64)
    env = {**os.environ, "KUBECONFIG": target.kubeconfig}
    table_env = {**env, "COLUMNS": "200"}
    try:
        made, pgs = status_bench.populate(cluster, trials, ns)
        print(f"  status: {trials} jobs made in {made:.0f} s, {pgs} PodGroups", flush=True)
        # a study no submit loop follows: status lists every job
        cluster.patch(CONFIGMAP, record_name(status_bench.STUDY), {"data": {"summary": None}}, ns)
        with scheduler_paused(target):
            for rnd in range(rounds):
                for side in order(rnd, abba):
                    argv = status_bench.status_argv(commands[side], target)
                    as_json = status_bench.run(argv + ["-o", "json"], env, 1)
                    table = status_bench.run(argv, table_env, 1)
                    load.append(os.getloadavg()[0])
                    figures["status -o json seconds"][side].append(as_json["seconds"])
                    figures["status table seconds"][side].append(table["seconds"])
                    figures["status -o json peak RSS MiB"][side].append(as_json["peak_rss_mib"])
                    figures["status table peak RSS MiB"][side].append(table["peak_rss_mib"])
                    print(
                        f"  status round {rnd + 1} {side}: -o json {as_json['seconds']:.2f} s "
                        f"({as_json['peak_rss_mib']:.0f} MiB, {as_json['output_bytes']} bytes), "
                        f"table {table['seconds']:.2f} s",
                        flush=True,
                    )
    finally:
        status_bench.delete_all(target)
        # the PodGroups would go with their jobs, but the garbage collector takes 10,000 of
        # them at about 12 a second on this machine: deleted here too, and waited for
        selector = f"{labels.STUDY}={status_bench.STUDY}"
        subprocess.run(
            [target.kubectl or "kubectl", "--kubeconfig", target.kubeconfig, "-n", ns]
            + (["--context", target.admin_context] if target.admin_context else [])
            + ["delete", "podgroups.scheduling.volcano.sh", "-l", selector, "--wait=false"],
            check=False,
            capture_output=True,
            timeout=900,
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and (
            cluster.list(VOLCANO_JOB, ns, label_selector=selector)[0]
            or cluster.list(PODGROUP, ns, label_selector=selector)[0]
        ):
            time.sleep(2)
        cluster.close()


def bench_adaptive(
    target, commands: dict[str, list[str]], rounds: int, quick: bool, figures: dict, load: list, abba: bool = False
) -> None:
    trials, scale = (36, 0.5) if quick else (100, 1.0)
    tag = str(int(time.time()))[-4:]
    for rnd in range(rounds):
        for side in order(rnd, abba):
            result = adaptive_experiment.measure(
                "adaptive",
                None,
                target,
                trials,
                7,
                f"{tag}{side[0]}{rnd}",
                duration=(round(8 * scale), round(24 * scale)),
                horizon=900 * scale,
                schedule_factory=lambda gpus, horizon: adaptive_experiment.competing_schedule(gpus, horizon, scale),
                stratctl=commands[side],
            )
            load.append(os.getloadavg()[0])
            assert result.succeeded == result.total == trials, (result.succeeded, result.total, trials)
            figures["adaptive makespan seconds"][side].append(result.makespan)
            figures["adaptive makespan / lower bound"][side].append(result.makespan / result.lower_bound)
            print(
                f"  adaptive round {rnd + 1} {side}: makespan {result.makespan:.1f} s, "
                f"bound {result.lower_bound:.1f} s, {result.succeeded}/{result.total} succeeded",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", nargs="?")
    parser.add_argument("after", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the adaptive experiment at 36 trials, half scale")
    parser.add_argument("--only", default="submit,status,adaptive", help="benchmarks to run, in this order")
    parser.add_argument("--submit-trials", type=int, default=500)
    parser.add_argument("--status-trials", type=int, default=10_000)
    parser.add_argument("--abba", action="store_true", help="after first in every second round")
    parser.add_argument("--reprint", action="store_true", help="print bench/results/compare.json's table again")
    args = parser.parse_args()
    if args.reprint:
        reprint(RESULT)
        return
    if not args.before:
        parser.error("REV_BEFORE is required")
    os.environ.pop("PYTHONPATH", None)  # the timed processes import their own venv's stratctl only

    revs = {
        side: git("rev-parse", "--verify", f"{rev}^{{commit}}") for side, rev in zip(SIDES, (args.before, args.after))
    }
    subjects = {side: git("log", "-1", "--format=%s", sha)[:100] for side, sha in revs.items()}
    bins = {}
    for side, sha in revs.items():
        print(f"{side}: {sha[:7]} {subjects[side]}", flush=True)
        bins[side] = installed(sha)
        check_install(bins[side])
    commands = {side: [str(b / "stratctl")] for side, b in bins.items()}

    target = testbed_target()
    names = {
        "submit": [
            "submit seconds",
            "submit raw ceiling seconds",
            "submit rate / raw ceiling",
        ],
        "status": [
            "status -o json seconds",
            "status table seconds",
            "status -o json peak RSS MiB",
            "status table peak RSS MiB",
        ],
        "adaptive": ["adaptive makespan seconds", "adaptive makespan / lower bound"],
    }
    chosen = args.only.split(",")
    figures = {name: {side: [] for side in SIDES} for b in chosen for name in names[b]}
    runs: dict[str, dict] = {}
    for b in chosen:
        print(f"{b} ...", flush=True)
        load: list[float] = []
        started = time.monotonic()
        if b == "submit":
            bench_submit(target, commands, args.rounds, args.submit_trials, figures, load, args.abba)
        elif b == "status":
            bench_status(target, commands, args.rounds, args.status_trials, figures, load, args.abba)
        elif b == "adaptive":
            bench_adaptive(target, commands, args.rounds, args.quick, figures, load, args.abba)
        runs[b] = {
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rounds": args.rounds,
            "order": "before/after, after/before, ... (--abba)" if args.abba else "before, after in every round",
            "load_average": {"min": min(load), "max": max(load), "median": statistics.median(load)},
            "minutes": round((time.monotonic() - started) / 60, 1),
            **{
                "submit": {"trials": args.submit_trials},
                "status": {"trials": args.status_trials},
                "adaptive": {"trials": 36, "time_scale": 0.5} if args.quick else {"trials": 100, "time_scale": 1.0},
            }[b],
        }
        # written after every benchmark: a failure later keeps what was measured
        report(revs, subjects, runs, {n: figures[n] for n in names[b]})


RESULT = REPO / "bench" / "results" / "compare.json"


def report(revs: dict, subjects: dict, runs: dict, figures: dict) -> None:
    """Print this benchmark's table and merge its figures into bench/results/compare.json (the
    other benchmarks' figures there are kept when they compare the same two commits)."""
    rows = {name: compared(sides["before"], sides["after"]) for name, sides in figures.items()}
    (b, run), *_ = reversed(runs.items())
    load = run["load_average"]
    print(
        f"\n{b}: before {revs['before'][:7]}, after {revs['after'][:7]}; {run['rounds']} rounds, {run['order']}; "
        f"load average {load['min']:.1f}-{load['max']:.1f} (median {load['median']:.1f}) on {os.cpu_count()} cores; "
        f"{run['minutes']:.0f} min\n"
    )
    table(rows)
    kept: dict = {"figures": {}, "benchmarks": {}}
    if RESULT.exists():
        old = json.loads(RESULT.read_text())
        same = (
            old.get("before", {}).get("commit") == revs["before"]
            and old.get("after", {}).get("commit") == revs["after"]
        )
        if same and isinstance(old.get("benchmarks"), dict):
            kept = old
    save(
        "compare",
        {
            "before": {"commit": revs["before"], "subject": subjects["before"]},
            "after": {"commit": revs["after"], "subject": subjects["after"]},
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "benchmarks": {**kept["benchmarks"], **runs},
            "figures": {**kept["figures"], **rows},
        },
    )


if __name__ == "__main__":
    main()
