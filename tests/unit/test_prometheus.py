"""Prometheus signals against a real local HTTP server speaking the query API."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from stratctl.engine.prometheus import ETCD_COMMIT_P99, SCHEDULER_PENDING, VOLCANO_LATENCY_P90_MS, Prometheus


@pytest.fixture
def server():
    answers: dict[str, object] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            query = parse_qs(urlparse(self.path).query)["query"][0]
            seen.append(query)
            body = answers.get(query, {"status": "success", "data": {"resultType": "vector", "result": []}})
            payload = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", answers, seen
    httpd.shutdown()


def vector(*values):
    return {"status": "success", "data": {"resultType": "vector",
                                           "result": [{"metric": {}, "value": [1.0, str(v)]} for v in values]}}


def test_control_plane_signals_are_read_from_instant_queries(server):
    url, answers, seen = server
    answers[ETCD_COMMIT_P99] = vector(0.031)
    answers[SCHEDULER_PENDING] = vector(3, 4)  # one sample per scheduler: summed
    answers[VOLCANO_LATENCY_P90_MS] = vector(250)
    cp = Prometheus(url + "/").control_plane()
    assert cp.etcd_commit_p99 == pytest.approx(0.031)
    assert cp.scheduler_pending_pods == 7
    assert cp.volcano_latency_p90 == pytest.approx(0.25)
    assert set(seen) == {ETCD_COMMIT_P99, SCHEDULER_PENDING, VOLCANO_LATENCY_P90_MS}


def test_missing_nan_or_unreachable_metrics_are_none_never_an_error(server):
    url, answers, _ = server
    answers[ETCD_COMMIT_P99] = vector("NaN")
    cp = Prometheus(url).control_plane()
    assert cp == type(cp)(None, None, None)
    assert Prometheus("http://127.0.0.1:9", timeout=0.5).query(ETCD_COMMIT_P99) is None
