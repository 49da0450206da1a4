"""Merged submissions on Kubernetes, side by side with one object per trial, in one run on
the testbed: the same one-GPU sweep submitted both ways (`merge: auto` against `merge: off`,
both `workload: batch`), the installed command timed as a process.

Two parts:

  submit   `stratctl submit FILE --detach --qps 0` of `--trials` trials (10,000), the
           cap at the whole study, so both hand every trial to the cluster in one go; the
           cluster's job controller and the Volcano scheduler are paused (SIGSTOP) while it
           runs and while the study is deleted again, so the API path is what is measured,
           not the scheduler's appetite for 10,000 gangs on this 2-core machine. Figures:
           seconds, the API writes stratctl made (its own count, `api_writes`), and the
           objects of the study in etcd (Jobs, PodGroups, ConfigMaps, Services), each per
           trial; merged blocks also get one PodGroup each from Volcano once their pods
           exist, counted in as `+ blocks`.
  run      `stratctl submit FILE` (following the study to its end, adaptive target) of
           `--run-trials` trials of `--seconds` each on the testbed's GPUs, everything
           running: makespan, and the study's pods sampled every 0.5 s: the peak of those
           pending, of those the scheduler has not placed on a node yet, and of those beyond
           what the GPUs free at that moment hold (the wall a sweep builds in front of the
           scheduler: pods that cannot start however fast it binds).

    python bench/merged_bench.py [--trials 10000] [--run-trials 192] [--seconds 3]

Figures go to stdout and to bench/results/merged.json with the commit they were measured at.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import RESULTS, save
from bench.testbed import testbed_target
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD, PODGROUP, SERVICE, Cluster
from stratctl.errors import NotFound

KINDS = {"jobs": BATCH_JOB, "podgroups": PODGROUP, "configmaps": CONFIGMAP, "services": SERVICE}


def study_text(name: str, namespace: str, trials: int, merge: str, seconds: float, cap: int) -> str:
    return textwrap.dedent(
        f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        workload: batch
        merge: {merge}
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
        strategy: {{kind: grid}}
        trial:
          image: busybox
          command: ["train", "--seed={{{{ params.seed }}}}"]
          annotations: {{testbed.stratctl.io/run-duration: "{seconds}s"}}
          resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}, limits: {{nvidia.com/gpu: 1}}}}
        throttle: {{qps: 50, burst: 20, parallelism: {{min: 1, initial: {cap}, max: {cap}}}}}
        """
    )


@contextmanager
def paused(target, names: tuple[str, ...]):
    """SIGSTOP the testbed's processes named (their pid files), SIGCONT after."""
    pids = []
    for name in names:
        pid_file = Path(target.kubeconfig).parent / "pids" / f"{name}.pid"
        if pid_file.exists() and not os.environ.get("STRATCTL_TEST_KUBECONFIG"):
            pids.append(int(pid_file.read_text()))
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def objects(admin: Cluster, name: str) -> dict[str, int]:
    found = {key: len(admin.list(kind, label_selector=f"{labels.STUDY}={name}")[0]) for key, kind in KINDS.items()}
    found["configmaps"] -= 1  # the study's record: one per study, either way
    return found


def delete_study(admin: Cluster, name: str) -> None:
    """Delete the run's objects and wait until they are gone. Pods the job controller made
    from a stale cache just after it was let go again (their Job already deleted) keep
    their job-tracking finalizer: taken off here."""
    for kind in (BATCH_JOB, PODGROUP, SERVICE, CONFIGMAP, POD):
        for item in admin.list(kind, label_selector=f"{labels.STUDY}={name}")[0]:
            admin.delete(kind, item["metadata"]["name"])
    for pod in admin.list(POD, label_selector=f"{labels.STUDY}={name}")[0]:
        if pod["metadata"].get("finalizers"):
            path = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"
            unhook = [{"op": "remove", "path": "/metadata/finalizers"}]
            try:
                admin.request("PATCH", path, {}, unhook, "patch pod", "application/json-patch+json")
            except NotFound:
                pass
    deadline = time.time() + 300
    while time.time() < deadline and any(
        admin.list(kind, label_selector=f"{labels.STUDY}={name}", page_size=1)[0] for kind in (BATCH_JOB, POD)
    ):
        time.sleep(1)


def settle(admin: Cluster, quiet: float = 20.0) -> None:
    """Until no pod of an earlier run is left, then `quiet` seconds more: the garbage
    collector and Volcano done with the last run before the next is timed."""
    deadline = time.time() + 300
    while time.time() < deadline and admin.list(POD, label_selector=labels.STUDY, page_size=1)[0]:
        time.sleep(2)
    time.sleep(quiet)


def stratctl(command: list[str], target, *args: str) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run(
        [
            *command,
            *args,
            "-o",
            "json",
            "--kubeconfig",
            target.kubeconfig,
            "--context",
            target.admin_context or "admin",
        ],
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"stratctl {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def submit_part(command, target, admin: Cluster, tmp: Path, trials: int) -> dict:
    figures: dict = {}
    for merge in ("auto", "off"):
        settle(admin, 10)
        name = f"mb{merge[:2]}{int(time.time()) % 100000}"
        path = tmp / f"{name}.yaml"
        path.write_text(study_text(name, target.namespace, trials, merge, 3, trials))
        with paused(target, ("kube-controller-manager", "vc-scheduler", "vc-controller-manager")):
            seconds, out = stratctl(command, target, "submit", str(path), "--detach", "--qps", "0")
            found = objects(admin, name)
            delete_study(admin, name)
        delete_study(admin, name)
        writes = out.get("api_writes")
        total = sum(found.values())
        figures[merge] = {"seconds": round(seconds, 2), "api_writes": writes, "objects": found, "objects_total": total}
        print(
            f"submit --detach {trials} trials, merge: {merge}: {seconds:.2f} s, {writes} API writes "
            f"({(writes or 0) / trials:.4f} per trial), objects {found} = {total} ({total / trials:.4f} per trial)"
        )
    return figures


def run_part(command, target, admin: Cluster, tmp: Path, trials: int, seconds: float, cap: int) -> dict:
    figures: dict = {}
    for merge in ("off", "auto"):
        settle(admin)
        name = f"mr{merge[:2]}{int(time.time()) % 100000}"
        path = tmp / f"{name}.yaml"
        path.write_text(study_text(name, target.namespace, trials, merge, seconds, cap))
        peak = {"pending": 0, "pods": 0, "unplaced": 0, "beyond_free": 0}
        stop = threading.Event()

        def sample(name=name, peak=peak, stop=stop):
            while not stop.is_set():
                every = admin.list(POD)[0]  # the namespace's: what holds its GPUs (one each)
                live = [p for p in every if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
                mine = [p for p in live if (p["metadata"].get("labels") or {}).get(labels.STUDY) == name]
                pending = [p for p in mine if p["status"]["phase"] == "Pending"]
                # pods the scheduler has not placed, and of those the ones the free GPUs cannot
                # hold: the wall of pending pods a sweep can build in front of the scheduler
                unplaced = [p for p in pending if not (p.get("spec") or {}).get("nodeName")]
                free = cap - sum(1 for p in live if (p.get("spec") or {}).get("nodeName"))
                peak["pending"] = max(peak["pending"], len(pending))
                peak["pods"] = max(peak["pods"], len(mine))
                peak["unplaced"] = max(peak["unplaced"], len(unplaced))
                peak["beyond_free"] = max(peak["beyond_free"], len(unplaced) - max(0, free))
                stop.wait(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            wall, out = stratctl(command, target, "submit", str(path), "--poll-interval", "1")
        finally:
            stop.set()
            sampler.join(5)
        found = objects(admin, name)
        delete_study(admin, name)
        figures[merge] = {
            "makespan_s": round(wall, 1),
            "succeeded": out.get("succeeded"),
            "api_writes": out.get("api_writes"),
            "peak_pending_pods": peak["pending"],
            "peak_unplaced_pods": peak["unplaced"],
            "peak_pods_beyond_free_gpus": peak["beyond_free"],
            "peak_live_pods": peak["pods"],
            "objects": found,
        }
        print(
            f"run {trials} x {seconds:g}s, merge: {merge}: makespan {wall:.1f} s, {out.get('succeeded')} succeeded, "
            f"{out.get('api_writes')} API writes, peak pending pods {peak['pending']} ({peak['unplaced']} not placed, "
            f"{peak['beyond_free']} beyond the free GPUs), peak live pods {peak['pods']}"
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--run-trials", type=int, default=192)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cap", type=int, default=64, help="the run part's parallelism.max (the testbed's GPUs)")
    parser.add_argument("--stratctl", default=f"{sys.executable} -m stratctl", help="the command to time")
    parser.add_argument("--skip-submit", action="store_true")
    args = parser.parse_args()
    target = testbed_target()
    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    command = args.stratctl.split()
    figures: dict = {"trials": args.trials, "run_trials": args.run_trials, "seconds": args.seconds, "cap": args.cap}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_submit:
            figures["submit"] = submit_part(command, target, admin, Path(tmp), args.trials)
            merged, single = figures["submit"]["auto"], figures["submit"]["off"]
            figures["submit_speedup"] = round(single["seconds"] / merged["seconds"], 1)
            print(f"submit --detach: merged is {figures['submit_speedup']}x faster")
        elif (RESULTS / "merged.json").exists():  # the submit part's last figures kept, with their commit
            last = json.loads((RESULTS / "merged.json").read_text())
            if "submit" in last:
                figures["submit"] = {**last["submit"], "commit": last["submit"].get("commit") or last.get("commit")}
                figures["submit_speedup"] = last.get("submit_speedup")
        figures["run"] = run_part(command, target, admin, Path(tmp), args.run_trials, args.seconds, args.cap)
        merged, single = figures["run"]["auto"], figures["run"]["off"]
        figures["makespan_ratio"] = round(merged["makespan_s"] / single["makespan_s"], 2)
        print(f"makespan merged / one Job per trial: {figures['makespan_ratio']}")
    print(f"saved {save('merged', figures)}")


if __name__ == "__main__":
    main()
