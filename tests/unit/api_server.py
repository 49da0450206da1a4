"""A FakeCluster served over real HTTP on loopback, for tests of whole commands through
their real request path (kubeconfig, transport, throttle, outage): the REST paths stratctl
uses map to the FakeCluster's objects, and the server can be told to refuse requests
with 429 and a Retry-After first, as API Priority and Fairness does to a throttled user.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import yaml

from stratctl.backends.kubernetes.api.cluster import RESOURCES
from stratctl.errors import AlreadyExists, NotFound
from tests.unit.fake_cluster import FakeCluster, merge_patch

PLURALS = {(api_version, plural): (api_version, kind) for (api_version, kind), (plural, _) in RESOURCES.items()}
LOG = b"epoch 1 loss 0.5\nepoch 2 loss 0.4\n"


class ApiServer:
    """`cluster` over HTTP at `url`; `refuse(n, retry_after)` answers the next n requests 429."""

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        self.seen: list[tuple[str, str, int]] = []  # (method, path, status) of every request
        self._refusals = 0
        self.log: list[str] = []  # a followed log's lines, "TIMESTAMP TEXT" (timestamps as the kubelet writes them)
        self.log_hold = 0.0  # seconds a followed log stays open after its lines
        self.watch_open = False  # True: a watch stays open, quiet, until its timeoutSeconds (else it ends at once)
        self._retry_after = 1
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # connections kept open between requests, as the API server does

            def log_message(self, *args):  # quiet
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                query = parse_qs(urlparse(self.path).query)
                if method == "GET" and query.get("watch") and server.watch_open:
                    self._quiet_watch(float(query.get("timeoutSeconds", ["1"])[0]))
                    return
                if method == "GET" and self.path.split("?")[0].endswith("/log") and query.get("follow"):
                    self._followed_log(query.get("sinceTime", [""])[0])
                    return
                status, answer, headers = server.answer(method, self.path, body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _quiet_watch(self, seconds: float) -> None:
                """A watch as the API server keeps one open: headers at once, then no event
                until it ends after `timeoutSeconds` (the end of the body: the connection closes)."""
                server.seen.append(("GET", urlparse(self.path).path + "?watch", 200))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                time.sleep(seconds)
                self.close_connection = True

            def _followed_log(self, since: str) -> None:
                """A followed container log as the kubelet streams one: the lines after
                `sinceTime`, with their timestamps, then nothing more until `log_hold` passed."""
                server.seen.append(("GET", urlparse(self.path).path + "?follow", 200))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")  # as the kubelet streams it: each write a chunk
                self.send_header("Connection", "close")
                self.end_headers()
                data = b"".join(f"{line}\n".encode() for line in server.log if line > since)
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(server.log_hold)
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_PATCH(self):
                self._serve("PATCH")

            def do_DELETE(self):
                self._serve("DELETE")

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def refuse(self, requests: int, retry_after: int = 1) -> None:
        with self._lock:
            self._refusals, self._retry_after = requests, retry_after

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    def kubeconfig(self, directory: Path, namespace: str) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "alice", "user": {"token": "t"}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "alice", "namespace": namespace}}
                    ],
                }
            )
        )
        return path

    # -- the API ---------------------------------------------------------------------------

    def answer(self, method: str, target: str, body) -> tuple[int, object, dict]:
        url = urlparse(target)
        with self._lock:
            refused = self._refusals > 0
            self._refusals -= refused
        if refused:
            self.seen.append((method, url.path, 429))
            return (
                429,
                _status(429, "TooManyRequests", "Too many requests, please try again later."),
                {"Retry-After": str(self._retry_after)},
            )
        status, answer = self._resource(method, url.path, {k: v[0] for k, v in parse_qs(url.query).items()}, body)
        self.seen.append((method, url.path, status))
        return status, answer, {}

    def _resource(self, method: str, path: str, query: dict, body) -> tuple[int, object]:
        if path == "/readyz":
            return 200, b"ok"
        if path == "/version":
            return 200, {"major": "1", "minor": "35", "gitVersion": "v1.35.4"}
        parts = path.strip("/").split("/")
        group_version = "v1" if parts[0] == "api" else "/".join(parts[1:3])
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = None
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            namespace, rest = rest[1], rest[2:]
        kind = PLURALS[(group_version, rest[0])]
        name = rest[1] if len(rest) > 1 else None
        fake = self.cluster
        try:
            if len(rest) > 2 and rest[2] == "log":
                fake.get(kind, name, namespace)
                return 200, LOG
            if method == "POST" and kind[1] == "SelfSubjectAccessReview":
                return 201, {**body, "status": {"allowed": True}}
            if method == "POST":
                return 201, fake.create(body, dry_run=query.get("dryRun") == "All")
            if method == "PATCH":
                obj = fake.objects[fake._key(*kind, namespace, name)]
                merge_patch(obj, body)
                return 200, obj
            if method == "DELETE":
                fake.get(kind, name, namespace)
                fake.delete(kind, name, namespace)
                return 200, _status(200, "", "deleted")
            if name:
                return 200, fake.get(kind, name, namespace)
            if query.get("watch"):
                return 200, b""  # a watch that ends at once: the client watches again
            items, version = fake.list(kind, namespace, query.get("labelSelector"))
            return 200, {"items": items, "metadata": {"resourceVersion": version}}
        except NotFound as exc:
            return 404, _status(404, "NotFound", str(exc))
        except AlreadyExists as exc:
            return 409, _status(409, "AlreadyExists", str(exc))
        except KeyError as exc:
            return 404, _status(404, "NotFound", f"{exc} not found")


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }
