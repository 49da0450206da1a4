"""Closed-loop search on the testbed, side by side in one run: does choosing trials from
results (TPE) beat random and Sobol on the same GPU budget, does pruning save GPU-hours,
and does stratctl's TPE, running gangs on a real scheduler, do as well as Optuna's own
in-process `optimize(n_jobs=k)`?

The objective is the six-hump camel function of the trial's two parameters (minimum
-1.0316), rendered into each trial's result (the fake trial's termination message), so
it is known exactly. Each study runs `--budget` trials, `--parallel` at a time:

  search    tpe, gp, random and quasi-random (Sobol), `--seeds` seeds each: the best value
            after the budget, and the trials and GPU-seconds until the regret first fell
            below `--regret` (the median over seeds);
  pruning   tpe with and without a median pruner, trials reporting a learning curve
            (`loss_t = f + 2 / (t + 1)`, one step a second, `--steps` steps, through
            stratctl's report function): GPU-seconds the budget took, the best value, and
            the GPU-seconds until the regret first fell below `--regret`;
  anchor    Optuna's TPESampler (same options, same seeds, same budget) in process with
            `optimize(n_jobs=parallel)`: the best value, beside stratctl's tpe.

    python bench/search_bench.py [--budget 24] [--parallel 4] [--seeds 3] [--only all|search|pruning]

Figures to stdout and bench/results/search.json (search-<only>.json with --only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import save
from bench.testbed import testbed_target
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, POD, VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.search.intermediate import report

MINIMUM = -1.031628
INF = float("inf")  # trials or GPU-seconds to a regret never reached within the budget


def camel(x: float, y: float) -> float:
    return (4 - 2.1 * x**2 + x**4 / 3) * x**2 + x * y + (-4 + 4 * y**2) * y**2


CAMEL = (
    "((4 - 2.1 * params.x ** 2 + params.x ** 4 / 3) * params.x ** 2 + params.x * params.y"
    " + (-4 + 4 * params.y ** 2) * params.y ** 2)"
)


def study_text(name: str, namespace: str, kind: str, seed: int, budget: int, parallel: int, pruned: bool | None) -> str:
    """`pruned`: None for a study whose trials report nothing; False/True with reports, without/with a pruner."""
    objective = "objective: {metric: loss, direction: minimize}\n"
    pruner = "pruner: {kind: median, startup_trials: 4, warmup_steps: 1}\n" if pruned else ""
    duration = "2s" if pruned is not None else "4s"  # reporting trials end 2 s after their last report
    strategy = f"{{kind: {kind}, trials: {budget}, seed: {seed}}}"
    return (
        f"name: {name}\nnamespace: {namespace}\npriority_class: stratctl-low\n"
        "space:\n  x: {type: uniform, low: -3, high: 3}\n  y: {type: uniform, low: -2, high: 2}\n"
        f"strategy: {strategy}\n{objective}{pruner}"
        "trial:\n  image: stratctl.invalid/fake-trial:0\n  annotations:\n"
        f"    testbed.stratctl.io/run-duration: {duration}\n"
        f"    testbed.stratctl.io/termination-message: '{{\"loss\": {{{{ {CAMEL} | round(6) }}}}}}'\n"
        "  resources: {requests: {nvidia.com/gpu: 1, cpu: 100m}, limits: {nvidia.com/gpu: 1}}\n"
        "  tasks: [{name: worker, replicas: 1}]\n"
        f"throttle: {{qps: 50, burst: 20, parallelism: {{min: 1, initial: {parallel}, max: {parallel}}}}}\n"
    )


class Curves:
    """Plays the trials' part: each running pod of the study reports one step a second."""

    def __init__(self, admin: Cluster, target, study: str, steps: int, tmp: Path):
        self.admin, self.target, self.study, self.steps, self.tmp = admin, target, study, steps, tmp
        self.done: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            pods, _ = self.admin.list(POD, label_selector=f"{labels.STUDY}={self.study}")
            for pod in pods:
                if (pod.get("status") or {}).get("phase") != "Running":
                    continue
                name = pod["metadata"]["name"]
                step = self.done.get(name, 0)
                if step >= self.steps:
                    continue
                params = json.loads(pod["metadata"]["annotations"][labels.PARAMS])
                value = camel(params["x"], params["y"]) + 2 / (step + 1)
                try:
                    report(
                        step,
                        {"loss": value},
                        pod=name,
                        namespace=self.target.namespace,
                        flush=True,
                        kubeconfig=self.target.kubeconfig,
                        context=self.target.admin_context,
                        path=str(self.tmp / name),
                    )
                except Exception:  # a pod pruned meanwhile is gone
                    pass
                self.done[name] = step + 1
            self.stop.wait(1.0)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def run_study(target, admin: Cluster, text: str, name: str, tmp: Path, steps: int | None) -> dict:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    command = [
        sys.executable,
        "-m",
        "stratctl",
        "submit",
        str(path),
        "-o",
        "json",
        "--poll-interval",
        "1",
        "--kubeconfig",
        target.kubeconfig,
        "--context",
        target.admin_context,
    ]
    started = time.perf_counter()
    if steps:
        with Curves(admin, target, name, steps, tmp):
            done = subprocess.run(command, capture_output=True, text=True)
    else:
        done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    status = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "stratctl",
                "status",
                name,
                "-o",
                "json",
                "-n",
                target.namespace,
                "--kubeconfig",
                target.kubeconfig,
                "--context",
                target.admin_context,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    # every strategy's trials as status shows them (a random study keeps no `told` key): in the
    # order they were created (index), the best succeeded value so far and the GPU time spent
    rows = sorted(status["trials"], key=lambda t: t["index"] if t["index"] is not None else 10**9)
    curve, spent, best = [], 0.0, float("inf")
    for row in rows:
        spent += row["gpu_seconds"]
        value = (row.get("result") or {}).get("loss")
        if row["state"] == "succeeded" and isinstance(value, int | float):
            best = min(best, value)
        curve.append((best, spent))
    delete(admin, name)
    return {
        "seconds": seconds,
        "curve": curve,
        "best": best,
        "trials": len(rows),
        "gpu_seconds": status["studies"][0]["gpu_hours"] * 3600,
        "pruned": sum(1 for row in rows if row["state"] == "pruned"),
    }


def delete(admin: Cluster, name: str) -> None:
    for kind in (VOLCANO_JOB, CONFIGMAP):
        for item in admin.list(kind, label_selector=f"{labels.STUDY}={name}")[0]:
            admin.delete(kind, item["metadata"]["name"])


def to_regret(curve: list[tuple[float, float]], regret: float) -> tuple[int | None, float | None]:
    for i, (best, spent) in enumerate(curve):
        if best - MINIMUM <= regret:
            return i + 1, spent
    return None, None


def optuna_anchor(seed: int, budget: int, parallel: int) -> float:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True, group=True)
    study = optuna.create_study(sampler=sampler)
    study.optimize(
        lambda t: camel(t.suggest_float("x", -3, 3), t.suggest_float("y", -2, 2)), n_trials=budget, n_jobs=parallel
    )
    return study.best_value


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--regret", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument(
        "--only",
        choices=("all", "search", "pruning"),
        default="all",
        help="search: the strategies; pruning: tpe with and without the pruner",
    )
    parser.add_argument(
        "--strategies",
        default="tpe,gp,random,quasi-random",
        help="compared side by side (gp needs the [gp] extra: PyTorch)",
    )
    args = parser.parse_args()
    strategies = [k for k in args.strategies.split(",") if k] if args.only != "pruning" else []
    if "gp" in strategies:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("gp left out: PyTorch is not installed (pip install 'stratctl[gp]')", file=sys.stderr)
            strategies.remove("gp")
    target = testbed_target()
    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    stamp = str(int(time.time()))[-5:]
    results: dict[str, list[dict]] = {
        **{k: [] for k in strategies},
        **({"tpe-reporting": [], "tpe-pruned": []} if args.only != "search" else {}),
    }
    anchors = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        for seed in range(1, args.seeds + 1):
            # the studies of one seed run at once (the testbed has GPUs for all of them), so the
            # figures are per trial, not per wall-clock second
            runs = {}
            for kind in strategies:
                name = f"sb-{kind[:2]}{seed}-{stamp}"
                runs[kind] = (
                    study_text(name, target.namespace, kind, seed, args.budget, args.parallel, None),
                    name,
                    None,
                )
            for pruned in (False, True) if args.only != "search" else ():
                name = f"sb-{'pr' if pruned else 'rp'}{seed}-{stamp}"
                runs["tpe-pruned" if pruned else "tpe-reporting"] = (
                    study_text(name, target.namespace, "tpe", seed, args.budget, args.parallel, pruned),
                    name,
                    args.steps,
                )
            with ThreadPoolExecutor(len(runs)) as pool:
                done = {
                    key: pool.submit(run_study, target, admin, text, name, tmpdir, steps)
                    for key, (text, name, steps) in runs.items()
                }
                for key, future in done.items():
                    results[key].append(future.result())
            print(f"seed {seed}: " + ", ".join(f"{k} {results[k][-1]['best']:.4f}" for k in runs), flush=True)
            if "tpe" in strategies:
                anchors.append(optuna_anchor(seed, args.budget, args.parallel))
    admin.close()

    print(
        f"\nsix-hump camel (minimum {MINIMUM}), budget {args.budget} trials, {args.parallel} in flight, "
        f"{args.seeds} seeds; median over seeds (a seed that never reached the regret counts as beyond the budget)\n"
    )
    print(f"{'strategy':28} {'best':>9} {'trials to regret ≤ ' + str(args.regret):>24} {'GPU-s to it':>12}")
    summary = {}
    shown = lambda v, f: "-" if v is None else (f">{args.budget}" if v == INF else format(v, f))  # noqa: E731
    for kind, runs in results.items():
        reach = [to_regret(r["curve"], args.regret) for r in runs]
        summary[kind] = {
            "best": median([r["best"] for r in runs]),
            "trials_to_regret": median([INF if t is None else t for t, _ in reach]),
            "gpu_seconds_to_regret": median([INF if g is None else g for _, g in reach]),
            "gpu_seconds": median([r["gpu_seconds"] for r in runs]),
            "reached": sum(1 for t, _ in reach if t is not None),
        }
        s = summary[kind]
        print(
            f"{kind:28} {s['best']:9.4f} {shown(s['trials_to_regret'], '.1f'):>16} "
            f"({s['reached']}/{args.seeds} reached) {shown(s['gpu_seconds_to_regret'], '.0f'):>8}"
        )
    pruning = None
    if "tpe-pruned" in summary:
        plain, pruned = summary["tpe-reporting"], summary["tpe-pruned"]
        pruning = {
            "gpu_seconds_without": plain["gpu_seconds"],
            "gpu_seconds_with": pruned["gpu_seconds"],
            "saved": 1 - pruned["gpu_seconds"] / plain["gpu_seconds"],
            "gpu_seconds_to_regret_without": plain["gpu_seconds_to_regret"],
            "gpu_seconds_to_regret_with": pruned["gpu_seconds_to_regret"],
            "best_without": plain["best"],
            "best_with": pruned["best"],
        }
        to = pruning["gpu_seconds_to_regret_with"], pruning["gpu_seconds_to_regret_without"]
        pruning["saved_to_regret"] = 1 - to[0] / to[1] if INF not in to else None
        print(
            f"\npruning (tpe, trials reporting {args.steps} steps): the budget took {plain['gpu_seconds']:.0f} GPU-s "
            f"without, {pruned['gpu_seconds']:.0f} with the median pruner ({pruning['saved'] * 100:.0f}% saved), "
            f"best {plain['best']:.4f} and {pruned['best']:.4f}; to regret ≤ {args.regret}: {shown(to[1], '.0f')} "
            f"and {shown(to[0], '.0f')} GPU-s"
            + (
                f" ({pruning['saved_to_regret'] * 100:.0f}% saved; target ≥ 30%)"
                if pruning["saved_to_regret"] is not None
                else ""
            )
        )
    if anchors:
        print(
            f"anchor: Optuna's TPE in process, optimize(n_jobs={args.parallel}): best {median(anchors):.4f}; "
            f"stratctl's tpe: {summary['tpe']['best']:.4f}"
        )
    save(
        "search" if args.only == "all" else f"search-{args.only}",
        {
            "budget": args.budget,
            "parallel": args.parallel,
            "seeds": args.seeds,
            "regret": args.regret,
            "summary": {k: {x: (None if v == INF else v) for x, v in row.items()} for k, row in summary.items()},
            "pruning": pruning,
            "optuna_anchor_best": median(anchors) if anchors else None,
            "optuna_anchor_each": anchors,
            "runs": {
                k: [{x: r[x] for x in ("best", "trials", "gpu_seconds", "pruned", "seconds", "curve")} for r in v]
                for k, v in results.items()
            },
        },
    )


if __name__ == "__main__":
    main()
