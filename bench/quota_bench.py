"""A small API quota must not starve the GPUs (issue 22): one study, three conditions.

The same study (100 trials, gangs of two one-GPU pods, 10–20 s each, `parallelism: {min: 1,
initial: 8, max: 32}`, the default client throttle) is submitted by `stratctl submit` as the
restricted user of the testbed, once each:

  off    the APF limit off (the user's requests fall to the built-in global-default level)
  on     the APF limit on: one seat, requests past it rejected with 429 (testbed/apf.sh on)
  flood  the limit on, and another process of the same user hammering the API server
         (4 threads of back-to-back GETs, 429s ignored) for 60 s from 5 s after the start

For each: the makespan (submit start to its exit), for `flood` also the part after the
flood ended, the 429s, the requests per kind from submit's summary, and the trials in
flight over time (sampled twice a second by the admin, who APF does not limit).

    python bench/quota_bench.py [--only off,on,flood] [--out results.json] [--timeline FILE]
    python bench/quota_bench.py --report results.json     # the table of saved runs

Each run appends to `--out`, so the cases can be run one at a time (each holding the
testbed for a couple of minutes) and reported side by side. Goals (issue 22): on ≤ 1.2 ×
off; flood, after the flood ends, ≤ 1.3 × off.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import save, scalars
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.objects.state import TrialState, classify
from stratctl.errors import ClusterError

REPO = Path(__file__).resolve().parent.parent
FLOOD_START, FLOOD_SECONDS, FLOOD_THREADS = 5.0, 60.0, 4


def study_text(name: str, namespace: str, trials: int) -> str:
    return textwrap.dedent(
        f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        priority_class: stratctl-low
        space:
          lr: {{type: loguniform, low: 1.0e-5, high: 1.0e-1}}
          seconds: {{type: int, low: 10, high: 20}}
        strategy: {{kind: random, seed: 22, trials: {trials}}}
        trial:
          image: busybox
          command: ["train", "--lr={{{{ params.lr }}}}"]
          annotations:
            testbed.stratctl.io/run-duration: "{{{{ params.seconds }}}}s"
          resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}}}
          tasks: [{{name: worker, replicas: 2}}]
        throttle: {{parallelism: {{min: 1, initial: 8, max: 32}}}}
        cost: {{expected_duration: "{{{{ params.seconds }}}}s"}}
        """
    )


@dataclass
class Run:
    case: str
    commit: str
    makespan: float
    succeeded: int
    total: int
    throttled_429: int
    requests: int
    writes: int
    sent: dict = field(default_factory=dict)
    refused: dict = field(default_factory=dict)
    flood_end: float | None = None  # seconds after the start the flood ended
    flood_requests: int = 0
    flood_429: int = 0
    timeline: list = field(default_factory=list)  # (s, trials in flight, trials finished)
    load: str = ""  # /proc/loadavg at the end

    @property
    def after_flood(self) -> float | None:
        return None if self.flood_end is None else self.makespan - self.flood_end


def flood(kubeconfig: str, context: str, namespace: str, seconds: float, threads: int) -> None:
    """Another process of the same user: back-to-back GETs, ignoring 429s. Prints its tally."""
    cluster = Cluster.connect(kubeconfig, context, namespace, pool_size=threads * 2)
    stop = time.monotonic() + seconds
    tally = {"requests": 0, "429": 0}
    lock = threading.Lock()

    def hammer():
        while time.monotonic() < stop:
            try:
                cluster.request(
                    "GET", f"/api/v1/namespaces/{namespace}/configmaps", {"limit": 1}, what="list ConfigMap"
                )
                refused = 0
            except ClusterError as exc:
                refused = int(getattr(exc, "status", 0) == 429)
            with lock:
                tally["requests"] += 1
                tally["429"] += refused

    workers = [threading.Thread(target=hammer) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps(tally), flush=True)


def sample(admin: Cluster, study: str, started: float, stop: threading.Event, out: list) -> None:
    """Twice a second: the study's trials in flight (created, not finished) and finished."""
    while not stop.wait(0.5):
        try:
            jobs, _ = admin.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={study}")
        except ClusterError:
            continue
        states = [classify(j) for j in jobs]
        in_flight = sum(1 for s in states if s in (TrialState.PENDING, TrialState.RUNNING))
        done = sum(1 for s in states if s in (TrialState.SUCCEEDED, TrialState.FAILED))
        out.append((round(time.monotonic() - started, 1), in_flight, done))


def apf(on: bool) -> None:
    subprocess.run(
        ["bash", str(REPO / "testbed" / "apf.sh"), "on" if on else "off"], check=True, stdout=subprocess.DEVNULL
    )


def measure(case: str, target, trials: int, tag: str) -> Run:
    from bench.adaptive_experiment import cleanup

    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    name = f"quota-{case}-{tag}"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    timeline: list = []
    flood_tally = {"requests": 0, "429": 0}
    flood_end = None
    apf(case != "off")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(study_text(name, target.namespace, trials))
            argv = [
                sys.executable,
                "-m",
                "stratctl",
                "submit",
                str(path),
                "--kubeconfig",
                target.kubeconfig,
                "--context",
                target.restricted_context,
                "-n",
                target.namespace,
                "--poll-interval",
                "1",
                "-o",
                "json",
            ]
            stop = threading.Event()
            started = time.monotonic()
            sampler = threading.Thread(target=sample, args=(admin, name, started, stop, timeline), daemon=True)
            sampler.start()
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
            flooder = None
            if case == "flood":

                def run_flood():
                    nonlocal flood_end
                    time.sleep(FLOOD_START)
                    out = subprocess.run(
                        [
                            sys.executable,
                            str(Path(__file__).resolve()),
                            "--flood",
                            str(FLOOD_SECONDS),
                            "--kubeconfig",
                            target.kubeconfig,
                            "--context",
                            target.restricted_context,
                            "--namespace",
                            target.namespace,
                        ],
                        capture_output=True,
                        text=True,
                        cwd=REPO,
                    )
                    flood_end = time.monotonic() - started
                    flood_tally.update(json.loads(out.stdout.strip().splitlines()[-1]))

                flooder = threading.Thread(target=run_flood, daemon=True)
                flooder.start()
            for line in proc.stderr:  # the loop's log lines (no terminal: one per change)
                print(f"  [{case} {time.monotonic() - started:6.1f}s] {line.rstrip()}", flush=True)
            summary = json.loads(proc.stdout.read())
            proc.wait()
            makespan = time.monotonic() - started
            stop.set()
            if flooder is not None:
                flooder.join()
    finally:
        apf(False)
    cleanup(admin, name)
    admin.close()
    return Run(
        case=case,
        commit=commit,
        makespan=makespan,
        succeeded=summary["succeeded"],
        total=summary["total"],
        throttled_429=summary["throttled_429"],
        requests=summary["api_requests"],
        writes=summary["api_writes"],
        sent=summary.get("api_sent") or {},
        refused=summary.get("api_refused") or {},
        flood_end=flood_end,
        flood_requests=flood_tally["requests"],
        flood_429=flood_tally["429"],
        timeline=timeline,
        load=Path("/proc/loadavg").read_text().strip(),
    )


def in_flight_strip(run: Run, step: float = 5.0) -> str:
    """Trials in flight every `step` seconds (the largest sample in each step)."""
    out, t, i = [], 0.0, 0
    while t < run.makespan:
        window = [n for s, n, _ in run.timeline if t <= s < t + step]
        out.append(str(max(window)) if window else "-")
        t += step
        i += 1
    return " ".join(out)


def report(runs: list[Run]) -> None:
    off = next((r for r in runs if r.case == "off"), None)
    print(
        "\n| case | makespan | × off | after the flood | × off | trials | 429s | requests (per trial) | "
        "writes | flood requests (429s) | commit | load at end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        ratio = f"{r.makespan / off.makespan:.2f}" if off else "-"
        after = f"{r.after_flood:.1f} s" if r.after_flood is not None else "-"
        after_ratio = f"{r.after_flood / off.makespan:.2f}" if off and r.after_flood is not None else "-"
        flood_col = f"{r.flood_requests} ({r.flood_429})" if r.flood_end is not None else "-"
        print(
            f"| {r.case} | {r.makespan:.1f} s | {ratio} | {after} | {after_ratio} | {r.succeeded}/{r.total} | "
            f"{r.throttled_429} | {r.requests} ({r.requests / max(r.total, 1):.2f}) | {r.writes} | {flood_col} | "
            f"{r.commit} | {r.load.split()[0]} |"
        )
    print("\nrequests per kind (429s in brackets):")
    for r in runs:
        kinds = ", ".join(
            f"{k} {n}" + (f" ({r.refused[k]})" if r.refused.get(k) else "")
            for k, n in sorted(r.sent.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        print(f"  {r.case}: {kinds}")
    print("\ntrials in flight, the most in each 5 s:")
    for r in runs:
        print(f"  {r.case:5} {in_flight_strip(r)}")
    if off:
        for r in runs:
            if r.case == "on":
                print(f"\nlimit on / off: {r.makespan / off.makespan:.2f} (goal ≤ 1.2)")
            if r.case == "flood" and r.after_flood is not None:
                print(f"flood: after it ended / off: {r.after_flood / off.makespan:.2f} (goal ≤ 1.3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="off,on,flood")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--out", help="append each run to this JSON file")
    parser.add_argument("--report", help="print the table of the runs saved in this file, run nothing")
    parser.add_argument("--flood", type=float, help=argparse.SUPPRESS)  # internal: be the flooding process
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--context", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood is not None:
        flood(args.kubeconfig, args.context, args.namespace, args.flood, FLOOD_THREADS)
        return
    if args.report:
        report([Run(**{k: v for k, v in r.items()}) for r in json.loads(Path(args.report).read_text())])
        return
    from bench.testbed import testbed_target

    target = testbed_target()
    tag = str(int(time.time()))[-5:]
    runs = []
    for case in args.only.split(","):
        print(f"running {case} ...", flush=True)
        runs.append(measure(case, target, args.trials, tag))
        if args.out:
            path = Path(args.out)
            saved = json.loads(path.read_text()) if path.exists() else []
            path.write_text(json.dumps(saved + [asdict(runs[-1])], indent=1))
    report(runs)
    save("quota", {"trials": args.trials, "runs": [scalars(r) for r in runs]})


if __name__ == "__main__":
    main()
