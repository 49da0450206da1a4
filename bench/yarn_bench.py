"""YARN: stratctl against the way YARN users throttle a sweep today, side by side on the
YARN testbed (testbed/yarn/: a ResourceManager and 2 NodeManagers × 4 GPUs in one JVM,
queues prod and research), every method as a process.

Submission throughput, N trials of one GPU that sleep long (8 start, the rest wait):
  loop      a plain client loop, the RM's ceiling for one client: one small process that
            sends, N times in a row over one keep-alive connection (http.client),
            `POST /apps/new-application` then `POST /apps`, with bodies built beforehand
            exactly as stratctl builds them (backends/yarn/app.py: build + Application.body; the
            gang AM jar, the classpath from the RM's /conf), so that it only sends;
  stratctl  `stratctl submit FILE --detach --qps 0 --parallelism static --max-inflight N
            --workers 8`, timed from exec to exit (start-up, render and the study's
            listing included).
Each runs `--repeat` times, interleaved (loop, stratctl, loop, ...); medians compared.
Every application of a run is killed, and all 8 GPUs free again, before the next run.

Makespan, M trials of one GPU that each sleep S seconds (the cluster holds 8 at once):
  maxParallelApps=K  the static cap YARN users set on the queue
            (`yarn.scheduler.capacity.root.research.max-parallel-apps` in
            capacity-scheduler.xml, then `yarn rmadmin -refreshQueues`), all M submitted
            at once by the plain loop, for K = 2 (a cautious user) and 8 (a user who knows
            the idle cluster's size); the file is restored afterwards, also on failure;
  stratctl  `stratctl submit FILE` with the adaptive policy and no cap given (none on the
            queue either).
From the first submission to the last application's end (the RM's startedTime and
finishedTime), the GPU utilisation over that span (the applications' own yarn.io/gpu
seconds, resourceSecondsMap, over 8 × makespan) and the useful part of it (M × S over
8 × makespan); the REST submissions each method sent (stratctl's own count, api_writes,
beside the applications the RM holds for it); each application's cost beyond its S
seconds once its AM is launched (AM JVM start, the gang's allocation, the end); and what
the RM and `stratctl status` say about the applications the cap holds back.

Every run has its own study name (its applications their own tags). Figures go to stdout
and bench/results/yarn.json with the commit they were measured at.

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

from bench.results import save

REPO = Path(__file__).resolve().parent.parent
GPUS = 8  # the testbed's: 2 NodeManagers × 4
QUEUE = "research"
CAP = f"yarn.scheduler.capacity.root.{QUEUE}.max-parallel-apps"
UNCAPPED = 2147483647  # what /scheduler shows as maxParallelApps when none is set
ENDED = ("FINISHED", "FAILED", "KILLED")

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
    body["application-id"] = json.loads(answer.read())["application-id"]
    conn.request("POST", "/ws/v1/cluster/apps", json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    answer.read()
    if answer.status != 202:
        sys.exit(f"submission: HTTP {answer.status}")
"""


def yarn_env() -> dict[str, str]:
    """The testbed's environment (up.sh is idempotent: 0.05 s when it is already up)."""
    out = subprocess.run(
        ["bash", str(REPO / "testbed/yarn/up.sh")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    env = dict(os.environ)
    for line in Path(out.strip().splitlines()[-1]).read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export ") :].split("=", 1)
            env[key] = value
    return env


def get(path: str) -> dict:
    request = urllib.request.Request(f"{RM}/{path}", headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def apps(study: str) -> list[dict]:
    return (get(f"ws/v1/cluster/apps?applicationTags=stratctl-study:{study}").get("apps") or {}).get("app") or []


def free_gpus() -> int:
    return sum(
        i["value"]
        for n in get("ws/v1/cluster/nodes")["nodes"]["node"]
        for i in n["availableResource"]["resourceInformations"]["resourceInformation"]
        if i["name"] == "yarn.io/gpu"
    )


def research() -> dict:
    return next(
        q
        for q in get("ws/v1/cluster/scheduler")["scheduler"]["schedulerInfo"]["queues"]["queue"]
        if q["queueName"] == QUEUE
    )


def kill_all(study: str) -> None:
    """Kill every application of a study, then wait for all 8 GPUs to be free."""
    for app in apps(study):
        if app["state"] not in ENDED:
            request = urllib.request.Request(
                f"{RM}/ws/v1/cluster/apps/{app['id']}/state",
                method="PUT",
                data=b'{"state": "KILLED"}',
                headers={"Content-Type": "application/json"},
            )
            urllib.request.urlopen(request, timeout=30).close()
    deadline = time.monotonic() + 300
    while free_gpus() < GPUS or any(a["state"] not in ENDED for a in apps(study)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{study}: the cluster did not become idle")
        time.sleep(0.5)


def study(path: Path, name: str, trials: int, seconds: float) -> Path:
    path.write_text(
        textwrap.dedent(f"""\
        name: {name}
        backend: yarn
        yarn: {{resource_managers: ["{RM}"], queue: {QUEUE}}}
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
        strategy: {{kind: grid}}
        trial:
          command: ["sleep", "{seconds:g}"]
          resources: {{requests: {{memory: 256Mi}}, limits: {{nvidia.com/gpu: 1}}}}
          tasks: [{{name: worker, replicas: 1}}]
        """)
    )
    return path


def bodies(path: Path, workdir: Path) -> Path:
    """The submissions stratctl would send for every trial's first attempt, as a JSON file
    (the application id is filled in by the loop, from its new-application)."""
    from stratctl.backends.yarn.app import Jar, build
    from stratctl.backends.yarn.scheduler import output_of
    from stratctl.core.render import Renderer, bundled_templates
    from stratctl.core.space import expand
    from stratctl.core.spec import load_study

    loaded = load_study(path)
    renderer = Renderer(loaded, rendezvous=None)  # the application master gives the contract
    jar = Jar.of(Path(ENV["STRATCTL_YARN_AM_JAR"]))
    classpath = get("conf?name=yarn.application.classpath")["property"]["value"].split(",")
    out = [
        build(loaded, renderer.render(t), [bundled_templates()], output_of(loaded, workdir)).body(
            "", loaded, jar, classpath
        )
        for t in expand(loaded)
    ]
    target = workdir / f"{loaded.name}.bodies.json"
    target.write_text(json.dumps(out))
    return target


def loop(sent: Path) -> None:
    subprocess.run([sys.executable, "-c", LOOP, str(sent), RM], check=True, env=ENV)


# -- submission throughput --------------------------------------------------------------------


def submit_loop(path: Path, workdir: Path, n: int) -> float:
    sent = bodies(path, workdir)
    started = time.perf_counter()
    loop(sent)
    elapsed = time.perf_counter() - started
    if len(apps(path.stem)) != n:
        raise RuntimeError(f"the loop: {len(apps(path.stem))} applications in the RM, not {n}")
    return elapsed


def submit_stratctl(path: Path, workdir: Path, n: int) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stratctl",
            "submit",
            str(path),
            "--detach",
            "--qps",
            "0",
            "--parallelism",
            "static",
            "--max-inflight",
            str(n),
            "--workers",
            "8",
            "-o",
            "json",
        ],
        env=ENV,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or json.loads(done.stdout)["created"] != n:
        raise RuntimeError(f"stratctl submit: {done.stderr[-1000:]}")
    return elapsed


# -- makespan ---------------------------------------------------------------------------------


def refresh_queues(cap: int) -> None:
    subprocess.run(
        ["bash", str(REPO / "testbed/yarn/yarn.sh"), "rmadmin", "-refreshQueues"],
        check=True,
        env=ENV,
        capture_output=True,
    )
    shown = research().get("maxParallelApps")
    if shown != cap:
        raise RuntimeError(f"after -refreshQueues the research queue's maxParallelApps is {shown}, not {cap}")


def normalised(text: str) -> str:
    """A diagnostics text without its times and ids, so that the distinct ones can be counted."""
    text = re.sub(r"application_\d+_\d+", "<app>", text)
    text = re.sub(r"appattempt_\d+_\d+_\d+", "<attempt>", text)
    return re.sub(r"\[[A-Z][a-z]{2} [A-Z][a-z]{2} \d+ [\d:]+ [+-]\d{4} \d{4}\]", "[<time>]", text)


def wait_ended(name: str, m: int, said: dict[str, str] | None = None, timeout: float = 900) -> list[dict]:
    """The study's M applications once all have ended; `said` collects the RM's diagnostics
    of those still ACCEPTED (normalised → the first raw text)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = apps(name)
        if said is not None:
            for app in seen:
                if app["state"] == "ACCEPTED":
                    said.setdefault(normalised(app.get("diagnostics") or ""), app.get("diagnostics") or "")
        ended = [a for a in seen if a["state"] in ENDED]
        if len(ended) >= m:
            return ended
        time.sleep(0.5)
    raise TimeoutError(f"{name}: {m} applications did not end in {timeout}s")


def span(ended: list[dict], exec_ms: float, m: int, seconds: float) -> dict:
    first, last = min(a["startedTime"] for a in ended), max(a["finishedTime"] for a in ended)
    makespan = (last - first) / 1000
    busy = sum(
        e["value"]
        for a in ended
        for e in (a.get("resourceSecondsMap") or {}).get("entry", [])
        if isinstance(e, dict) and e.get("key") == "yarn.io/gpu"
    )
    beyond = [(a["finishedTime"] - a["launchTime"]) / 1000 - seconds for a in ended if a.get("launchTime")]
    waited = [(a["launchTime"] - a["startedTime"]) / 1000 for a in ended if a.get("launchTime")]
    return {
        "makespan_s": round(makespan, 1),
        "from_exec_s": round((last - exec_ms) / 1000, 1),
        "gpu_utilisation": round(busy / (GPUS * makespan), 3),
        "useful_utilisation": round(m * seconds / (GPUS * makespan), 3),
        "gpu_seconds": busy,
        "app_beyond_sleep_s": round(statistics.median(beyond), 2) if beyond else None,
        "app_queued_s": round(statistics.median(waited), 2) if waited else None,
        "failed": sum(a["finalStatus"] != "SUCCEEDED" for a in ended),
    }


def status_says(path: Path, workdir: Path) -> list[str]:
    """Why `stratctl status` says the study's waiting trials wait."""
    shown = subprocess.run(
        [sys.executable, "-m", "stratctl", "status", str(path), "-o", "json"],
        env=ENV,
        cwd=workdir,
        capture_output=True,
        text=True,
    ).stdout
    return sorted({r["pending"] for r in json.loads(shown or '{"trials": []}')["trials"] if r.get("pending")})


def sweep_capped(m: int, seconds: float, cap: int, name: str, workdir: Path) -> dict:
    path = study(workdir / f"{name}.yaml", name, m, seconds)
    conf = Path(ENV["STRATCTL_YARN_RUN"]) / "etc" / "capacity-scheduler.xml"
    original = conf.read_text()
    if CAP in original:
        raise RuntimeError(f"{conf} already sets {CAP}: not a queue without a cap")
    try:
        conf.write_text(
            original.replace(
                "</configuration>", f"<property><name>{CAP}</name><value>{cap}</value></property>\n</configuration>"
            )
        )
        refresh_queues(cap)
        sent = bodies(path, workdir)
        exec_ms = time.time() * 1000
        loop(sent)
        said: dict[str, str] = {}
        time.sleep(2)
        wait_ended(name, 0, said)  # one look at the applications the cap holds back
        status = status_says(path, workdir)
        result = span(wait_ended(name, m, said), exec_ms, m, seconds)
    finally:
        conf.write_text(original)
        refresh_queues(UNCAPPED)
    return {
        **result,
        "submissions": m,
        "rm_diagnostics_waiting": sorted(said),
        "rm_diagnostics_example": next((raw for raw in said.values() if raw), ""),
        "status_says": status,
    }


def sweep_stratctl(m: int, seconds: float, name: str, workdir: Path) -> dict:
    path = study(workdir / f"{name}.yaml", name, m, seconds)
    if research().get("maxParallelApps") != UNCAPPED:
        raise RuntimeError("the research queue has a maxParallelApps: not the uncapped queue stratctl is measured on")
    exec_ms = time.time() * 1000
    done = subprocess.run(
        [sys.executable, "-m", "stratctl", "submit", str(path), "--poll-interval", "0.5", "-o", "json"],
        env=ENV,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
    )
    progress = json.loads(done.stdout or "{}")
    if done.returncode != 0 or progress.get("succeeded") != m:
        raise RuntimeError(f"stratctl submit: {done.stderr[-1000:]}")
    ended = wait_ended(name, m)
    return {
        **span(ended, exec_ms, m, seconds),
        "submissions": len(ended),
        "api_writes": progress["api_writes"],
        "api_requests": progress.get("api_requests"),
    }


def main() -> None:
    global RM
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60, help="trials of the submission-throughput runs")
    parser.add_argument("--sweep", type=int, default=24, help="trials of the makespan runs")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of the submission runs")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each makespan trial runs")
    args = parser.parse_args()
    ENV.update(yarn_env())
    RM = ENV["STRATCTL_YARN_RM"]
    stamp = int(time.time()) % 100000
    figures: dict = {"trials": args.trials, "sweep": args.sweep, "seconds": args.seconds, "gpus": GPUS}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(
            f"submission of {args.trials} one-GPU trials (8 run, the rest wait), wall seconds, median of "
            f"{args.repeat} interleaved runs:"
        )
        runs: dict[str, list[float]] = {"loop": [], "stratctl": []}
        for round_ in range(args.repeat):
            for method in runs:
                name = f"ys{method}{stamp}r{round_}"
                path = study(workdir / f"{name}.yaml", name, args.trials, 600)
                try:
                    runs[method].append(
                        submit_loop(path, workdir, args.trials)
                        if method == "loop"
                        else submit_stratctl(path, workdir, args.trials)
                    )
                finally:
                    kill_all(name)
        for method, times in runs.items():
            seconds = statistics.median(times)
            figures[f"submit_{method}_s"] = round(seconds, 2)
            figures[f"submit_{method}_runs"] = [round(t, 2) for t in times]
        for method in runs:
            seconds = figures[f"submit_{method}_s"]
            beside = "" if method == "loop" else f"  ({figures['submit_loop_s'] / seconds:.2f}x the loop's throughput)"
            print(
                f"  {method:9} {seconds:6.2f} s  {args.trials / seconds:7.1f} applications/s  (runs: "
                f"{', '.join(f'{t:.2f}' for t in figures[f'submit_{method}_runs'])}){beside}"
            )
        figures["stratctl_vs_loop"] = round(figures["submit_loop_s"] / figures["submit_stratctl_s"], 2)

        print(
            f"\nmakespan of {args.sweep} trials of {args.seconds:g}s on {GPUS} GPUs (ideal "
            f"{-(-args.sweep // GPUS) * args.seconds:g} s):"
        )
        results: dict[str, dict] = {}
        for method, cap in (("maxParallelApps=2", 2), ("maxParallelApps=8", 8), ("stratctl", None)):
            name = f"ym{cap or 'ad'}{stamp}"
            try:
                results[method] = (
                    sweep_stratctl(args.sweep, args.seconds, name, workdir)
                    if cap is None
                    else sweep_capped(args.sweep, args.seconds, cap, name, workdir)
                )
            finally:
                kill_all(name)
            figures[f"makespan_{method}"] = results[method]
        ours = results["stratctl"]
        for method, result in results.items():
            beside = (
                ""
                if method == "stratctl"
                else f"  (stratctl's {ours['makespan_s'] / result['makespan_s']:.2f}x of it, utilisation "
                f"{ours['gpu_utilisation'] / result['gpu_utilisation']:.2f}x)"
            )
            writes = (
                f"{result['submissions']} submissions"
                if method != "stratctl"
                else f"{result['submissions']} submissions (api_writes {result['api_writes']})"
            )
            print(
                f"  {method:18} {result['makespan_s']:6.1f} s  GPU utilisation {result['gpu_utilisation']:.0%} "
                f"(useful {result['useful_utilisation']:.0%}), {writes}, {result['failed']} failed; each "
                f"application {result['app_beyond_sleep_s']:.1f} s beyond its sleep once its AM is launched{beside}"
            )
            for said in result.get("rm_diagnostics_waiting", []):
                print(f"    the RM's diagnostics of one waiting: {said!r}")
            if result.get("status_says"):
                print(f"    `stratctl status`: they wait for: {'; '.join(result['status_says'])}")
            if method != "stratctl":
                figures[f"stratctl_speedup_vs_{method}"] = round(result["makespan_s"] / ours["makespan_s"], 2)
    save("yarn", figures)


if __name__ == "__main__":
    main()
