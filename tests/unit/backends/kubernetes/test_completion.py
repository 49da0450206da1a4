"""Shell completion of study names and kubeconfig contexts: what a Tab offers, and that a
slow or silent API server never holds the shell for more than about a second."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from stratctl.backends.kubernetes.verbs.shellnames import within

RECORDS = {
    "items": [
        {"metadata": {"name": f"stratctl-study-{n}", "labels": {"stratctl.io/study": n}}}
        for n in ("sweep", "ppo", "ab")
    ]
    + [{"metadata": {"name": "unrelated", "labels": {}}}],
    "metadata": {},
}


def kubeconfig(tmp_path, port: int, scheme: str = "http") -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "lab",
                "clusters": [{"name": "c", "cluster": {"server": f"{scheme}://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "lab", "context": {"cluster": "c", "user": "u", "namespace": "ns"}},
                    {"name": "prod", "context": {"cluster": "c", "user": "u", "namespace": "ns"}},
                    {"name": "laptop", "context": {"cluster": "c", "user": "u"}},
                ],
            }
        )
    )
    return str(path)


@pytest.fixture
def server():
    """A tiny API server answering the list of ConfigMaps (after `delay` seconds)."""

    class Handler(BaseHTTPRequestHandler):
        delay = 0.0
        paths: list[str] = []

        def do_GET(self):
            Handler.paths.append(self.path)
            time.sleep(Handler.delay)
            body = json.dumps(RECORDS).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except BrokenPipeError:  # the Tab gave up first: what the slow-server test wants
                pass

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    httpd.handler = Handler
    yield httpd
    httpd.shutdown()


def tab(words: str, kubeconfig_path: str) -> tuple[list[str], float]:
    """What bash completion gets for `words` (the cursor after the last one), and how long it took."""
    env = {
        **os.environ,
        "_STRATCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
        "KUBECONFIG": kubeconfig_path,
    }
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "stratctl"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.split(), time.monotonic() - started


@pytest.mark.parametrize("command", ["status", "drain", "resume", "delete", "logs"])
def test_a_tab_offers_the_studies_of_the_namespace(tmp_path, server, command):
    names, _ = tab(f"stratctl {command} ", kubeconfig(tmp_path, server.server_port))
    assert names == ["ab", "ppo", "sweep"]
    assert server.handler.paths[-1].startswith("/api/v1/namespaces/ns/configmaps?labelSelector=")


def test_a_tab_completes_a_prefix_and_follows_namespace_and_context(tmp_path, server):
    path = kubeconfig(tmp_path, server.server_port)
    assert tab("stratctl delete --context prod -n other s", path)[0] == ["sweep"]
    assert server.handler.paths[-1].startswith("/api/v1/namespaces/other/configmaps")


def test_a_tab_on_a_slow_server_gives_up_within_about_a_second(tmp_path, server):
    server.handler.delay = 5.0
    names, took = tab("stratctl status ", kubeconfig(tmp_path, server.server_port))
    assert names == [] and took < 2.0  # the budget (0.8 s), the interpreter's start and exit


def test_a_tab_on_a_server_that_never_answers_gives_up_within_about_a_second(tmp_path):
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        names, took = tab("stratctl logs ", kubeconfig(tmp_path, silent.getsockname()[1], "https"))
    assert names == [] and took < 2.0


def test_context_completion_reads_the_kubeconfig_only(tmp_path):
    path = kubeconfig(tmp_path, 9)  # nothing listens on port 9: no request is made
    assert tab("stratctl status --context ", path)[0] == ["lab", "prod", "laptop"]
    assert tab("stratctl drain --context la", path)[0] == ["lab", "laptop"]
    assert tab("stratctl drain --kubeconfig /nonexistent --context ", path)[0] == []


def test_within_returns_what_finishes_in_time_and_nothing_otherwise():
    assert within(lambda: ["a", "b"], budget=1.0) == ["a", "b"]
    started = time.monotonic()
    assert within(lambda: time.sleep(3) or ["late"], budget=0.2) == []
    assert time.monotonic() - started < 0.5

    def broken():
        raise RuntimeError("never printed into the shell")

    assert within(broken) == []
