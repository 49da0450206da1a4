"""The etcd breaker's drain (`throttle.on_breaker: drain`) against the real testbed.

One trip, three studies running as separate `submit` processes against the real API
server, Volcano and KWOK: a non-critical study set to drain is drained (its jobs deleted
after its marks are written in its study record) and comes back when the breaker clears,
as its next attempts with STRATCTL_RESUME=1, and still finishes with every trial
succeeded exactly once; a critical study set to drain is not drained; a study left at
`hold` has nothing deleted.

`submit --prometheus-url` is given one of two Prometheus servers:

- **a real trip** (`test_..._on_a_real_etcd_pause`): the testbed's own Prometheus, which
  scrapes the API server, while etcd is SIGSTOPped for a few seconds (testbed/fault.sh
  etcd-pause). stratctl's query is the p99 of the API server's `etcd_request_duration_seconds`
  (its requests to etcd): etcd's own commit histogram cannot see a paused etcd; the API
  server's requests that waited on it can.
- **a scripted trip** (`test_..._on_a_scripted_reading`): a small query endpoint the test
  starts answers 600 ms, then 50 ms, when the test says, so the breaker's timing (persist,
  clear, minimum time drained) is checked against a known trace.

The Kubernetes API is never mocked.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.record import parse_record, record_name, suspended_of
from stratctl.backends.kubernetes.objects.state import TrialState, classify, latest_attempts
from stratctl.backends.kubernetes.watch.prometheus import ETCD_P99, Prometheus
from tests.e2e.support import env_of, fake_study, finish, running_pods, unique, wait_until

pytestmark = pytest.mark.e2e

FAULT = Path(__file__).resolve().parents[2] / "testbed" / "fault.sh"


class PrometheusStandIn:
    """Answers Prometheus instant queries (/api/v1/query): `etcd()` seconds for the etcd
    latency query (no sample when None), no sample for any other (Volcano's)."""

    def __init__(self, etcd):
        self.etcd = etcd
        self.queries = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                owner.queries += 1
                value = owner.etcd() if "etcd" in self.path else None
                result = [] if value is None else [{"metric": {}, "value": [time.time(), str(value)]}]
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def fault(*args: str, timeout: float = 120) -> None:
    done = subprocess.run(["bash", str(FAULT), *args], capture_output=True, text=True, timeout=timeout)
    sys.stderr.write(done.stderr)
    assert done.returncode == 0, f"fault.sh {' '.join(args)} exited {done.returncode}:\n{done.stderr}"


def study_yaml(name, namespace, trials, duration, parallelism, on_breaker, critical=False):
    return fake_study(
        name, namespace, trials, duration, parallelism=parallelism, fields={"critical": str(critical).lower()}
    ).replace(f"max: {parallelism}}}}}", f"max: {parallelism}}}, on_breaker: {on_breaker}}}")


def jobs_of(api, study):
    return api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={study}")[0]


def uids(api, study):
    return {j["metadata"]["uid"] for j in jobs_of(api, study)}


def one_trip(testbed, api, cli, studies, prometheus_url, trip, heal, sweep_duration, others_duration):
    """Start the three studies, `trip()` the breaker once every study runs, check what was
    drained and what was not, `heal()`, and check that the drained study comes back and
    every study finishes. Returns (seconds from trip() to the sweep's jobs gone, from
    heal() to its first attempt back, from trip() to that)."""
    sweep, prod, steady = unique("brk"), unique("bcrit"), unique("bhold")
    paths = {
        sweep: studies(sweep, study_yaml(sweep, testbed.namespace, 6, sweep_duration, 3, "drain")),
        prod: studies(prod, study_yaml(prod, testbed.namespace, 2, others_duration, 2, "drain", critical=True)),
        steady: studies(steady, study_yaml(steady, testbed.namespace, 2, others_duration, 2, "hold")),
    }
    runs = {
        name: cli.start("submit", path, "-o", "json", "--poll-interval", "1", "--prometheus-url", prometheus_url)
        for name, path in paths.items()
    }
    try:
        wait_until(
            lambda: all(
                len(running_pods(api, f"{labels.STUDY}={n}")) == want
                for n, want in ((sweep, 3), (prod, 2), (steady, 2))
            ),
            90,
            message="every study's first trials running",
        )
        before = {n: uids(api, n) for n in (prod, steady)}
        first = {j["metadata"]["labels"][labels.TRIAL] for j in jobs_of(api, sweep)}

        tripped = time.monotonic()
        trip()
        wait_until(lambda: not jobs_of(api, sweep), 90, message="the sweep's jobs deleted by the breaker")
        took = time.monotonic() - tripped
        cm = api.get(CONFIGMAP, record_name(sweep))
        record = parse_record(cm)
        assert record.breaker.startswith("etcd p99 ") and not record.drained, record
        marks = suspended_of(cm)
        assert set(marks) == first and {m["by"] for m in marks.values()} == {"breaker"}
        wait_until(lambda: not running_pods(api, f"{labels.STUDY}={sweep}"), 60, message="the sweep's pods gone")
        snap = cli.status(sweep)
        assert snap["studies"][0]["breaker"] == record.breaker and not snap["studies"][0]["drained"]
        assert snap["studies"][0]["states"]["suspended"] == 3
        # the critical study and the `hold` study: the same jobs, still running, no breaker flag
        for name in (prod, steady):
            assert uids(api, name) == before[name], name
            assert len(running_pods(api, f"{labels.STUDY}={name}")) == 2, name
            assert parse_record(api.get(CONFIGMAP, record_name(name))).breaker == ""
        # the sweep's loop holds while the breaker does: nothing new for several cycles
        time.sleep(5)
        assert not jobs_of(api, sweep)

        healed = time.monotonic()
        heal()
        back = wait_until(
            lambda: [j for j in jobs_of(api, sweep) if j["metadata"]["labels"][labels.ATTEMPT] == "1"],
            150,
            message="the sweep's suspended trials back as attempt 1",
        )
        came_back = time.monotonic()
        assert parse_record(api.get(CONFIGMAP, record_name(sweep))).breaker == ""
        progress = {name: finish(run, timeout=240) for name, run in runs.items()}
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
    assert {j["metadata"]["labels"][labels.TRIAL] for j in back} <= first
    assert progress[sweep]["succeeded"] == 6 and progress[sweep]["failed"] == 0
    jobs = jobs_of(api, sweep)
    resumed = [j for j in jobs if j["metadata"]["labels"][labels.ATTEMPT] == "1"]
    assert {j["metadata"]["labels"][labels.TRIAL] for j in resumed} == first
    assert all(env_of(j)["STRATCTL_RESUME"] == "1" for j in resumed)
    # every trial succeeded exactly once: the suspended trials' first attempts were deleted
    # before they ended, the others were never suspended
    latest = latest_attempts(jobs)
    assert len(latest) == 6 and all(classify(j) is TrialState.SUCCEEDED for j in latest.values())
    assert len(jobs) == 6
    assert {
        j["metadata"]["labels"][labels.TRIAL] for j in jobs if j["metadata"]["labels"][labels.ATTEMPT] == "0"
    } == set(latest) - first
    for name in (prod, steady):
        assert progress[name]["succeeded"] == 2 and progress[name]["failed"] == 0
        assert {j["metadata"]["labels"][labels.ATTEMPT] for j in jobs_of(api, name)} == {"0"}
    return took, came_back - healed, came_back - tripped


def test_the_etcd_breaker_drains_a_noncritical_study_on_a_real_etcd_pause(testbed, api, cli, studies):
    if not testbed.local:
        pytest.skip("pausing etcd needs the local testbed (testbed/fault.sh)")
    assert testbed.prometheus_url, "the local testbed runs Prometheus (testbed/up.sh)"
    prometheus = Prometheus(testbed.prometheus_url, timeout=5)
    calm = wait_until(lambda: prometheus.query(ETCD_P99), 60, message="a first reading of etcd's p99 latency")
    began = time.time()
    try:
        took, _, total = one_trip(
            testbed,
            api,
            cli,
            studies,
            testbed.prometheus_url,
            trip=lambda: fault("etcd-pause", "6"),
            heal=lambda: None,
            sweep_duration="60s",
            others_duration="120s",
        )
    finally:
        fault("restore")  # etcd continued, whatever failed
    # what stratctl read, over the test: the same query as a range
    readings = [v for v in query_range(testbed.prometheus_url, ETCD_P99, began, time.time()) if v is not None]
    high = [v for v in readings if v > 0.25]
    sys.stderr.write(
        f"etcd p99 (API server's view) before: {calm * 1000:.0f}ms; above 250ms in {len(high)} of "
        f"{len(readings)} readings, peak {max(high):.1f}s; jobs gone {took:.0f}s after the pause "
        f"began; back {total:.0f}s after\n"
    )
    assert calm < 0.25 and max(high) > 3  # the pause, as the API server saw it


def query_range(url: str, expr: str, start: float, end: float, step: float = 2.0) -> list[float | None]:
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{query}", timeout=10) as response:
        result = json.load(response)["data"]["result"]
    values = [float(v) for _, v in result[0]["values"]] if result else []
    return [v if math.isfinite(v) else None for v in values]


def test_the_etcd_breaker_drains_a_noncritical_study_on_a_scripted_reading(testbed, api, cli, studies):
    reading = {"etcd": 0.05}
    with PrometheusStandIn(lambda: reading["etcd"]) as prometheus:
        took, back, total = one_trip(
            testbed,
            api,
            cli,
            studies,
            prometheus.url,
            trip=lambda: reading.update(etcd=0.6),
            heal=lambda: reading.update(etcd=0.05),
            sweep_duration="40s",
            others_duration="80s",
        )
    assert prometheus.queries > 0
    # persist 10 s before it trips (readings every 5 s); 30 s below 200 ms and 60 s drained before it clears
    assert took >= 10 and back >= 25 and total >= 60, (took, back, total)
