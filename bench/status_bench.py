"""`stratctl status` on 10,000 trial jobs against `kubectl get` of the same objects.

Creates N Volcano Jobs of one study (as admin, concurrently) whose gang can never be
scheduled (one pod asking for 1000 GPUs), so the cluster holds N jobs and N PodGroups and
no pods; then times `stratctl status STUDY -o json` and `-o table`, and kubectl listing
the same objects (jobs; jobs + podgroups + pods), each as a separate process, reporting
wall time (median of --repeat runs) and peak RSS. Cleans up at the end.

    python bench/status_bench.py [--trials 10000] [--waiting 0] [--repeat 3] [--keep]

The study record holds the study as submit writes it (its file and spec): a grid whose
trials are the jobs, named and labelled as submit names them, plus `--waiting` trials not
created (status lists those too, with their parameters, from the study the record keeps:
backends/kubernetes/objects/roster.py). With --waiting 0 every trial has its job.

The table is timed twice: for a study no submit loop is following (status lists every
job, as JSON does) and for one whose loop keeps a summary in the study record (status
reads that summary and the first page of jobs). The bench writes that summary the way
the loop does (summary.build over every job, then one patch) and reports what it costs.

Targets: the table for a study no loop follows no slower than `kubectl get` of the same
jobs, `-o json` within 1.2x of it. The local testbed's Volcano scheduler is paused while
reads are timed (bench/testbed.py: scheduler_paused). Figures to stdout and
bench/results/status.json (or status-<N>.json for another --trials).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bytecode import compiled
from bench.results import save
from bench.testbed import scheduler_paused, testbed_target
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import (
    CONFIGMAP,
    PODGROUP,
    VOLCANO_JOB,
    Cluster,
)
from stratctl.backends.kubernetes.objects.record import StudyRecord, record_manifest, record_name
from stratctl.backends.kubernetes.objects.summary import build, latest_slim, summary_data
from stratctl.errors import AlreadyExists

STUDY = "bench-status"


STUDY_TEXT = """\
name: bench-status
namespace: {namespace}
space:
  seed: {{type: int, low: 0, high: {last}}}
strategy: {{kind: grid}}
trial:
  image: stratctl.invalid/never:0
  resources: {{requests: {{nvidia.com/gpu: 1000}}}}
"""


def study(trials: int, namespace: str):
    """The bench's study: a grid of `trials` seeds (its text, the Study, its trials)."""
    from stratctl.core import document
    from stratctl.core.space import expand
    from stratctl.core.spec import study_from_document

    text = STUDY_TEXT.format(namespace=namespace, last=trials - 1)
    spec = study_from_document(document.parse(text, "<bench>"))
    return text, spec, expand(spec)


def job(i: int, namespace: str, trial=None) -> dict:
    name = trial.name if trial is not None else f"{STUDY}-{i:010x}"
    meta_labels = {
        labels.STUDY: STUDY,
        labels.TRIAL: name,
        labels.ATTEMPT: "0",
        labels.SPEC_HASH: "bench",
        labels.CRITICAL: "false",
        labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
    }
    params = dict(trial.params) if trial is not None else {"lr": 10 ** -(i % 5), "seed": i}
    notes = {labels.PARAMS: json.dumps(params), labels.CHECKPOINT: f"/ckpt/{name}", labels.TRIAL_INDEX: str(i)}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": notes,
            "labels": {**meta_labels, labels.SHARD: labels.shard_of(name)},
        },  # as stratctl renders them
        "spec": {
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": 1,
            "maxRetry": 3,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "minAvailable": 1,
                    "template": {
                        "metadata": {"labels": meta_labels, "annotations": notes},
                        "spec": {
                            "schedulerName": "volcano",
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": "stratctl.invalid/never:0",
                                    "env": [{"name": "STRATCTL_TRIAL", "value": name}],
                                    "resources": {
                                        "requests": {"nvidia.com/gpu": "1000"},
                                        "limits": {"nvidia.com/gpu": "1000"},
                                    },
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


def create_all(cluster: Cluster, n: int, namespace: str, waiting: int = 0) -> float:
    """The first `n` trials' jobs of the study of n + `waiting` trials, and its record."""
    from stratctl.core.changes import spec_text

    started = time.monotonic()
    text, spec, trials = study(n + waiting, namespace)

    def one(i):
        try:
            cluster.create(job(i, namespace, trials[i]))
        except AlreadyExists:
            pass

    with ThreadPoolExecutor(48) as pool:
        list(pool.map(one, range(n)))
    record = StudyRecord(study=STUDY, spec_hash="bench", trials=n + waiting, source=text, spec=spec_text(spec))
    try:
        cluster.create(record_manifest(record, namespace))
    except AlreadyExists:
        pass
    return time.monotonic() - started


def write_summary(cluster: Cluster, namespace: str) -> dict:
    """What a submit loop following the study does every few seconds, timed."""
    jobs, _ = cluster.list(VOLCANO_JOB, namespace, label_selector=f"{labels.STUDY}={STUDY}")
    cm = cluster.get(CONFIGMAP, record_name(STUDY), namespace)
    started = time.perf_counter()
    at = time.time()
    (row,), _ = build(at, [cm], latest_slim(jobs))
    data = summary_data(row, at)
    built = time.perf_counter() - started
    cluster.patch(CONFIGMAP, record_name(STUDY), {"data": data}, namespace)
    return {"build_seconds": round(built, 3), "bytes": len(data["summary"])}


def write_summary_data(cluster: Cluster, namespace: str) -> dict:
    jobs, _ = cluster.list(VOLCANO_JOB, namespace, label_selector=f"{labels.STUDY}={STUDY}")
    cm = cluster.get(CONFIGMAP, record_name(STUDY), namespace)
    at = time.time()
    (row,), _ = build(at, [cm], latest_slim(jobs))
    return summary_data(row, at)


def interleaved(commands: dict[str, tuple[list[str], dict]], repeat: int) -> dict:
    """Each command once per round, `repeat` rounds, so drift hits every command alike."""
    rounds = [{name: run(argv, env, 1) for name, (argv, env) in commands.items()} for _ in range(repeat)]
    out = {}
    for name in commands:
        runs = [r[name] for r in rounds]
        out[name] = {
            "seconds": round(statistics.median(r["seconds"] for r in runs), 3),
            "min_seconds": min(r["seconds"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "output_bytes": runs[-1]["output_bytes"],
        }
    return out


def run(argv: list[str], env: dict, repeat: int) -> dict:
    times, rss, size = [], [], 0
    for _ in range(repeat):
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        chunks = []
        while True:
            chunk = proc.stdout.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        times.append(time.monotonic() - started)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:6])} failed ({proc.returncode}): {err.decode()[-2000:]}")
        rss.append(usage.ru_maxrss / 1024)
        size = sum(len(c) for c in chunks)
    return {
        "seconds": round(statistics.median(times), 3),
        "min_seconds": round(min(times), 3),
        "peak_rss_mib": round(max(rss), 1),
        "output_bytes": size,
    }


def populate(cluster: Cluster, trials: int, namespace: str, waiting: int = 0) -> tuple[float, int]:
    """The study's `trials` jobs and its record (those missing), then Volcano's PodGroups of them
    (status reads them too): (seconds creating, PodGroups seen)."""
    have = len(cluster.list(VOLCANO_JOB, namespace, label_selector=f"{labels.STUDY}={STUDY}")[0])
    made = create_all(cluster, trials, namespace, waiting) if have < trials else 0.0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pgs = len(cluster.list(PODGROUP, namespace, label_selector=f"{labels.STUDY}={STUDY}")[0])
        if pgs >= trials:
            break
        time.sleep(2)
    return made, pgs


def status_argv(stratctl: list[str], target) -> list[str]:
    """`stratctl status` of the bench's study, `stratctl` the command that starts stratctl
    ([python, -m, stratctl] or an installed venv's bin/stratctl); KUBECONFIG in its env."""
    ctx = ["--context", target.admin_context] if target.admin_context else []
    return [*stratctl, "status", STUDY, "-n", target.namespace, *ctx]


def delete_all(target, wait: bool = False) -> None:
    """Delete the study's jobs and record (their PodGroups go with the jobs)."""
    subprocess.run(
        [
            target.kubectl or "kubectl",
            "--kubeconfig",
            target.kubeconfig,
            "-n",
            target.namespace,
            *(["--context", target.admin_context] if target.admin_context else []),
            "delete",
            "jobs.batch.volcano.sh,configmaps",
            "-l",
            f"{labels.STUDY}={STUDY}",
            f"--wait={str(wait).lower()}",
        ],
        check=False,
        capture_output=True,
        timeout=900,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--waiting", type=int, default=0, help="trials of the study not created (default 0)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the jobs in the cluster")
    args = parser.parse_args()
    compiled()

    target = testbed_target()
    ns = target.namespace
    env = {**os.environ, "KUBECONFIG": target.kubeconfig}
    cluster = Cluster.connect(target.kubeconfig, target.admin_context, ns, pool_size=64)
    try:
        made, pgs = populate(cluster, args.trials, ns, args.waiting)
        ctx = ["--context", target.admin_context] if target.admin_context else []
        stratctl = status_argv([sys.executable, "-m", "stratctl"], target)
        kubectl = [target.kubectl or "kubectl", "-n", ns, *ctx, "get"]
        sel = ["-l", f"{labels.STUDY}={STUDY}"]
        summary = write_summary(cluster, ns)  # after the timings of a study no loop follows
        plain = {**env, "COLUMNS": "200"}
        commands = {
            "stratctl status -o json": (stratctl + ["-o", "json"], env),
            "stratctl status (table, 50 rows), no submit loop": (stratctl, plain),
            "kubectl get jobs.batch.volcano.sh": (kubectl + ["jobs.batch.volcano.sh", *sel], env),
            "kubectl get jobs.batch.volcano.sh -o json": (kubectl + ["jobs.batch.volcano.sh", *sel, "-o", "json"], env),
            "kubectl get jobs,podgroups,pods": (
                kubectl + ["jobs.batch.volcano.sh,podgroups.scheduling.volcano.sh,pods", *sel],
                env,
            ),
        }
        cluster.patch(CONFIGMAP, record_name(STUDY), {"data": {"summary": None}}, ns)  # no loop follows it
        with scheduler_paused(target) as paused:
            timed = interleaved(commands, args.repeat)
            cluster.patch(CONFIGMAP, record_name(STUDY), {"data": write_summary_data(cluster, ns)}, ns)
            timed["stratctl status (table, 50 rows), summary kept by submit"] = run(stratctl, plain, args.repeat)
        results = {
            "trials": args.trials,
            "waiting": args.waiting,
            "podgroups": pgs,
            "create_seconds": round(made, 1),
            "scheduler_paused": paused,
            "submit loop summary": summary,
            **timed,
        }
        base = results["kubectl get jobs.batch.volcano.sh"]["seconds"]
        results["status_table_vs_kubectl_get"] = round(
            results["stratctl status (table, 50 rows), no submit loop"]["seconds"] / base, 2
        )
        results["status_json_vs_kubectl_get"] = round(results["stratctl status -o json"]["seconds"] / base, 2)
        results["status_json_vs_kubectl_get_json"] = round(
            results["stratctl status -o json"]["seconds"]
            / results["kubectl get jobs.batch.volcano.sh -o json"]["seconds"],
            2,
        )
        results["status_table_with_summary_vs_kubectl_get"] = round(
            results["stratctl status (table, 50 rows), summary kept by submit"]["seconds"] / base, 2
        )
        print(json.dumps(results, indent=2))
        name = "status" if args.trials == 10_000 else f"status-{args.trials}"
        save(name + (f"-waiting-{args.waiting}" if args.waiting else ""), results)
    finally:
        if not args.keep:
            delete_all(target)
        cluster.close()


if __name__ == "__main__":
    main()
