"""stratctl at 100,000 trials: render, plan, submit --detach and status, each as the process
a user runs, with its wall time, trials/s and peak memory (ru_maxrss).

  offline   `render` and `plan` of the same study at --small and --trials trials, and
            `submit --dry-run client` (load, expand, render and check every trial): memory
            is flat when the peak RSS grows far less than the trial count;
  submit    `submit --detach --qps 0` of --small, then --trials gangs (the study of bench/submit_bench.py:
            two 8-GPU pods a gang in the testbed's 16-GPU `capped` queue, which preflight
            accepts) that the paused scheduler never places;
  status    `status STUDY` (table) and `status STUDY -o json` beside `kubectl get` and
            `kubectl get -o json` of the same jobs, interleaved, --repeat rounds.

The local testbed's Volcano scheduler is paused for the whole run (bench/testbed.py:
scheduler_paused): the gangs stay pending, and 100,000 of them would make it spend the
machine's CPU on them (on a cluster given by kubeconfig, one gang at a time runs). At the
end the local testbed is restarted fresh (deleting 100,000 jobs and their PodGroups takes
the garbage collector far longer than a restart); a cluster given by
STRATCTL_TEST_KUBECONFIG gets `kubectl delete` instead (--keep: neither).

    python bench/scale_bench.py [--trials 100000] [--small 10000] [--repeat 2] [--keep]
                                [--parts offline,submit,status]

Figures to stdout and bench/results/scale.json (scale-<N>.json for another --trials).
Targets: flat memory; status within 2x `kubectl get` of the same jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bytecode import compiled
from bench.results import save
from bench.status_bench import run
from bench.submit_bench import study_text
from bench.testbed import REPO, scheduler_paused, testbed_target
from stratctl import labels


def timed(argv: list[str], env: dict, trials: int, stdout=subprocess.DEVNULL) -> dict:
    """One run of a command as a process: seconds, trials/s, peak RSS."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(argv[:6])} failed ({code}): {err.decode()[-2000:]}")
    return {
        "seconds": round(seconds, 2),
        "trials_per_second": round(trials / seconds),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def status_figures(target, name: str, env: dict, ctx: list[str], repeat: int) -> dict:
    """`status` of the large study beside `kubectl get` of its jobs, interleaved."""
    status = [sys.executable, "-m", "stratctl", "status", name, "-n", target.namespace, *ctx]
    kubectl = [
        target.kubectl or "kubectl",
        "-n",
        target.namespace,
        *ctx,
        "get",
        "jobs.batch.volcano.sh",
        "-l",
        f"{labels.STUDY}={name}",
    ]
    commands = {
        "stratctl status (table, 50 rows)": (status, {**env, "COLUMNS": "200"}),
        "stratctl status -o json": (status + ["-o", "json"], env),
        "kubectl get": (kubectl, env),
        "kubectl get -o json": (kubectl + ["-o", "json"], env),
    }
    rounds = [{k: run(argv, e, 1) for k, (argv, e) in commands.items()} for _ in range(repeat)]
    out = {}
    for k in commands:
        runs = [r[k] for r in rounds]
        out[k] = {
            "seconds": round(statistics.median(r["seconds"] for r in runs), 2),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "output_bytes": runs[-1]["output_bytes"],
        }
        print(f"{k}: {out[k]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000, help="the offline commands also at this size")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="leave the jobs in the cluster")
    parser.add_argument(
        "--parts", default="offline,submit,status", help="which parts to run (status needs submit's jobs)"
    )
    args = parser.parse_args()
    compiled()
    parts = set(args.parts.split(","))

    target = testbed_target()
    ns = target.namespace
    env = {**os.environ, "KUBECONFIG": target.kubeconfig}
    ctx = ["--context", target.admin_context] if target.admin_context else []
    stratctl = [sys.executable, "-m", "stratctl"]
    results: dict = {"trials": args.trials}
    name = f"scale-{args.trials}"
    with tempfile.TemporaryDirectory() as tmp, scheduler_paused(target) as paused:
        results["scheduler_paused"] = paused
        files = {}
        for n in (args.small, args.trials):
            files[n] = Path(tmp) / f"scale-{n}.yaml"
            files[n].write_text(study_text(f"scale-{n}", ns, n))
        offline = {}
        for n, path in files.items() if "offline" in parts else ():
            offline[n] = {
                "render": timed(stratctl + ["render", str(path)], env, n),
                "plan": timed(stratctl + ["plan", str(path)], env, n),
                "submit --dry-run client": timed(stratctl + ["submit", str(path), "--dry-run", "client", *ctx], env, n),
            }
            print(
                f"{n:>7} trials: "
                + "; ".join(
                    f"{k} {v['seconds']} s ({v['trials_per_second']}/s, {v['peak_rss_mib']} MiB)"
                    for k, v in offline[n].items()
                ),
                flush=True,
            )
        results["offline"] = {str(n): v for n, v in offline.items()}
        submits = {}
        for n, path in files.items() if "submit" in parts else ():
            submits[n] = timed(stratctl + ["submit", str(path), "--detach", "--qps", "0", *ctx], env, n)
            print(f"submit --detach --qps 0 of {n}: {submits[n]}", flush=True)
        results["submit --detach --qps 0"] = {str(n): v for n, v in submits.items()}
        if "status" in parts:
            results.update(status_figures(target, name, env, ctx, args.repeat))
    ratios = {}
    if "kubectl get" in results:
        ratios.update(
            {
                "status_table_vs_kubectl_get": round(
                    results["stratctl status (table, 50 rows)"]["seconds"] / results["kubectl get"]["seconds"], 2
                ),
                "status_json_vs_kubectl_get": round(
                    results["stratctl status -o json"]["seconds"] / results["kubectl get"]["seconds"], 2
                ),
                "status_json_vs_kubectl_get_json": round(
                    results["stratctl status -o json"]["seconds"] / results["kubectl get -o json"]["seconds"], 2
                ),
            }
        )
    growth = {
        **{k: (offline[args.small][k], offline[args.trials][k]) for k in offline.get(args.small, {})},
        **({"submit --detach --qps 0": (submits[args.small], submits[args.trials])} if submits else {}),
    }
    ratios.update(
        {
            f"{k} peak RSS, {args.trials} vs {args.small} trials": round(b["peak_rss_mib"] / a["peak_rss_mib"], 2)
            for k, (a, b) in growth.items()
        }
    )
    results["ratios"] = ratios
    print(json.dumps(ratios, indent=2))
    suffix = "" if parts == {"offline", "submit", "status"} else "-" + "-".join(sorted(parts))
    save(("scale" if args.trials == 100_000 else f"scale-{args.trials}") + suffix, results)
    if args.keep:
        return
    if os.environ.get("STRATCTL_TEST_KUBECONFIG"):
        subprocess.run(
            [
                target.kubectl or "kubectl",
                "--kubeconfig",
                target.kubeconfig,
                "-n",
                ns,
                *ctx,
                "delete",
                "jobs.batch.volcano.sh,configmaps",
                "-l",
                f"{labels.STUDY} in (scale-{args.small},{name})",
                "--wait=false",
            ],
            check=False,
            capture_output=True,
        )
    else:
        subprocess.run(
            ["bash", str(REPO / "testbed" / "up.sh")],
            env={**os.environ, "STRATCTL_TESTBED_FRESH": "1"},
            check=True,
            stdout=subprocess.DEVNULL,
        )


if __name__ == "__main__":
    main()
