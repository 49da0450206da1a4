"""Submission throughput on a real cluster, side by side in one run: `stratctl submit` as
the user runs it (a process: start-up, render, record and watches included, `--qps 0`)
against the API server's own ceiling and against kubectl.

The same N trials (Volcano Jobs, gangs of two 8-GPU pods in the testbed's `capped` queue,
which holds 16 GPUs: one gang runs, the others wait in the queue without pods, so the API
path is measured, not the scheduler) are created three ways:

  raw       concurrent HTTPS POSTs of the same manifests, pre-serialised, over keep-alive
            connections (`--raw-connections` threads, one connection each): the API
            server's ceiling on this machine — nothing a client can do goes faster;
  stratctl  `stratctl submit FILE --detach --qps 0` as a process, timed from exec to exit;
  kubectl   `kubectl apply -f DIR`, one file per trial.

Each method runs `--repeat` times, interleaved (raw, stratctl, kubectl, raw, ...), so
the machine's load falls on all of them; the medians are compared. Every run has its own
study name; everything is deleted after each run. Figures go to stdout and to
bench/results/submit.json with the commit they were measured at.

    python bench/submit_bench.py [--trials 500] [--repeat 3]

(another --trials writes bench/results/submit-N.json).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bytecode import compiled
from bench.results import save
from bench.testbed import testbed_target
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, PODGROUP, VOLCANO_JOB, Cluster
from stratctl.backends.launch import prepare
from stratctl.errors import NotFound
from stratctl.view.yamlout import dump_all


def study_text(name: str, namespace: str, trials: int, gpus: int = 8) -> str:
    """`trials` gangs of two `gpus`-GPU pods in the `capped` queue (16 GPUs: one gang at a time)."""
    return textwrap.dedent(
        f"""\
        name: {name}
        namespace: {namespace}
        queue: capped
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
          lr: {{type: choice, values: [0.001]}}
        strategy: {{kind: grid}}
        trial:
          image: busybox
          command: ["train", "--seed={{{{ params.seed }}}}", "--lr={{{{ params.lr }}}}"]
          resources: {{requests: {{nvidia.com/gpu: {gpus}, cpu: 100m}}, limits: {{nvidia.com/gpu: {gpus}}}}}
          tasks: [{{name: worker, replicas: 2}}]
        throttle: {{qps: 5, burst: 10, parallelism: {{min: 1, initial: {trials}, max: {trials}}}}}
        """
    )


def delete_study(admin: Cluster, name: str) -> None:
    """Delete the run's jobs, their PodGroups (not left to the garbage collector, which would
    still be busy with them during the next run) and its record, and wait until all are gone."""
    for kind in (VOLCANO_JOB, CONFIGMAP):
        items, _ = admin.list(kind, label_selector=f"{labels.STUDY}={name}")
        for item in items:
            admin.delete(kind, item["metadata"]["name"])

    def groups():
        items, _ = admin.list(PODGROUP)
        return [g["metadata"]["name"] for g in items if g["metadata"]["name"].startswith(f"{name}-")]

    def delete_groups(names):
        for group in names:
            try:
                admin.delete(PODGROUP, group)
            except NotFound:
                pass

    delete_groups(groups())
    deadline = time.time() + 180
    while time.time() < deadline:
        left = groups()
        if not (count(admin, name) or left):
            break
        # Volcano's controller may make a job's PodGroup after the pass above, and the
        # garbage collector then takes minutes for it: deleted again
        delete_groups(left)
        time.sleep(0.5)


def count(admin: Cluster, name: str) -> int:
    items, _ = admin.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    return len(items)


def credentials(kubeconfig: str, context: str) -> tuple[str, str, str]:
    """(server URL, CA file, bearer token) of a kubeconfig context."""
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    ctx = next(c["context"] for c in doc["contexts"] if c["name"] == context)
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
    return cluster["server"], cluster["certificate-authority"], user["token"]


def raw_posts(server: str, ca: str, token: str, namespace: str, bodies: list[bytes], connections: int) -> float:
    """Seconds to POST every body over `connections` keep-alive HTTPS connections at once."""
    host, port = server.removeprefix("https://").split(":")
    path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"}
    context = ssl.create_default_context(cafile=ca)
    queue = list(enumerate(bodies))
    lock = threading.Lock()
    failures: list[str] = []
    conns = [http.client.HTTPSConnection(host, int(port), context=context) for _ in range(connections)]
    for conn in conns:  # TLS handshakes before the clock starts: the ceiling of a warm client
        conn.request("GET", "/readyz", headers=headers)
        conn.getresponse().read()

    def work(conn):
        while True:
            with lock:
                if not queue:
                    return
                _, body = queue.pop()
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status != 201:
                failures.append(str(response.status))

    threads = [threading.Thread(target=work, args=(c,)) for c in conns]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    for conn in conns:
        conn.close()
    assert not failures, failures[:5]
    return seconds


def time_raw(
    target, admin: Cluster, creds: tuple[str, str, str], tmpdir: Path, name: str, n: int, connections: int
) -> float:
    """One raw run: the manifests stratctl renders for an n-trial study, serialised before the
    clock starts, POSTed over `connections` keep-alive connections; checked and deleted."""
    path = tmpdir / f"{name}.yaml"
    path.write_text(study_text(name, target.namespace, n))
    bodies = [json.dumps(m[0]).encode() for m in prepare(path, target.namespace).manifests.values()]
    seconds = raw_posts(*creds, target.namespace, bodies, connections)
    assert count(admin, name) == n
    delete_study(admin, name)
    return seconds


def time_stratctl(stratctl: list[str], target, admin: Cluster, tmpdir: Path, name: str, n: int, workers: int) -> float:
    """One `stratctl submit --detach --qps 0` of an n-trial study, `stratctl` the command that
    starts it (e.g. [python, -m, stratctl] or an installed venv's bin/stratctl), timed from exec
    to exit; checked and deleted."""
    path = tmpdir / f"{name}.yaml"
    path.write_text(study_text(name, target.namespace, n))
    started = time.perf_counter()
    done = subprocess.run(
        stratctl
        + [
            "submit",
            str(path),
            "--detach",
            "--qps",
            "0",
            "--workers",
            str(workers),
            "--kubeconfig",
            target.kubeconfig,
            "--context",
            target.admin_context,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert count(admin, name) == n and json.loads(done.stdout)["created"] == n
    delete_study(admin, name)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--raw-connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=32, help="stratctl submit --workers")
    args = parser.parse_args()
    compiled()
    n = args.trials
    target = testbed_target()
    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    creds = credentials(target.kubeconfig, target.admin_context)
    kubectl = [target.kubectl, "--kubeconfig", target.kubeconfig, "--context", target.admin_context]
    stratctl = [sys.executable, "-m", "stratctl"]
    stamp = str(int(time.time()))[-6:]
    times: dict[str, list[float]] = {"raw": [], "stratctl": [], "kubectl": []}
    load = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        for rep in range(args.repeat):
            times["raw"].append(
                time_raw(target, admin, creds, tmpdir, f"bench-r{rep}-{stamp}", n, args.raw_connections)
            )
            times["stratctl"].append(
                time_stratctl(stratctl, target, admin, tmpdir, f"bench-s{rep}-{stamp}", n, args.workers)
            )

            name = f"bench-k{rep}-{stamp}"
            path = tmpdir / f"{name}.yaml"
            path.write_text(study_text(name, target.namespace, n))
            directory = tmpdir / name
            directory.mkdir()
            for trial, manifests in prepare(path, target.namespace).manifests.items():
                (directory / f"{trial}.yaml").write_text(dump_all(manifests))
            started = time.perf_counter()
            done = subprocess.run(kubectl + ["apply", "-f", str(directory)], capture_output=True, text=True)
            times["kubectl"].append(time.perf_counter() - started)
            assert done.returncode == 0, done.stderr[-2000:]
            assert count(admin, name) == n
            delete_study(admin, name)
            load.append(os.getloadavg()[0])
    admin.close()

    median = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: n / s for k, s in median.items()}
    print(
        f"\nsubmission of {n} Volcano Jobs (gangs of 2), client-side limits off; median of {args.repeat} "
        f"interleaved runs; load average {statistics.mean(load):.1f} on {os.cpu_count()} cores\n"
    )
    print(f"{'method':62} {'seconds':>8} {'trials/s':>9} {'vs raw':>7}")
    labels_ = {
        "raw": f"raw HTTPS POSTs, {args.raw_connections} keep-alive connections (the ceiling)",
        "stratctl": f"stratctl submit --detach --qps 0 (process, --workers {args.workers})",
        "kubectl": "kubectl apply -f DIR",
    }
    for key in ("raw", "stratctl", "kubectl"):
        print(f"{labels_[key]:62} {median[key]:8.2f} {rate[key]:9.1f} {rate[key] / rate['raw']:6.2f}x")
    ratio_raw, ratio_kubectl = rate["stratctl"] / rate["raw"], rate["stratctl"] / rate["kubectl"]
    print(
        f"\nstratctl: {ratio_raw:.2f}x the API server's ceiling (target ≥ 0.8x), "
        f"{ratio_kubectl:.1f}x kubectl apply (target ≥ 3x)"
    )
    # the README's figure is at 500 trials; another size keeps its own file
    save(
        "submit" if n == 500 else f"submit-{n}",
        {
            "trials": n,
            "repeat": args.repeat,
            "seconds": times,
            "median_seconds": median,
            "trials_per_second": rate,
            "stratctl_vs_raw": ratio_raw,
            "stratctl_vs_kubectl_apply": ratio_kubectl,
            "raw_connections": args.raw_connections,
            "workers": args.workers,
            "load_average": statistics.mean(load),
            "cores": os.cpu_count(),
        },
    )


if __name__ == "__main__":
    main()
