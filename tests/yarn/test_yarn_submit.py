"""`stratctl submit` of a `backend: yarn` study against a real ResourceManager and real
NodeManagers: every trial exactly once across a SIGKILL and a rerun, and across a
ResourceManager that stops answering; a prod application's preemption ends an attempt
the next one resumes from, not a failure; drain and resume; `status` agrees with the RM."""

from __future__ import annotations

import json
import signal
import socket
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest

STUDY = """\
name: {name}
backend: yarn
yarn: {{resource_managers: ["{rm}"], queue: {queue}}}
checkpoint: {{location: "{ckpt}/{{{{ trial }}}}"}}
space:
  seed: {{type: int, low: 0, high: {last}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["bash", "-c", {command}]
  resources: {{requests: {{memory: 256Mi}}, limits: {{nvidia.com/gpu: {gpus}}}}}
  tasks: [{{name: worker, replicas: {tasks}}}]
throttle: {{parallelism: {{min: 1, initial: {inflight}, max: {inflight}}}}}
"""


def study(yarn, tmp_path, name, trials, command, gpus=1, tasks=1, inflight=4, queue="research", file="study.yaml"):
    path = tmp_path / file
    path.write_text(
        STUDY.format(
            name=name,
            rm=yarn.rm,
            queue=queue,
            ckpt=tmp_path / "ckpt",
            last=trials - 1,
            command=json.dumps(command),
            gpus=gpus,
            tasks=tasks,
            inflight=inflight,
        )
    )
    return path


def tag(app: dict, key: str) -> str:
    return next(t.split(":", 1)[1] for t in app["applicationTags"].split(",") if t.startswith(f"stratctl-{key}:"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, series: str) -> str | None:
    """The line of one series on a /metrics page, None while it is not served."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            text = page.read().decode()
    except OSError:
        return None
    return next((line for line in text.splitlines() if line.startswith(series)), None)


def per_trial(apps: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for app in apps:
        out.setdefault(tag(app, "trial"), []).append(app)
    return out


def test_every_trial_runs_exactly_once_across_a_kill_and_a_rerun(yarn, tmp_path):
    name = f"once-{int(time.time()) % 100000}"
    command = (
        'sleep 2; echo "$STRATCTL_TASK_INDEX" >> "$STRATCTL_OUTPUT_DIR/ran"; '
        '[ "$STRATCTL_TASK_INDEX" = 0 ] && echo "{\\"loss\\": $RANDOM}" > "$STRATCTL_OUTPUT_DIR/result.json"; true'
    )
    path = study(yarn, tmp_path, name, 8, command, tasks=2, inflight=4)
    first = yarn.start("submit", str(path), "--poll-interval", "0.5", cwd=tmp_path)
    yarn.wait("the first applications in the RM", lambda: len(yarn.apps(name)) >= 3)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    done = yarn.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    progress = json.loads(done.stdout)
    assert progress["succeeded"] == 8 and progress["failed"] == 0, progress
    assert progress["existing"] >= 3 and progress["created"] + progress["existing"] == 8, progress
    apps = per_trial(yarn.apps(name))
    assert len(apps) == 8 and all(len(a) == 1 for a in apps.values()), {
        t: [x["id"] for x in a] for t, a in apps.items()
    }
    out = tmp_path / "stratctl-out" / name
    for trial in apps:  # both tasks of the gang ran, once each
        assert sorted((out / trial / "ran").read_text().split()) == ["0", "1"], trial
    # status reads what the RM says: every application FINISHED, its trial succeeded with its result
    shown = yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["trials"]
    assert {r["trial"] for r in rows} == set(apps)
    for row in rows:
        [app] = apps[row["trial"]]
        assert (row["state"], row["phase"], app["state"], app["finalStatus"]) == (
            "succeeded",
            "FINISHED",
            "FINISHED",
            "SUCCEEDED",
        ), (row, app)
        assert row["attempt"] == 0 and "loss" in row["result"] and row["queue"] == "research"
        # GPU time: 2 GPUs from the AM's launch to the application's end, in the RM's times
        assert row["gpu_seconds"] == pytest.approx((app["finishedTime"] - app["launchTime"]) / 1000 * 2), (row, app)


def test_a_resource_manager_that_stops_answering_loses_and_duplicates_nothing(yarn, tmp_path):
    if not yarn.local:
        pytest.skip("stops the testbed's own JVM")
    name = f"pause-{int(time.time()) % 100000}"
    path = study(yarn, tmp_path, name, 12, "sleep 1", inflight=6)
    port = free_port()
    loop = yarn.start(
        "submit", str(path), "--poll-interval", "0.5", "-o", "json", "--metrics-port", str(port), cwd=tmp_path
    )
    yarn.wait("the first applications in the RM", lambda: len(yarn.apps(name)) >= 2)
    # the study's own metrics, exported as on Kubernetes
    metrics = yarn.wait("the loop's metrics", lambda: scrape(port, f'stratctl_trials_in_flight{{study="{name}"}}'))
    yarn.pause(15)  # ResourceManager and NodeManagers frozen mid-submit, longer than a request waits (10 s)
    out, err = loop.communicate(timeout=240)
    assert "YARN ResourceManager:" in err and "answering again" in err, err[-2000:]
    assert float(metrics.split()[-1]) >= 1
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == 12 and progress["failed"] == 0, progress
    apps = per_trial(yarn.apps(name))
    assert len(apps) == 12 and all(len(a) == 1 for a in apps.values())


def test_a_preempted_trial_resumes_as_its_next_attempt_not_a_failure(yarn, tmp_path):
    name = f"preempt-{int(time.time()) % 100000}"
    command = textwrap.dedent("""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo "$STRATCTL_ATTEMPT" > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep 15; echo '{"loss": 1}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(yarn, tmp_path, name, 4, command, gpus=2, inflight=4)  # four 2-GPU trials take all 8 GPUs
    yarn.wait_idle()
    loop = yarn.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    yarn.wait(
        "every trial running",
        lambda: (
            yarn.free_gpus() == 0 and sum(a["state"] == "RUNNING" and a["progress"] >= 50 for a in yarn.apps(name)) == 4
        ),
    )
    urgent = study(yarn, tmp_path, f"prod-{name}", 1, "sleep 1", gpus=4, queue="prod", file="prod.yaml")
    prod = yarn.stratctl("submit", str(urgent), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert prod.returncode == 0 and json.loads(prod.stdout)["succeeded"] == 1, prod.stderr[-2000:]
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == 4 and progress["failed"] == 0, progress
    apps = per_trial(yarn.apps(name))
    preempted = {t: a for t, a in apps.items() if len(a) > 1}
    assert preempted, "no trial was preempted"
    for trial, attempts in preempted.items():
        first = attempts[0]
        assert first["finalStatus"] == "FAILED" and "stratctl: preempted" in first["diagnostics"], first
        assert (tmp_path / "stratctl-out" / name / trial / "resumed").read_text().strip() == str(len(attempts) - 1)
        assert f"trial {trial}: attempt 1 submitted (attempt 0 preempted)" in err
    rows = {
        r["trial"]: r
        for r in json.loads(yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
    }
    for trial, attempts in preempted.items():
        assert rows[trial]["preemptions"] == len(attempts) - 1 and rows[trial]["failed_attempts"] == 0, rows[trial]
        assert rows[trial]["state"] == "succeeded"


def test_drain_kills_the_study_and_resume_brings_it_back(yarn, tmp_path):
    name = f"drain-{int(time.time()) % 100000}"
    command = textwrap.dedent("""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo resumed > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep 8; echo '{"loss": 1}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(yarn, tmp_path, name, 4, command, gpus=4, inflight=4)  # two fit at once, two wait
    yarn.wait_idle()
    loop = yarn.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    yarn.wait(
        "two trials running", lambda: sum(a["state"] == "RUNNING" and a["progress"] >= 50 for a in yarn.apps(name)) == 2
    )
    drained = yarn.stratctl("drain", str(path), "-o", "json", cwd=tmp_path)
    assert drained.returncode == 0, drained.stderr
    assert len(json.loads(drained.stdout)[0]["suspended"]) == 4
    yarn.wait("every application killed", lambda: all(a["state"] == "KILLED" for a in yarn.apps(name)))
    time.sleep(3)  # the loop goes on, and submits nothing while the study is drained
    assert len(yarn.apps(name)) == 4
    rows = json.loads(yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
    assert {r["state"] for r in rows} == {"suspended"}
    resumed = yarn.stratctl("resume", str(path), "-o", "json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(json.loads(resumed.stdout)["resumed"]) == 4
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == 4 and progress["failed"] == 0, progress
    apps = per_trial(yarn.apps(name))
    assert all(len(a) == 2 and a[0]["state"] == "KILLED" for a in apps.values())
    for trial in apps:
        assert (tmp_path / "stratctl-out" / name / trial / "resumed").exists()
    rows = json.loads(yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
    assert all(r["state"] == "succeeded" and r["failed_attempts"] == 0 and r["preemptions"] == 0 for r in rows), rows


def test_status_and_plan_speak_yarn(yarn, tmp_path):
    path = study(yarn, tmp_path, f"plan-{int(time.time()) % 100000}", 2, "true", gpus=1, tasks=2)
    plan = yarn.stratctl("plan", str(path), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "backend yarn; queue research" in plan.stdout and "one application of 2 containers" in plan.stdout
    shown = yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path)  # nothing submitted yet
    assert shown.returncode == 0, shown.stderr
    assert [r["state"] for r in json.loads(shown.stdout)["trials"]] == ["waiting", "waiting"]


def test_placement_spreads_or_packs_the_gang_and_a_partial_gang_gives_its_containers_back(yarn, tmp_path):
    if not yarn.local:
        pytest.skip("reads the testbed's NodeManager directories")
    where = 'echo "$STRATCTL_TASK_INDEX $(pwd)" >> "$STRATCTL_OUTPUT_DIR/where"; sleep 1'
    for placement, nodes in (("spread", 2), ("pack", 1)):
        name = f"{placement}-{int(time.time()) % 100000}"
        path = study(yarn, tmp_path, name, 1, where, tasks=2, file=f"{placement}.yaml")
        path.write_text(path.read_text().replace("queue: research}", f"queue: research, placement: {placement}}}"))
        done = yarn.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
        assert done.returncode == 0 and json.loads(done.stdout)["succeeded"] == 1, done.stderr[-2000:]
        [ran] = list((tmp_path / "stratctl-out" / name).glob("*/where"))
        seen = {line.split("/stratctl-localDir-")[1].split("/")[0] for line in ran.read_text().splitlines()}
        assert len(seen) == nodes, (placement, seen)  # NodeManager i works in stratctl-localDir-nm-<i>_0
    # a gang of 3 × 4 GPUs never fits the 8 GPUs: with gang_timeout it gives back what it holds, again and again
    yarn.wait_idle()
    name = f"partial-{int(time.time()) % 100000}"
    path = study(yarn, tmp_path, name, 1, "true", gpus=4, tasks=3, file="partial.yaml")
    path.write_text(path.read_text().replace("queue: research}", "queue: research, gang_timeout: 3s}"))
    loop = yarn.start("submit", str(path), "--poll-interval", "0.5", cwd=tmp_path)
    try:
        logs = Path(yarn.env["STRATCTL_YARN_WORK"])

        def given_back():
            [app] = yarn.apps(name) or [None]
            if app is None:
                return None
            found = list(logs.glob(f"yarn-*/*-logDir-nm-*/{app['id']}/*/AppMaster.stderr"))
            text = found[0].read_text() if found else ""
            return text.count("gang timeout: not whole") >= 2 and (app, text)

        app, text = yarn.wait("the partial gang given back twice", given_back, timeout=60)
        assert "launched all" not in text and app["state"] == "RUNNING" and app["progress"] == 0.0
        assert not list((tmp_path / "stratctl-out" / name).glob("*/result.json"))
    finally:
        loop.kill()
        loop.wait(10)
        for app in yarn.apps(name):
            yarn.kill(app["id"])


def test_a_dead_and_a_standby_resource_manager_are_passed_over(yarn, tmp_path):
    """An HA pair's standby redirects to the active RM (HTTP 307); a dead address refuses
    connections: listed before the real RM, both are passed over and the study runs."""
    import http.server

    class Standby(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            self.send_response(307)
            self.send_header("Location", f"{yarn.rm}{self.path}")
            self.end_headers()
            self.wfile.write(b"This is standby RM. The redirect url is: " + yarn.rm.encode())

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, *args):
            pass

    standby = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Standby)
    threading.Thread(target=standby.serve_forever, daemon=True).start()
    try:
        name = f"ha-{int(time.time()) % 100000}"
        path = study(yarn, tmp_path, name, 3, "true")
        rms = f'["http://127.0.0.1:{free_port()}", "http://127.0.0.1:{standby.server_address[1]}", "{yarn.rm}"]'
        path.write_text(path.read_text().replace(f'resource_managers: ["{yarn.rm}"]', f"resource_managers: {rms}"))
        done = yarn.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["succeeded"] == 3
        assert len(yarn.apps(name)) == 3
    finally:
        standby.shutdown()
