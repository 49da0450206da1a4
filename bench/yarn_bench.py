"""YARN: stratctl against the way YARN users throttle a sweep today, side by side on the
YARN testbed (testbed/yarn/: a ResourceManager and 2 NodeManagers × 4 GPUs in one JVM),
every method as a process.

Submission throughput, N trials of one GPU that sleep long (8 start, the rest wait):
  loop      a plain client loop: one process that sends, N times in a row over one
            keep-alive connection, `new-application` then the submission, bodies built
            beforehand exactly as stratctl builds them (the RM's ceiling for one client);
  stratctl  `stratctl submit FILE --detach --qps 0 --parallelism static --max-inflight N`,
            timed from exec to exit (start-up, render and the study's listing included).
Each runs `--repeat` times, interleaved; medians compared. Every application of a run is
killed, and the cluster idle again, before the next.

Makespan, M trials of one GPU that each sleep S seconds (the cluster holds 8 at once):
  maxParallelApps=K  the static cap YARN users set on the queue
            (`yarn.scheduler.capacity.root.research.max-parallel-apps`, refreshed with
            `yarn rmadmin -refreshQueues`), all M submitted at once by the plain loop, for
            K = 2 (a cautious user) and 8 (a user who knows the idle cluster's size);
  stratctl  `stratctl submit FILE` with the adaptive policy and no cap given.
From the first submission to the last application's end (the RM's finishedTime), the GPU
utilisation over that span (the applications' own yarn.io/gpu seconds, resourceSecondsMap,
over 8 × makespan) and the useful part of it (M × S over 8 × makespan).

Figures go to stdout and bench/results/yarn.json with the commit they were measured at.

    python bench/yarn_bench.py [--trials 60] [--sweep 24] [--seconds 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import save  # noqa: E402
from tests.e2e.support import testbed_up  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GPUS = 8  # the testbed's: 2 NodeManagers × 4
ENV: dict[str, str] = {}
RM = ""

# the plain loop: N × (new-application, submission) over one keep-alive connection
LOOP = """
import http.client, json, sys, urllib.parse
bodies = json.load(open(sys.argv[1]))
rm = urllib.parse.urlsplit(sys.argv[2])
conn = http.client.HTTPConnection(rm.hostname, rm.port, timeout=30)
for body in bodies:
    conn.request("POST", "/ws/v1/cluster/apps/new-application")
    answer = conn.getresponse()
    app = json.loads(answer.read())["application-id"]
    body["application-id"] = app
    conn.request("POST", "/ws/v1/cluster/apps", json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    answer.read()
    if answer.status != 202:
        sys.exit(f"submission: HTTP {answer.status}")
"""


def get(path: str) -> dict:
    with urllib.request.urlopen(f"{RM}/ws/v1/cluster/{path}", timeout=30) as answer:
        return json.loads(answer.read())


def apps(study: str) -> list[dict]:
    return (get(f"apps?applicationTags=stratctl-study:{study}").get("apps") or {}).get("app") or []


def free_gpus() -> int:
    return sum(i["value"] for n in get("nodes")["nodes"]["node"]
               for i in n["availableResource"]["resourceInformations"]["resourceInformation"]
               if i["name"] == "yarn.io/gpu")


def kill_all(study: str) -> None:
    for app in apps(study):
        if app["state"] not in ("FINISHED", "FAILED", "KILLED"):
            request = urllib.request.Request(f"{RM}/ws/v1/cluster/apps/{app['id']}/state", method="PUT",
                                             data=b'{"state": "KILLED"}', headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=30).close()
    deadline = time.monotonic() + 180
    while free_gpus() < GPUS or any(a["state"] not in ("FINISHED", "FAILED", "KILLED") for a in apps(study)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{study}: the cluster did not become idle")
        time.sleep(0.5)


def study(path: Path, name: str, trials: int, seconds: float) -> Path:
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        backend: yarn
        yarn: {{resource_managers: ["{RM}"], queue: research}}
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
        strategy: {{kind: grid}}
        trial:
          command: ["sleep", "{seconds:g}"]
          resources: {{requests: {{memory: 256Mi}}, limits: {{nvidia.com/gpu: 1}}}}
          tasks: [{{name: worker, replicas: 1}}]
        """))
    return path


def bodies(path: Path, workdir: Path) -> Path:
    """The submissions stratctl would send for every trial's first attempt, as a JSON file."""
    from stratctl.study.render import Renderer, bundled_templates
    from stratctl.study.space import expand
    from stratctl.study.spec import load_study
    from stratctl.yarn.app import Jar, build
    from stratctl.yarn.rest import ResourceManager
    from stratctl.yarn.scheduler import output_of

    loaded = load_study(path)
    renderer = Renderer(loaded)
    jar = Jar.of(Path(ENV["STRATCTL_YARN_AM_JAR"]))
    classpath = ResourceManager([RM]).conf("yarn.application.classpath").split(",")
    out = [build(loaded, renderer.render(t), [bundled_templates()], output_of(loaded, workdir)).body(
        "", loaded, jar, classpath) for t in expand(loaded)]
    target = workdir / f"{loaded.name}.bodies.json"
    target.write_text(json.dumps(out))
    return target


def submit_loop(path: Path, workdir: Path) -> float:
    sent = bodies(path, workdir)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", LOOP, str(sent), RM], check=True, env=ENV)
    return time.perf_counter() - started


def submit_stratctl(path: Path, workdir: Path, n: int) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "stratctl", "submit", str(path), "--detach", "--qps", "0",
                           "--parallelism", "static", "--max-inflight", str(n), "--workers", "8", "-o", "json"],
                          env=ENV, cwd=workdir, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or json.loads(done.stdout)["created"] != n:
        raise RuntimeError(f"stratctl submit: {done.stderr[-1000:]}")
    return elapsed


# -- makespan ---------------------------------------------------------------------------------


def max_parallel_apps(cap: int | None) -> None:
    """Set (or, with None, remove) research's maxParallelApps and refresh the queues."""
    conf = Path(ENV["STRATCTL_YARN_RUN"]) / "etc" / "capacity-scheduler.xml"
    text = re.sub(r"<property><name>yarn\.scheduler\.capacity\.root\.research\.max-parallel-apps</name>"
                  r"<value>\d+</value>.*?</property>", "", conf.read_text(), flags=re.S)
    if cap is not None:
        text = text.replace("</configuration>", "<property><name>yarn.scheduler.capacity.root.research."
                            f"max-parallel-apps</name><value>{cap}</value></property></configuration>")
    conf.write_text(text)
    subprocess.run(["bash", str(REPO / "testbed/yarn/yarn.sh"), "rmadmin", "-refreshQueues"], check=True, env=ENV,
                   capture_output=True)
    queue = next(q for q in get("scheduler")["scheduler"]["schedulerInfo"]["queues"]["queue"]
                 if q["queueName"] == "research")
    if queue["maxParallelApps"] != (cap if cap is not None else 2147483647):
        raise RuntimeError(f"maxParallelApps is {queue['maxParallelApps']}, not {cap}")


def wait_ended(name: str, m: int, timeout: float = 900) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = [a for a in apps(name) if a["state"] in ("FINISHED", "FAILED", "KILLED")]
        if len(ended) >= m:
            return ended
        time.sleep(0.5)
    raise TimeoutError(f"{name}: {m} applications did not end in {timeout}s")


def span(ended: list[dict], started_ms: float, m: int, seconds: float) -> dict:
    makespan = (max(a["finishedTime"] for a in ended) - started_ms) / 1000
    busy = sum(e["value"] for a in ended for e in (a.get("resourceSecondsMap") or {}).get("entry", [])
               if isinstance(e, dict) and e.get("key") == "yarn.io/gpu")
    return {"makespan_s": round(makespan, 1), "gpu_utilisation": round(busy / (GPUS * makespan), 3),
            "useful_utilisation": round(m * seconds / (GPUS * makespan), 3),
            "failed": sum(a["finalStatus"] != "SUCCEEDED" for a in ended)}


def sweep_capped(m: int, seconds: float, cap: int, name: str, workdir: Path) -> dict:
    path = study(workdir / f"{name}.yaml", name, m, seconds)
    max_parallel_apps(cap)
    try:
        sent = bodies(path, workdir)
        started = time.time() * 1000
        subprocess.run([sys.executable, "-c", LOOP, str(sent), RM], check=True, env=ENV)
        time.sleep(2)  # why the ones the cap holds back wait, as `stratctl status` says (the RM's diagnostics are empty)
        shown = subprocess.run([sys.executable, "-m", "stratctl", "status", str(path), "-o", "json"], env=ENV,
                               cwd=workdir, capture_output=True, text=True).stdout
        said = sorted({r["pending"] for r in json.loads(shown or '{"trials": []}')["trials"] if r["pending"]})
        result = span(wait_ended(name, m), started, m, seconds)
    finally:
        max_parallel_apps(None)
    return {**result, "submissions": m, "status_says": said}


def sweep_stratctl(m: int, seconds: float, name: str, workdir: Path) -> dict:
    path = study(workdir / f"{name}.yaml", name, m, seconds)
    started = time.time() * 1000
    done = subprocess.run([sys.executable, "-m", "stratctl", "submit", str(path), "--poll-interval", "0.5",
                           "-o", "json"], env=ENV, cwd=workdir, capture_output=True, text=True, timeout=900)
    progress = json.loads(done.stdout or "{}")
    if done.returncode != 0 or progress.get("succeeded") != m:
        raise RuntimeError(f"stratctl submit: {done.stderr[-1000:]}")
    return {**span(wait_ended(name, m), started, m, seconds), "submissions": progress["api_writes"]}


def main() -> None:
    global RM
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60, help="trials of the submission-throughput runs")
    parser.add_argument("--sweep", type=int, default=24, help="trials of the makespan runs")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of the submission runs")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each makespan trial runs")
    args = parser.parse_args()
    ENV.update({**os.environ, **testbed_up(REPO / "testbed" / "yarn" / "up.sh")})
    RM = ENV["STRATCTL_YARN_RM"]
    stamp = int(time.time()) % 100000
    figures: dict = {"trials": args.trials, "sweep": args.sweep, "seconds": args.seconds, "gpus": GPUS}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(f"submission of {args.trials} one-GPU trials (8 run, the rest wait), wall seconds, median of "
              f"{args.repeat} interleaved runs:")
        runs: dict[str, list[float]] = {"loop": [], "stratctl": []}
        for round_ in range(args.repeat):
            for method in runs:
                name = f"ys{method}{stamp}r{round_}"
                path = study(workdir / f"{name}.yaml", name, args.trials, 600)
                try:
                    runs[method].append(submit_loop(path, workdir) if method == "loop"
                                        else submit_stratctl(path, workdir, args.trials))
                finally:
                    kill_all(name)
        for method, times in runs.items():
            seconds = statistics.median(times)
            figures[f"submit_{method}_s"] = round(seconds, 2)
            figures[f"submit_{method}_runs"] = [round(t, 2) for t in times]
            print(f"  {method:9} {seconds:6.2f} s  {args.trials / seconds:7.1f} applications/s  (runs: "
                  f"{', '.join(f'{t:.2f}' for t in times)})")
        ratio = figures["submit_loop_s"] / figures["submit_stratctl_s"]
        figures["stratctl_vs_loop"] = round(ratio, 2)
        print(f"  stratctl {ratio:.2f}x the plain loop's throughput")

        print(f"\nmakespan of {args.sweep} trials of {args.seconds:g}s on {GPUS} GPUs:")
        for method, cap in (("maxParallelApps=2", 2), ("maxParallelApps=8", 8), ("stratctl", None)):
            name = f"ym{cap or 'ad'}{stamp}"
            try:
                result = (sweep_stratctl(args.sweep, args.seconds, name, workdir) if cap is None
                          else sweep_capped(args.sweep, args.seconds, cap, name, workdir))
            finally:
                kill_all(name)
            figures[f"makespan_{method}"] = result
            print(f"  {method:18} {result['makespan_s']:6.1f} s  GPU utilisation {result['gpu_utilisation']:.0%} "
                  f"(useful {result['useful_utilisation']:.0%}), {result['submissions']} submissions, "
                  f"{result['failed']} failed")
            if result.get("status_says"):
                print(f"    while capped, `stratctl status` says they wait for: {'; '.join(result['status_says'])}")
    save("yarn", figures)


if __name__ == "__main__":
    main()
