"""Submission throughput on a real cluster: stratctl against kubectl, in one run.

The same N rendered trials are created three ways, with client-side limits off:
  1. `stratctl submit --detach` (concurrent creates through the throttle, qps unlimited);
  2. `kubectl apply -f DIR` of the same manifests, one file per trial;
  3. one `kubectl create -f FILE` process per trial file.
Each run gets its own study name so nothing collides; everything is deleted afterwards.
Each gang asks for more GPUs than the whole cluster has, so it is never enqueued and no
pod starts: the benchmark measures the API path, not the scheduler.

    python bench/submit_bench.py [--trials 200]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path



sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.testbed import testbed_target  # noqa: E402
from stratctl import labels  # noqa: E402
from stratctl.kube.cluster import CONFIGMAP, VOLCANO_JOB, Cluster  # noqa: E402
from stratctl.engine.controller import SubmitOptions  # noqa: E402
from stratctl.engine.launch import Connection, prepare, submit_study  # noqa: E402
from stratctl.view.yamlout import dump_all  # noqa: E402



def study_text(name: str, namespace: str, trials: int) -> str:
    return textwrap.dedent(
        f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
          lr: {{type: choice, values: [0.001]}}
        strategy: {{kind: grid}}
        trial:
          image: busybox
          command: ["train", "--seed={{{{ params.seed }}}}", "--lr={{{{ params.lr }}}}"]
          resources: {{requests: {{nvidia.com/gpu: 1000, cpu: 100m}}}}
          tasks: [{{name: worker, replicas: 2}}]
        throttle: {{qps: 5, burst: 10, parallelism: {{min: 1, initial: {trials}, max: {trials}}}}}
        """
    )


def delete_study(admin: Cluster, name: str) -> None:
    for kind in (VOLCANO_JOB, CONFIGMAP):
        items, _ = admin.list(kind, label_selector=f"{labels.STUDY}={name}")
        for item in items:
            admin.delete(kind, item["metadata"]["name"])


def count(admin: Cluster, name: str) -> int:
    items, _ = admin.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    return len(items)


def write_trial_files(path: Path, namespace: str, directory: Path) -> list[Path]:
    files = []
    for name, manifests in prepare(path, namespace).manifests.items():
        f = directory / f"{name}.yaml"
        f.write_text(dump_all(manifests))
        files.append(f)
    return files


def kubectl_requests(stderr: str) -> tuple[int, int]:
    """(requests, writes) from kubectl -v=6 logs."""
    reqs = re.findall(r'"Response".*?verb="(\w+)"|\b(GET|POST|PUT|PATCH|DELETE) https://', stderr)
    verbs = [a or b for a, b in reqs]
    return len(verbs), sum(v in ("POST", "PUT", "PATCH", "DELETE") for v in verbs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--workers", type=int, default=32)
    args = parser.parse_args()
    n = args.trials
    target = testbed_target()
    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    stamp = str(int(time.time()))[-6:]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        kubectl = [target.kubectl, "--kubeconfig", target.kubeconfig] + (
            ["--context", target.admin_context] if target.admin_context else []
        )

        # 1. stratctl
        name = f"bench-s-{stamp}"
        path = tmpdir / "stratctl.yaml"
        path.write_text(study_text(name, target.namespace, n))
        started = time.perf_counter()
        progress = submit_study(
            path,
            Connection(target.kubeconfig, target.admin_context, target.namespace),
            SubmitOptions(detach=True, workers=args.workers, poll_interval=0.2),
            qps=0,
            burst=1,
        )
        seconds = time.perf_counter() - started
        assert count(admin, name) == n and progress.created == n, progress
        results.append(("stratctl submit --detach", seconds, progress.api_requests, progress.api_writes))
        delete_study(admin, name)

        def kubectl_run(label: str, key: str, per_file: bool) -> None:
            """Render the same study into one file per trial, create them with kubectl, time it."""
            name = f"bench-{key}-{stamp}"
            path = tmpdir / f"{key}.yaml"
            path.write_text(study_text(name, target.namespace, n))
            directory = tmpdir / key
            directory.mkdir()
            files = write_trial_files(path, target.namespace, directory)
            commands = ([kubectl + ["create", "-f", str(f), "-v=6"] for f in files] if per_file
                        else [kubectl + ["apply", "-f", str(directory), "-v=6"]])
            reqs = writes = 0
            started = time.perf_counter()
            for command in commands:
                out = subprocess.run(command, capture_output=True, text=True)
                assert out.returncode == 0, out.stderr[-2000:]
                r, w = kubectl_requests(out.stderr)
                reqs, writes = reqs + r, writes + w
            seconds = time.perf_counter() - started
            assert count(admin, name) == n
            results.append((label, seconds, reqs, writes))
            delete_study(admin, name)

        kubectl_run("kubectl apply -f DIR", "a", per_file=False)
        kubectl_run("kubectl create -f FILE (per trial)", "c", per_file=True)

    base = results[0][1]
    print(f"\nsubmission of {n} Volcano Jobs (gangs of 2), client-side limits off\n")
    print(f"{'method':38} {'seconds':>8} {'trials/s':>9} {'stratctl speed-up':>18} {'requests/trial':>15} {'writes/trial':>13}")
    for method, seconds, reqs, writes in results:
        print(f"{method:38} {seconds:8.2f} {n / seconds:9.1f} {seconds / base:17.1f}x {reqs / n:15.2f} {writes / n:13.2f}")
    admin.close()


if __name__ == "__main__":
    main()
