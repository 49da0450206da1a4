"""Adaptive parallelism against static limits, on a real cluster with a competing workload.

N trials in three studies submitted side by side (gangs of 2, 3 and 4 one-GPU pods,
durations drawn from a distribution; three `stratctl submit` processes sharing a cluster,
as teams do) are
run to completion four times, in sequence, while a high-priority workload takes and
releases GPUs on the same schedule each time:

  submit-all   every trial at once (what `kubectl apply -f DIR` does)
  static-small a small fixed cap
  static-large a large fixed cap
  static-yield the large cap, yielding to the competing high-priority gangs as adaptive does
  adaptive     stratctl's default policy
  adaptive-noyield  the same with throttle.yield_to_higher_priority off (on request: --only)

For each it reports the makespan, its lower bound (the trials' GPU-seconds over the GPU
capacity the competing load left, as sampled during that run), the GPU idle fraction while trials waited, the peak
of Pending pods, 429s and API writes per trial.

    python bench/adaptive_experiment.py [--trials 100] [--only adaptive,submit-all]

`measure()` is also used by the smaller CI version in tests/e2e/test_adaptive.py.
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
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import save, scalars
from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, NODE, POD, PODGROUP, VOLCANO_JOB, Cluster
from stratctl.backends.kubernetes.objects.gpus import Placement, free_gpus, placeable, pod_gpus
from stratctl.core.space import expand
from stratctl.core.spec import load_study


def study_text(
    name: str,
    namespace: str,
    trials: int,
    seed: int,
    max_inflight: int,
    gang: int,
    initial: int = 4,
    yields: bool = True,
    workload: str = "volcano",
) -> str:
    return textwrap.dedent(
        f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        workload: {workload}
        priority_class: stratctl-low
        space:
          lr: {{type: loguniform, low: 1.0e-5, high: 1.0e-1}}
          duration: {{type: int, low: 8, high: 24}}
        strategy: {{kind: random, seed: {seed}, trials: {trials}}}
        trial:
          image: busybox
          command: ["train", "--lr={{{{ params.lr }}}}"]
          annotations:
            testbed.stratctl.io/run-duration: "{{{{ params.duration }}}}s"
          resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}}}
          tasks: [{{name: worker, replicas: {gang}}}]
        throttle: {{qps: 20, burst: 20, yield_to_higher_priority: {str(yields).lower()},
                    parallelism: {{min: 1, initial: {min(initial, max_inflight)}, max: {max_inflight}}}}}
        cost: {{expected_duration: "{{{{ params.duration }}}}s"}}
        """
    )


COMPETING = "bench.stratctl.io/competing"


@dataclass(frozen=True)
class Phase:
    """The competing workload: from `start` to `end` seconds it holds `gpus` GPUs."""

    start: float
    end: float
    gpus: int


def competing_schedule(total_gpus: int, horizon: float, scale: float = 1.0) -> list[Phase]:
    """Half the cluster for 30 s, released for 30 s, three quarters for 30 s, and so on
    (every time multiplied by `scale`)."""
    phases, t, shares = [], 5.0 * scale, [0.5, 0.75, 0.5, 0.25]
    i = 0
    while t < horizon:
        phases.append(Phase(t, t + 30 * scale, int(total_gpus * shares[i % len(shares)])))
        t += 60 * scale
        i += 1
    return phases


def scheduled_series(schedule: list[Phase], step: float = 0.5) -> list[tuple[float, int]]:
    """The GPUs the competing load asks for, as a (time, GPUs) series like the sampled one:
    what it would hold if every phase got its GPUs the moment it starts."""
    if not schedule:
        return []
    end = max(p.end for p in schedule)
    return [
        (i * step, sum(p.gpus for p in schedule if p.start <= i * step < p.end)) for i in range(int(end / step) + 2)
    ]


def competing_job(name: str, namespace: str, gpus: int, seconds: float) -> dict:
    pods = gpus  # one GPU each, spread by the scheduler
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {COMPETING: "true"}},
        "spec": {
            "schedulerName": "volcano",
            "queue": "default",
            "priorityClassName": "stratctl-high",
            "minAvailable": pods,
            "maxRetry": 1,
            "tasks": [
                {
                    "name": "prod",
                    "replicas": pods,
                    "minAvailable": pods,
                    "template": {
                        "metadata": {
                            "labels": {COMPETING: "true"},
                            "annotations": {"testbed.stratctl.io/run-duration": f"{int(seconds)}s"},
                        },
                        "spec": {
                            "restartPolicy": "Never",
                            "schedulerName": "volcano",
                            "priorityClassName": "stratctl-high",
                            "containers": [
                                {
                                    "name": "prod",
                                    "image": "busybox",
                                    "resources": {
                                        "requests": {"nvidia.com/gpu": "1", "cpu": "100m"},
                                        "limits": {"nvidia.com/gpu": "1"},
                                    },
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


@dataclass
class Samples:
    competing: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, GPUs held)
    idle_while_waiting: list[float] = field(default_factory=list)
    peak_pending_pods: int = 0  # unscheduled pods of ours, in transit included
    peak_pending_gangs: int = 0  # PodGroups of ours waiting in Volcano's queue (Pending or Inqueue)
    peak_stuck_pods: int = 0  # of those, pods that had waited 2 s or more (four scheduler periods)
    max_pending_age: float = 0.0  # seconds the longest-waiting pending pod of ours had waited
    peak_pending_why: str = ""  # what the pending pods at the peak were waiting in
    lost_gpu_seconds: float = 0.0  # run time of our pods that vanished while running (evicted)
    evicted_pods: int = 0
    idle_gpu_seconds: float = 0.0  # free GPU-seconds while trials waited
    idle_while_gathering: float = 0.0  # of those, while a competing gang waited for its GPUs
    idle_by_cause: dict[str, float] = field(default_factory=lambda: {"gathering": 0.0, "handoff": 0.0, "tail": 0.0})
    timeline: list[tuple] = field(
        default_factory=list
    )  # (s, free GPUs, competing GPUs, our bound GPUs, our pending pods, our queued gangs)
    competing_started: dict[str, float] = field(
        default_factory=dict
    )  # competing job -> seconds when all its GPUs were bound


class Sampler(threading.Thread):
    """Twice a second: free GPUs and the studies' unscheduled Pending pods, while trials wait."""

    def __init__(self, admin: Cluster, studies: list[str], total_gpus: int, waiting):
        super().__init__(daemon=True)
        self.admin, self.studies, self.total, self.waiting = admin, set(studies), total_gpus, waiting
        self.first_pending: dict[str, float] = {}
        self.running: dict[str, tuple[float, float, int]] = {}  # pod -> (first seen running, last seen, GPUs)
        self.started = time.monotonic()
        self.samples = Samples()
        self.stop = threading.Event()
        self.competing_size: dict[str, int] = {}  # competing job -> pods in its gang
        self.groups_seen: set[str] = set()  # PodGroups of the studies ever seen (Volcano deletes finished ones)
        self.last_sample = self.started

    def _account_evictions(self, ours: list[dict], now: float) -> None:
        """Work lost to preemption, measured from the outside: a pod of ours that was running
        and is gone (Volcano deletes evicted pods and restarts the gang) lost the time it had
        run; the fake trials cannot resume from a checkpoint, so all of it is lost."""
        present = {p["metadata"]["name"]: p for p in ours}
        for name, (since, last, gpus) in list(self.running.items()):
            pod = present.get(name)
            if pod is None:
                self.samples.lost_gpu_seconds += (last - since) * gpus
                self.samples.evicted_pods += 1
                del self.running[name]
            elif pod.get("status", {}).get("phase") != "Running":
                del self.running[name]  # finished
        for name, pod in present.items():
            if pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
                since = self.running.get(name, (now, now, 0))[0]
                self.running[name] = (since, now, pod_gpus(pod))

    def _account_competing(self, bound: list[dict], now: float) -> None:
        """When each competing job had its whole gang on nodes (what production waited for)."""
        per_job: dict[str, int] = {}
        for pod in bound:
            job = (pod["metadata"].get("labels") or {}).get("volcano.sh/job-name", "")
            per_job[job] = per_job.get(job, 0) + 1
        for job, count in per_job.items():
            if count >= self.competing_size.get(job, 1 << 30):
                self.samples.competing_started.setdefault(job, now)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                nodes, _ = self.admin.list(NODE)
                pods, _ = self.admin.list(POD, all_namespaces=True)
                groups, _ = self.admin.list(PODGROUP)
            except Exception:
                continue
            bound = [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get(COMPETING) == "true"
                and p.get("spec", {}).get("nodeName")
                and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            ]
            held = sum(pod_gpus(p) for p in bound)
            self.samples.competing.append((time.monotonic() - self.started, held))
            self._account_competing(bound, time.monotonic() - self.started)
            ours = [p for p in pods if (p["metadata"].get("labels") or {}).get(labels.STUDY) in self.studies]
            mine = [
                g
                for g in groups
                if (g["metadata"].get("labels") or {}).get(labels.STUDY) in self.studies
                or any(
                    o.get("name", "").startswith(tuple(self.studies))
                    for o in g["metadata"].get("ownerReferences") or []
                )
            ]
            self.groups_seen.update(g["metadata"]["name"] for g in mine)
            waiting_gangs = sum(
                1 for g in mine if (g.get("status") or {}).get("phase", "Pending") in ("Pending", "Inqueue")
            )
            self.samples.peak_pending_gangs = max(self.samples.peak_pending_gangs, waiting_gangs)
            # Pending pods as the scheduler counts them: created, not yet bound to a node
            pending = [
                p["metadata"]["name"]
                for p in ours
                if p.get("status", {}).get("phase") == "Pending" and not p.get("spec", {}).get("nodeName")
            ]
            self._account_evictions(ours, time.monotonic())
            if len(pending) > self.samples.peak_pending_pods:
                self.samples.peak_pending_why = pending_breakdown(ours, groups, self.admin)
            self.samples.peak_pending_pods = max(self.samples.peak_pending_pods, len(pending))
            now = time.monotonic()
            for name in pending:
                self.first_pending.setdefault(name, now)
            for name in list(self.first_pending):
                if name not in pending:
                    del self.first_pending[name]
            ages = [now - t for t in self.first_pending.values()]
            self.samples.max_pending_age = max([self.samples.max_pending_age] + ages)
            self.samples.peak_stuck_pods = max(self.samples.peak_stuck_pods, sum(1 for a in ages if a >= 2.0))
            ours_bound = sum(
                pod_gpus(p)
                for p in ours
                if p.get("spec", {}).get("nodeName") and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            )
            self.samples.timeline.append(
                (
                    round(now - self.started, 1),
                    sum(free_gpus(nodes, pods).values()),
                    held,
                    ours_bound,
                    len(pending),
                    waiting_gangs,
                )
            )
            free = sum(free_gpus(nodes, pods).values())
            dt, self.last_sample = now - self.last_sample, now  # a sample's period: 0.5 s plus the lists
            gathering = bool(set(self.competing_size) - set(self.samples.competing_started))
            waiting = self.waiting(len(self.groups_seen), waiting_gangs)
            # every free GPU-second of the run, by why it was free: a competing gang was
            # gathering its GPUs; trials waited (the path from one trial's end to the next
            # one's start, and gangs that do not fit the holes); or none waited any more (the tail)
            cause = "gathering" if gathering else "handoff" if waiting else "tail"
            self.samples.idle_by_cause[cause] += free * dt
            if waiting:
                self.samples.idle_while_waiting.append(free / self.total)
                self.samples.idle_gpu_seconds += free * dt
                if gathering:
                    self.samples.idle_while_gathering += free * dt


@dataclass
class Result:
    strategy: str
    makespan: float
    lower_bound: float
    idle_fraction: float
    peak_pending_pods: int
    throttled_429: int
    writes_per_trial: float
    succeeded: int
    failed: int
    total: int
    max_pending_age: float = 0.0
    peak_stuck_pods: int = 0
    total_gpus: int = 0
    peak_pending_gangs: int = 0
    peak_pending_why: str = ""
    lost_gpu_seconds: float = 0.0
    evicted_pods: int = 0
    bound_with_losses: float = 0.0  # the lower bound once the work preemption destroyed is redone
    idle_gpu_seconds: float = 0.0
    idle_while_gathering: float = 0.0
    production_waits: tuple[float, ...] = ()
    production_unplaced: int = 0  # of those, jobs still waiting when the studies ended (their wait is a floor)
    timeline: list = field(default_factory=list)  # the sampler's (s, free, competing, ours, pending pods, queued gangs)
    scheduled_bound: float = 0.0  # the lower bound had the competing load held its GPUs exactly on schedule
    idle_by_cause: dict = field(default_factory=dict)  # free GPU-seconds of the run: gathering, handoff, tail
    competing_after_bound: float = 0.0  # GPU-seconds the competing load held between the bound and the makespan


def pending_breakdown(pods: list[dict], groups: list[dict], admin: Cluster) -> str:
    """Pending pods of ours by why they exist: a gang restarted after an eviction (its job's
    retryCount > 0) or a fresh gang, and the phase of its PodGroup."""
    try:
        jobs, _ = admin.list(VOLCANO_JOB)
    except Exception:
        return ""
    restarted = {j["metadata"]["name"] for j in jobs if (j.get("status") or {}).get("retryCount")}
    phase = {}
    for g in groups:
        for o in g["metadata"].get("ownerReferences") or []:
            phase[o.get("name")] = (g.get("status") or {}).get("phase", "Pending")
    counts: dict[str, int] = {}
    for p in pods:
        if p.get("status", {}).get("phase") != "Pending" or p.get("spec", {}).get("nodeName"):
            continue
        job = (p["metadata"].get("labels") or {}).get("volcano.sh/job-name", "")
        key = f"{'restarted' if job in restarted else 'fresh'} gang, PodGroup {phase.get(job, '?')}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def lower_bound(gpu_seconds: float, total_gpus: int, competing: list[tuple[float, int]]) -> float:
    """Smallest T with ∫₀ᵀ (capacity − GPUs the competing load really held) dt ≥ the trials'
    GPU-seconds; `competing` is the sampled (time, GPUs held) series, zero after it ends."""
    t, done, step = 0.0, 0.0, 0.05
    i = 0
    while done < gpu_seconds:
        while i + 1 < len(competing) and competing[i + 1][0] <= t:
            i += 1
        busy = competing[i][1] if competing and competing[0][0] <= t <= competing[-1][0] else 0
        done += (total_gpus - busy) * step
        t += step
    return t


def held_between(competing: list[tuple[float, int]], start: float, end: float) -> float:
    """GPU-seconds of a sampled (time, GPUs) series between two times."""
    return sum(
        held * (min(t1, end) - max(t0, start))
        for (t0, held), (t1, _) in zip(competing, competing[1:])
        if t1 > start and t0 < end
    )


def cleanup(admin: Cluster, study: str) -> None:
    for kind in (VOLCANO_JOB, BATCH_JOB, PODGROUP, CONFIGMAP):
        items, _ = admin.list(kind, label_selector=f"{labels.STUDY}={study}")
        for item in items:
            admin.delete(kind, item["metadata"]["name"])
    jobs, _ = admin.list(VOLCANO_JOB, label_selector=f"{COMPETING}=true")
    for job in jobs:
        admin.delete(VOLCANO_JOB, job["metadata"]["name"])
    # wait until the pods are gone so the next run starts from an empty cluster
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods, _ = admin.list(POD, all_namespaces=True)
        if not [p for p in pods if pod_gpus(p) and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]:
            return
        time.sleep(1)


GANGS = (2, 3, 4)


def measure(
    strategy: str,
    cap: int | None,
    target,
    trials: int,
    seed: int,
    tag: str,
    schedule_factory=competing_schedule,
    horizon: float = 900,
    gangs=GANGS,
    duration: tuple[int, int] = (8, 24),
    initial: int = 4,
    yields: bool | None = None,
    workload: str = "volcano",
    stratctl: list[str] | None = None,
) -> Result:
    """Run `trials` trials split over one study per gang size, side by side, to the end.

    `cap` None is the adaptive policy (bounded by the study size); otherwise a static cap
    per study (the total cap split evenly). `yields`: whether the studies yield to the
    competing higher-priority gangs (default: adaptive does, static caps do not, as the
    tools they stand for do not). `stratctl`: the command that starts each team's stratctl
    (default [python, -m, stratctl] from this checkout; e.g. an installed venv's bin/stratctl)."""
    stratctl = stratctl or [sys.executable, "-m", "stratctl"]
    yields = cap is None if yields is None else yields
    admin = Cluster.connect(target.kubeconfig, target.admin_context, target.namespace)
    nodes, _ = admin.list(NODE)
    total_gpus = sum(free_gpus(placeable(nodes, [Placement()]), []).values())  # not a node tainted for others
    names = [f"exp-{strategy}-{tag}-g{g}"[:40] for g in gangs]
    per_study = [trials // len(gangs) + (1 if i < trials % len(gangs) else 0) for i in range(len(gangs))]
    progress: dict[str, object] = {}
    errors: list[BaseException] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths, gpu_seconds = [], 0.0
        for name, gang, n in zip(names, gangs, per_study):
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(
                study_text(name, target.namespace, n, seed, n, gang, initial, yields, workload).replace(
                    "low: 8, high: 24", f"low: {duration[0]}, high: {duration[1]}"
                )
            )
            paths.append(path)
            gpu_seconds += sum(gang * t.params["duration"] for t in expand(load_study(path)))
        schedule = schedule_factory(total_gpus, horizon)

        def waiting(created: int, queued: int) -> bool:
            """Trials wait while some are not created yet or are queued (each has a PodGroup)."""
            return any(t.is_alive() for t in threads) and (created < trials or queued > 0)

        sampler = Sampler(admin, names, total_gpus, waiting)
        created: dict[str, float] = {}  # competing job -> seconds since start when it was created
        stop = threading.Event()
        started = time.monotonic()

        def competitor():
            for i, phase in enumerate(schedule):
                delay = started + phase.start - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    return
                name = f"prod-{tag}-{strategy}-{i}"[:60]
                sampler.competing_size[name] = phase.gpus
                created[name] = time.monotonic() - started
                admin.create(competing_job(name, target.namespace, phase.gpus, phase.end - phase.start))

        def launcher(name, path, n):
            """One team's `stratctl submit`, a process of its own as on a laptop or in CI."""
            study_cap = None if cap is None else max(1, round(cap * n / trials))
            context = target.restricted_context or target.admin_context
            argv = [
                *stratctl,
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
                "--parallelism",
                "adaptive" if cap is None else "static",
                *(["--max-inflight", str(study_cap)] if study_cap else []),
                "-o",
                "json",
            ]
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
            for line in proc.stderr:  # the loop's log lines (no terminal: one line per event)
                print(f"  [{name}] {line.rstrip()}", flush=True)
            out = proc.stdout.read()
            if proc.wait() not in (0, 1):
                errors.append(RuntimeError(f"{name}: submit exited {proc.returncode}"))
                return
            progress[name] = SimpleNamespace(**json.loads(out))

        threads = [threading.Thread(target=launcher, args=args, daemon=True) for args in zip(names, paths, per_study)]
        comp = threading.Thread(target=competitor, daemon=True)
        comp.start()
        sampler.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        makespan = time.monotonic() - started
        stop.set()
        sampler.stop.set()
    if errors:
        raise errors[0]
    done = list(progress.values())
    idle = sampler.samples.idle_while_waiting
    bound = lower_bound(gpu_seconds, total_gpus, sampler.samples.competing)
    result = Result(
        strategy=strategy,
        makespan=makespan,
        lower_bound=bound,
        idle_fraction=sum(idle) / len(idle) if idle else 0.0,
        peak_pending_pods=sampler.samples.peak_pending_pods,
        throttled_429=sum(p.throttled_429 for p in done),
        writes_per_trial=sum(p.api_writes for p in done) / max(1, trials),
        succeeded=sum(p.succeeded for p in done),
        failed=sum(p.failed for p in done),
        total=sum(p.total for p in done),
        max_pending_age=sampler.samples.max_pending_age,
        peak_stuck_pods=sampler.samples.peak_stuck_pods,
        peak_pending_gangs=sampler.samples.peak_pending_gangs,
        peak_pending_why=sampler.samples.peak_pending_why,
        lost_gpu_seconds=sampler.samples.lost_gpu_seconds,
        evicted_pods=sampler.samples.evicted_pods,
        bound_with_losses=lower_bound(
            gpu_seconds + sampler.samples.lost_gpu_seconds, total_gpus, sampler.samples.competing
        ),
        total_gpus=total_gpus,
        timeline=sampler.samples.timeline,
        idle_gpu_seconds=sampler.samples.idle_gpu_seconds,
        idle_while_gathering=sampler.samples.idle_while_gathering,
        production_waits=tuple(
            sampler.samples.competing_started.get(job, makespan) - at for job, at in created.items()
        ),
        production_unplaced=len(set(created) - set(sampler.samples.competing_started)),
        scheduled_bound=lower_bound(gpu_seconds, total_gpus, scheduled_series(schedule)),
        idle_by_cause=dict(sampler.samples.idle_by_cause),
        competing_after_bound=held_between(sampler.samples.competing, bound, makespan),
    )
    for name in names:
        cleanup(admin, name)
    admin.close()
    return result


def main() -> None:
    from bench.testbed import testbed_target

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--small", type=int, default=4)
    parser.add_argument("--large", type=int, default=20)
    parser.add_argument(
        "--only",
        default="submit-all,static-small,static-large,static-yield,adaptive",
        help="strategies to run; static-yield is the large cap, yielding to production as adaptive does; "
        "adaptive-noyield is adaptive with yielding off, like for like with the other static caps",
    )
    parser.add_argument(
        "--initial",
        type=int,
        default=4,
        help="the studies' parallelism.initial (adaptive's starting target; default the study default)",
    )
    parser.add_argument(
        "--workload",
        choices=("volcano", "batch"),
        default="volcano",
        help="trials as Volcano Jobs, or batch/v1 Jobs with a PodGroup (their pods exist at once)",
    )
    parser.add_argument("--timeline", help="write each run's sampled timeline (JSON, in run order) to this file")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply the trial durations (8-24 s) and the competing schedule by this",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the strategies this many rounds (interleaved) and compare their medians",
    )
    args = parser.parse_args()
    scale = args.time_scale
    duration = (round(8 * scale), round(24 * scale))
    target = testbed_target()
    tag = str(int(time.time()))[-5:]
    caps = {
        "submit-all": args.trials,
        "static-small": args.small,
        "static-large": args.large,
        "static-yield": args.large,
        "adaptive": None,
        "adaptive-noyield": None,
    }
    results = []
    for round_ in range(args.repeat):
        for strategy in args.only.split(","):
            print(
                f"running {strategy}{f' (round {round_ + 1} of {args.repeat})' if args.repeat > 1 else ''} ...",
                flush=True,
            )
            results.append(
                measure(
                    strategy,
                    caps[strategy],
                    target,
                    args.trials,
                    args.seed,
                    f"{tag}{round_}",
                    initial=args.initial,
                    yields={"static-yield": True, "adaptive-noyield": False}.get(strategy),
                    workload=args.workload,
                    duration=duration,
                    horizon=900 * scale,
                    schedule_factory=lambda gpus, horizon: competing_schedule(gpus, horizon, scale),
                )
            )
    report(results, args, duration, scale)
    save(
        "adaptive" if args.workload == "volcano" else f"adaptive-{args.workload}",
        {"trials": args.trials, "repeat": args.repeat, "time_scale": scale, "runs": [scalars(r) for r in results]},
    )


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def by_strategy(results: list[Result]) -> dict[str, list[Result]]:
    by: dict[str, list[Result]] = {}
    for r in results:
        by.setdefault(r.strategy, []).append(r)
    return by


def medians(results: list[Result]) -> dict[str, Result]:
    """Per strategy, its run of median makespan (the lower of the two middle ones for an even count)."""
    return {
        name: sorted(runs, key=lambda r: r.makespan)[(len(runs) - 1) // 2]
        for name, runs in by_strategy(results).items()
    }


def report(results: list[Result], args, duration: tuple[int, int], scale: float) -> None:
    chosen = medians(results)
    # adaptive yields to production: compare it with the static caps that do too
    best_static = min(
        (r.makespan for r in chosen.values() if r.strategy == "static-yield"),
        default=min((r.makespan for r in chosen.values() if not r.strategy.startswith("adaptive")), default=None),
    )
    print(
        f"\n{args.trials} trials in 3 studies (gangs of 2, 3, 4 one-GPU pods, {args.workload} workload), "
        f"{duration[0]}–{duration[1]} s each, against a competing high-priority load (schedule × {scale:g})\n"
    )
    header = (
        f"{'strategy':13} {'makespan s':>10} {'bound s':>8} {'ratio':>6} {'idle':>6} {'peak pending':>13} "
        f"{'peak >2s':>9} {'longest wait s':>15} {'queued gangs':>13} {'429s':>5} {'writes/trial':>13} {'done':>8}"
    )
    print(header)
    for r in results:
        print(
            f"{r.strategy:13} {r.makespan:10.1f} {r.lower_bound:8.1f} {r.makespan / r.lower_bound:6.2f} "
            f"{r.idle_fraction * 100:5.1f}% {r.peak_pending_pods:13d} {r.peak_stuck_pods:9d} {r.max_pending_age:15.1f} "
            f"{r.peak_pending_gangs:13d} "
            f"{r.throttled_429:5d} {r.writes_per_trial:13.2f} {r.succeeded}/{r.total}"
        )
    by = by_strategy(results)
    runs = max(len(rs) for rs in by.values())
    if runs > 1:
        print(f"\nmedians over {runs} rounds (makespan, its ratio to that run's bound; all runs in brackets):")
        for name, rs in by.items():
            print(
                f"  {name:16} {median([r.makespan for r in rs]):7.1f} s  ratio "
                f"{median([r.makespan / r.lower_bound for r in rs]):.2f}  "
                f"[{', '.join(f'{r.makespan:.1f} s / {r.makespan / r.lower_bound:.2f}' for r in rs)}]"
            )
    print(
        "\npeak pending: most unscheduled pods of the studies at once (in transit included); "
        "peak >2s: of those, pods that had waited 2 s or more; queued gangs: most PodGroups of the studies "
        "waiting in Volcano's queue; idle: free GPU share while trials waited"
    )
    for r in results:
        waits = ", ".join(f"{w:.0f} s" for w in r.production_waits)
        unplaced = f" ({r.production_unplaced} still waiting at the end)" if r.production_unplaced else ""
        print(
            f"  {r.strategy}: the competing jobs created during the run waited {waits or '-'}{unplaced} "
            f"for their GPUs; "
            f"{r.idle_gpu_seconds:.0f} GPU-s idle while trials waited, {r.idle_while_gathering:.0f} of them "
            f"while a competing gang was gathering its GPUs"
        )
    for r in results:
        print(
            f"  {r.strategy}: at the peak, {r.peak_pending_why or 'no pending pods'}; {r.evicted_pods} running pods "
            f"evicted, {r.lost_gpu_seconds:.0f} GPU-s of trial work lost and redone; bound with that work "
            f"{r.bound_with_losses:.1f} s, makespan / it = {r.makespan / r.bound_with_losses:.2f}"
        )
    print(
        "\nthe gap to the bound, (makespan − bound) × GPUs, is every free GPU-second of the run plus the "
        "competing load's GPU-seconds after the bound (the bound assumes the studies end before them); "
        "sched bound: the bound had the competing load got its GPUs exactly on schedule"
    )
    for r in results:
        causes = r.idle_by_cause
        print(
            f"  {r.strategy}: gap {(r.makespan - r.lower_bound) * r.total_gpus:.0f} GPU-s = "
            f"{causes.get('gathering', 0):.0f} free while a competing gang gathered + "
            f"{causes.get('handoff', 0):.0f} free while trials waited otherwise + "
            f"{causes.get('tail', 0):.0f} free in the tail + {r.competing_after_bound:.0f} competing after the bound; "
            f"sched bound {r.scheduled_bound:.1f} s, makespan / it = {r.makespan / r.scheduled_bound:.2f}"
        )
    if args.timeline:
        Path(args.timeline).write_text(json.dumps([{"strategy": r.strategy, "timeline": r.timeline} for r in results]))
    adaptive, submit_all = chosen.get("adaptive"), chosen.get("submit-all")
    if adaptive and best_static:
        print(f"\nadaptive makespan / lower bound: {adaptive.makespan / adaptive.lower_bound:.2f} (target ≤ 1.15)")
        print(f"adaptive makespan / static cap that yields too: {adaptive.makespan / best_static:.2f} (target ≤ 1.00)")
        print(
            f"adaptive makespan / lower bound, against the best ratio of a static cap: "
            f"{adaptive.makespan / adaptive.lower_bound:.2f} vs "
            f"{min(r.makespan / r.lower_bound for r in chosen.values() if not r.strategy.startswith('adaptive')):.2f}"
        )
    noyield = chosen.get("adaptive-noyield")
    static = [r.makespan for r in chosen.values() if r.strategy in ("submit-all", "static-small", "static-large")]
    if noyield and static:
        print(
            f"adaptive without yielding: makespan / the best static cap that does not yield either: "
            f"{noyield.makespan / min(static):.2f} (target ≤ 1.00); / its bound: "
            f"{noyield.makespan / noyield.lower_bound:.2f}"
        )
    if adaptive and submit_all:
        print(
            f"adaptive peak pending pods / submit-all's: {adaptive.peak_pending_pods}/{submit_all.peak_pending_pods} "
            f"(target ≤ 1/5)"
        )
        print(
            f"adaptive peak queued gangs / submit-all's: {adaptive.peak_pending_gangs}/{submit_all.peak_pending_gangs}"
        )


if __name__ == "__main__":
    main()
