"""Trials of mixed shapes on fragmented GPUs: submit-all, a static cap and adaptive, side by side.

One study of 1-, 2-, 4- and 8-GPU trials (one pod each; durations drawn from a range) runs
to completion once per strategy and round, in one run, while another team's pods hold
GPUs on every node in uneven amounts (pinned to their nodes, as a running job's pods
are): at the start no node has 8 GPUs free, only holes of 1 to 7; the other team's pods
then end one node at a time, spread over `--hold` seconds, and whole nodes free up while
trials of every size still wait.

  submit-all  every trial created at once (what `kubectl apply -f DIR` does): Volcano
              holds the 8-GPU gangs in its queue, admitted (Inqueue) against the free
              GPUs although no node can take one, and the smaller gangs behind them wait
  static      a fixed cap on trials in flight (Katib's parallelTrialCount), study order
  adaptive    stratctl's default: the trials that fit the free GPUs now, packed largest
              first, so the holes take the small trials and the 8-GPU trials go when
              whole nodes free up (run/packing.py)

For each it reports the makespan and its lower bound (no 8-GPU trial can start before a
whole node is free: the hold time plus the longest 8-GPU trial; and the trials'
GPU-seconds over the GPUs the other team left), the GPU-seconds left idle while trials
waited (sampled twice a second: free GPUs while some trial had not started), and the
longest wait of an 8-GPU trial (from the start to its pod running).

    python bench/mixed_shapes.py [--rounds 3] [--per-size 1:16,2:12,4:8,8:8] [--hold 90]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.adaptive_experiment import cleanup, median
from bench.results import save, scalars
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import NODE, POD, PODGROUP, Cluster
from stratctl.backends.kubernetes.objects.gpus import Placement, free_gpus, placeable, pod_gpus
from stratctl.core.space import expand
from stratctl.core.spec import load_study

OTHER_TEAM = "bench.stratctl.io/other-team"
HELD = (5, 3, 6, 2, 7, 1, 4, 4)  # GPUs the other team holds on each node (of 8): holes of 3, 5, 2, 6, 1, 7, 4, 4


def study_text(name: str, namespace: str, per_size: dict[int, int], duration: tuple[int, int], seed: int) -> str:
    """One study whose trials differ in size: `per_size` {GPUs: trials}, drawn at random."""
    sizes = [size for size, n in per_size.items() for _ in range(n)]
    durations = "[" + ", ".join(map(str, _durations(len(sizes), duration, seed))) + "]"
    return textwrap.dedent(f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        space:
          slot: {{type: int, low: 0, high: {len(sizes) - 1}}}
        strategy: {{kind: grid}}
        trial:
          image: busybox
          command: ["train"]
          annotations:
            testbed.stratctl.io/run-duration: "{{{{ {durations}[params.slot] }}}}s"
          resources: {{requests: {{nvidia.com/gpu: "{{{{ {sizes}[params.slot] }}}}", cpu: 100m}}}}
        throttle: {{qps: 50, burst: 50, yield_to_higher_priority: false,
                    parallelism: {{min: 1, initial: 8, max: {len(sizes)}}}}}
        cost: {{expected_duration: "{{{{ {durations}[params.slot] }}}}s"}}
        """)


def _durations(n: int, duration: tuple[int, int], seed: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randint(*duration) for _ in range(n)]


def release(i: int, nodes: int, hold: float) -> float:
    """When the other team's pod on the i-th node ends: one node after the other over `hold`."""
    return hold * (i + 1) / nodes


def lower_bound(sizes: list[int], durations: list[int], nodes: int, hold: float, step: float = 0.1) -> float:
    """No schedule ends sooner than the larger of: the trials' GPU-seconds over the GPUs the
    other team leaves (area); and the best schedule of the 8-GPU trials alone, each needing a
    node the other team has released (exact for that relaxation: the smallest T for which
    their durations pack into the nodes' windows T − release, found by bisection)."""
    releases = [release(i, nodes, hold) for i in range(nodes)]
    work = sum(g * d for g, d in zip(sizes, durations))
    t = done = 0.0
    while done < work:
        done += sum(8 - (HELD[i % len(HELD)] if t < r else 0) for i, r in enumerate(releases)) * step
        t += step
    largest = max(sizes)
    blocked = sorted((d for g, d in zip(sizes, durations) if g == largest), reverse=True)
    low, high = min(releases), max(releases) + sum(blocked)
    while high - low > step:
        mid = (low + high) / 2
        low, high = (low, mid) if _packs(blocked, [mid - r for r in releases]) else (mid, high)
    return max(t, high)


def ideal_packing(sizes: list[int], durations: list[int], nodes: int, hold: float) -> float:
    """The makespan of the packing rule with no latency at all (each trial starts the moment
    the GPUs it fits are free, all trials known up front): what the rule itself achieves,
    beside the bound no schedule can beat."""
    free = {i: 8 - HELD[i % len(HELD)] for i in range(nodes)}
    events = [(release(i, nodes, hold), "release", i, HELD[i % len(HELD)]) for i in range(nodes)]
    waiting = sorted(range(len(sizes)), key=lambda k: (-sizes[k], -durations[k]))
    t, end = 0.0, 0.0
    while waiting or events:
        placed = []
        for k in waiting:  # largest first, each on the node with the least room that takes it
            fits = [i for i, r in free.items() if r >= sizes[k]]
            if fits:
                node = min(fits, key=lambda i: (free[i], i))
                free[node] -= sizes[k]
                events.append((t + durations[k], "end", node, sizes[k]))
                end = max(end, t + durations[k])
                placed.append(k)
        waiting = [k for k in waiting if k not in placed]
        if not events:
            break
        events.sort()
        t, _, node, gpus = events.pop(0)
        free[node] += gpus
    return end


def _packs(jobs: list[int], windows: list[float]) -> bool:
    """Whether the jobs (longest first) fit into the windows, each window running its jobs
    one after another (exact, by backtracking; a few jobs)."""
    left = sorted((w for w in windows if w > 0), reverse=True)

    def fit(i: int) -> bool:
        if i == len(jobs):
            return True
        tried = set()
        for k, room in enumerate(left):
            if room >= jobs[i] and room not in tried:
                tried.add(room)
                left[k] -= jobs[i]
                if fit(i + 1):
                    return True
                left[k] += jobs[i]
        return False

    return fit(0)


def other_team_pod(name: str, namespace: str, node: str, gpus: int, seconds: float) -> dict:
    """A running pod of another team's job, on its node (bound already: no scheduler involved)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {OTHER_TEAM: "true"},
            "annotations": {"testbed.stratctl.io/run-duration": f"{int(seconds)}s"},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "train",
                    "image": "busybox",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": "100m"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


@dataclass
class Result:
    strategy: str
    makespan: float
    bound: float
    idle_gpu_seconds: float
    longest_large_wait: float
    succeeded: int
    total: int
    starts: dict = field(default_factory=dict)
    ideal: float = 0.0  # the packing rule's makespan without latency (simulated)
    peak_queued: int = 0  # the study's gangs waiting in Volcano's queue at once (PodGroups Pending or Inqueue)

    @property
    def ratio(self) -> float:
        return self.makespan / self.bound


class Sampler(threading.Thread):
    """Twice a second: free GPUs, and which of the study's trials have their pod running."""

    def __init__(self, admin: Cluster, study: str, trials: int):
        super().__init__(daemon=True)
        self.admin, self.study, self.trials = admin, study, trials
        self.started_at = time.monotonic()
        self.stop = threading.Event()
        self.idle = 0.0
        self.starts: dict[str, float] = {}  # trial → seconds from the start to its pod running
        self.sizes: dict[str, int] = {}
        self.peak_queued = 0

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(0.5):
            now = time.monotonic()
            nodes, _ = self.admin.list(NODE)
            pods, _ = self.admin.list(POD, all_namespaces=True)
            groups, _ = self.admin.list(PODGROUP, label_selector=f"{labels.STUDY}={self.study}")
            self.peak_queued = max(
                self.peak_queued,
                sum(1 for g in groups if (g.get("status") or {}).get("phase", "Pending") in ("Pending", "Inqueue")),
            )
            for pod in pods:
                meta = pod["metadata"]
                trial = (meta.get("labels") or {}).get(labels.TRIAL)
                if trial and (meta.get("labels") or {}).get(labels.STUDY) == self.study:
                    self.sizes[trial] = pod_gpus(pod)
                    if pod.get("status", {}).get("phase") in ("Running", "Succeeded"):
                        self.starts.setdefault(trial, now - self.started_at)
            if len(self.starts) < self.trials:  # some trial waits: its GPUs idle count
                self.idle += sum(free_gpus(nodes, pods).values()) * (now - last)
            last = now


def measure(
    strategy: str,
    target,
    per_size: dict[int, int],
    duration: tuple[int, int],
    hold: float,
    seed: int,
    tag: str,
    cap: int,
) -> Result:
    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    open_nodes = placeable(admin.list(NODE)[0], [Placement()])  # not a node tainted for others (the real node)
    nodes = sorted(node for node, gpus in free_gpus(open_nodes, []).items() if gpus > 0)
    name = f"mix-{strategy}-{tag}"[:40]
    total = sum(per_size.values())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study.yaml"
        path.write_text(study_text(name, target.namespace, per_size, duration, seed))
        study = load_study(path)
        trials = expand(study)
        durations = _durations(total, duration, seed)
        sizes = [size for size, n in per_size.items() for _ in range(n)]
        for i, node in enumerate(nodes):
            admin.create(
                other_team_pod(
                    f"other-{tag}-{strategy}-{i}"[:60],
                    target.namespace,
                    node,
                    HELD[i % len(HELD)],
                    release(i, len(nodes), hold),
                )
            )
        sampler = Sampler(admin, name, len(trials))
        sampler.start()
        context = target.restricted_context or target.admin_context
        argv = [
            sys.executable,
            "-m",
            "stratctl",
            "submit",
            str(path),
            "--kubeconfig",
            target.kubeconfig,
            *(["--context", context] if context else []),
            "-n",
            target.namespace,
            "--poll-interval",
            "1",
            "--workers",
            "8",
            "-o",
            "json",
            *(["--parallelism", "static", "--max-inflight", str(cap)] if strategy != "adaptive" else []),
        ]
        started = time.monotonic()
        out = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        makespan = time.monotonic() - started
        sampler.stop.set()
        sampler.join()
    done = json.loads(out.stdout) if out.stdout.strip() else {}
    large = [t for t, g in sampler.sizes.items() if g == max(per_size)]
    result = Result(
        strategy,
        makespan,
        lower_bound(sizes, durations, len(nodes), hold),
        sampler.idle,
        max((sampler.starts.get(t, makespan) for t in large), default=0.0),
        done.get("succeeded", 0),
        total,
        dict(sampler.starts),
        peak_queued=sampler.peak_queued,
        ideal=ideal_packing(sizes, durations, len(nodes), hold),
    )
    cleanup(admin, name)
    for pod in admin.list(POD, label_selector=f"{OTHER_TEAM}=true")[0]:
        admin.delete(POD, pod["metadata"]["name"])
    admin.close()
    return result


def main() -> None:
    from bench.testbed import testbed_target

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-size", default="1:16,2:12,4:8,8:8", help="GPUs:trials, comma-separated")
    parser.add_argument("--duration", default="15-30", help="seconds each trial runs, drawn from this range")
    parser.add_argument("--hold", type=float, default=90, help="seconds the other team holds its GPUs")
    parser.add_argument("--cap", type=int, default=12, help="the static cap")
    parser.add_argument("--only", default="submit-all,static,adaptive")
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    per_size = {int(k): int(v) for k, v in (item.split(":") for item in args.per_size.split(","))}
    low, high = (int(x) for x in args.duration.split("-"))
    target = testbed_target()
    tag = str(int(time.time()))[-5:]
    total = sum(per_size.values())
    caps = {"submit-all": total, "static": args.cap, "adaptive": 0}
    results: list[Result] = []
    for round_ in range(args.rounds):
        for strategy in args.only.split(","):
            print(f"running {strategy} (round {round_ + 1} of {args.rounds}) ...", flush=True)
            r = measure(strategy, target, per_size, (low, high), args.hold, args.seed, f"{tag}{round_}", caps[strategy])
            print(
                f"  makespan {r.makespan:.1f}s (bound {r.bound:.1f}s, ratio {r.ratio:.2f}), idle "
                f"{r.idle_gpu_seconds:.0f} GPU-s, longest 8-GPU wait {r.longest_large_wait:.1f}s, "
                f"peak queued gangs {r.peak_queued}, "
                f"{r.succeeded}/{r.total} succeeded",
                flush=True,
            )
            results.append(r)
    report(results, args, per_size, (low, high))
    save(
        "mixed-shapes",
        {
            "rounds": args.rounds,
            "per_size": per_size,
            "duration_seconds": [low, high],
            "hold_seconds": args.hold,
            "cap": args.cap,
            "runs": [scalars(r) for r in results],
        },
    )


def report(results: list[Result], args, per_size: dict[int, int], duration: tuple[int, int]) -> None:
    print(
        f"\n{sum(per_size.values())} trials ({', '.join(f'{n}×{g} GPU' for g, n in per_size.items())}), "
        f"{duration[0]}–{duration[1]} s each; another team holds {'/'.join(map(str, HELD))} GPUs of 8 per node "
        f"at the start, released one node at a time over {args.hold:g} s; static cap {args.cap}; "
        f"medians of {args.rounds} round(s)\n"
    )
    ideal = results[0].ideal if results else 0.0
    print(f"the packing rule with no latency at all (simulated) ends at {ideal:.1f} s\n")
    print(
        f"{'strategy':11} {'makespan s':>10} {'bound s':>8} {'ratio':>6} {'idle GPU-s':>11} "
        f"{'longest 8-GPU wait s':>21} {'peak queued':>12} {'done':>7}   all rounds (makespan)"
    )
    by: dict[str, list[Result]] = {}
    for r in results:
        by.setdefault(r.strategy, []).append(r)
    for strategy, runs in by.items():
        print(
            f"{strategy:11} {median([r.makespan for r in runs]):10.1f} {median([r.bound for r in runs]):8.1f} "
            f"{median([r.ratio for r in runs]):6.2f} {median([r.idle_gpu_seconds for r in runs]):11.0f} "
            f"{median([r.longest_large_wait for r in runs]):21.1f} {median([r.peak_queued for r in runs]):12.0f} "
            f"{min(r.succeeded for r in runs):>3}/{runs[0].total:<3}   "
            f"{', '.join(f'{r.makespan:.0f}' for r in runs)}"
        )


if __name__ == "__main__":
    main()
