"""What only YARN has, on its real testbed (a ResourceManager and NodeManagers): `plan` and
`status` in YARN's words, the gang AM's placement (spread or pack) and its giving back a
partial gang, an HA pair's standby and a dead address passed over. What every batch
backend does is the shared suite's (test_submit.py, test_rendezvous.py, test_jax.py)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

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


def per_trial(apps: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for app in apps:
        out.setdefault(tag(app, "trial"), []).append(app)
    return out


def test_status_and_plan_speak_yarn(yarn, tmp_path):
    path = study(yarn, tmp_path, f"plan-{int(time.time()) % 100000}", 2, "true", gpus=1, tasks=2)
    plan = yarn.stratctl("plan", str(path), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "backend yarn; queue research" in plan.stdout and "one application of 2 containers" in plan.stdout
    shown = yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path)  # nothing submitted yet
    assert shown.returncode == 0, shown.stderr
    assert [r["state"] for r in json.loads(shown.stdout)["trials"]] == ["waiting", "waiting"]


def test_placement_spreads_or_packs_the_gang_and_a_partial_gang_gives_its_containers_back(yarn, tmp_path):
    assert yarn.local, "reads the testbed's NodeManager directories: needs this repo's testbed"
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
