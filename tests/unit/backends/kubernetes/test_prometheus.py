"""Prometheus signals against a real local HTTP server speaking the query API."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from stratctl.backends.kubernetes.watch.prometheus import (
    ETCD_P99,
    VOLCANO_LATENCY_P90_MS,
    ControlPlane,
    ControlPlaneWatch,
    Prometheus,
)
from tests.unit.fakes import FakeClock


@pytest.fixture
def server():
    answers: dict[str, object] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
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
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, str(v)]} for v in values]},
    }


def test_control_plane_signals_are_read_from_instant_queries(server):
    url, answers, seen = server
    answers[ETCD_P99] = vector(0.031)
    answers[VOLCANO_LATENCY_P90_MS] = vector(150, 100)  # one sample per scheduler: summed
    cp = Prometheus(url + "/").control_plane(at=5.0)
    assert cp.etcd_p99 == pytest.approx(0.031)
    assert cp.volcano_latency_p90 == pytest.approx(0.25)
    assert cp.at == 5.0
    assert set(seen) == {ETCD_P99, VOLCANO_LATENCY_P90_MS}


def test_missing_nan_or_unreachable_metrics_are_none_never_an_error(server):
    url, answers, _ = server
    answers[ETCD_P99] = vector("NaN")
    cp = Prometheus(url).control_plane()
    assert cp == ControlPlane(None, None)
    assert Prometheus("http://127.0.0.1:9", timeout=0.5).query(ETCD_P99) is None


def test_the_loop_reads_the_latest_reading_without_waiting_for_prometheus():
    import threading

    release = threading.Event()

    class Hanging:
        def control_plane(self, at=0.0):
            release.wait(5)  # a Prometheus that takes its time
            return ControlPlane(0.3, 0.1, at)

    clock = FakeClock()
    watch = ControlPlaneWatch(Hanging(), interval=5, stale=20, clock=clock).start()
    try:
        assert watch.latest() is None  # at once, while the query hangs: no signal, no wait
    finally:
        release.set()
        watch.stop()


def test_a_reading_older_than_stale_is_no_signal():
    clock = FakeClock()

    class Source:
        def control_plane(self, at=0.0):
            return ControlPlane(0.3, 2.5, at)

    watch = ControlPlaneWatch(Source(), interval=5, stale=20, clock=clock)
    watch.poll()
    clock.now += 20
    assert watch.latest() == ControlPlane(0.3, 2.5, 1000.0)
    clock.now += 0.5
    assert watch.latest() is None
