"""The etcd breaker's drain (`throttle.on_breaker: drain`) against the real testbed.

The testbed runs no Prometheus, so the etcd latency comes from a small Prometheus query
endpoint the test starts on 127.0.0.1 and scripts (`ScriptedPrometheus`), passed to
`submit --prometheus-url`: only the reading is scripted. Everything on the Kubernetes side
is real: the three studies run as separate `submit` processes against the real API
server, Volcano and KWOK; the breaker drain deletes real jobs after writing its marks in
the real study record, and the trials come back as their next attempt with STRATCTL_RESUME=1.

One trip, three studies: a non-critical study set to drain is drained and comes back when
the breaker clears, and still finishes with every trial succeeded exactly once; a critical
study set to drain is not drained; a study left at `hold` has nothing deleted.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stratctl import labels
from stratctl.kube.cluster import CONFIGMAP, VOLCANO_JOB
from stratctl.kube.record import parse_record, record_name, suspended_of
from stratctl.kube.state import TrialState, classify, latest_attempts
from tests.e2e.support import env_of, fake_study, finish, running_pods, unique, wait_until

pytestmark = pytest.mark.e2e


class ScriptedPrometheus:
    """Answers Prometheus instant queries (/api/v1/query): `etcd` seconds for the etcd
    commit-latency query, no sample for any other (Volcano's scheduling latency)."""

    def __init__(self):
        self.etcd = 0.05
        self.queries = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                owner.queries += 1
                result = [{"metric": {}, "value": [time.time(), str(owner.etcd)]}] if "etcd" in self.path else []
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


def study_yaml(name, namespace, trials, duration, parallelism, on_breaker, critical=False):
    return fake_study(name, namespace, trials, duration, parallelism=parallelism,
                      fields={"critical": str(critical).lower()}).replace(
        f"max: {parallelism}}}}}", f"max: {parallelism}}}, on_breaker: {on_breaker}}}")


def jobs_of(api, study):
    return api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={study}")[0]


def uids(api, study):
    return {j["metadata"]["uid"] for j in jobs_of(api, study)}


def test_the_etcd_breaker_drains_a_noncritical_study_and_resumes_it(testbed, api, cli, studies):
    sweep, prod, steady = unique("brk"), unique("bcrit"), unique("bhold")
    paths = {
        sweep: studies(sweep, study_yaml(sweep, testbed.namespace, 6, "40s", 3, "drain")),
        prod: studies(prod, study_yaml(prod, testbed.namespace, 2, "80s", 2, "drain", critical=True)),
        steady: studies(steady, study_yaml(steady, testbed.namespace, 2, "80s", 2, "hold")),
    }
    with ScriptedPrometheus() as prometheus:
        runs = {name: cli.start("submit", path, "-o", "json", "--poll-interval", "1",
                                "--prometheus-url", prometheus.url) for name, path in paths.items()}
        try:
            wait_until(lambda: all(len(running_pods(api, f"{labels.STUDY}={n}")) == want
                                   for n, want in ((sweep, 3), (prod, 2), (steady, 2))), 90,
                       message="every study's first trials running")
            before = {n: uids(api, n) for n in (prod, steady)}
            first = {j["metadata"]["labels"][labels.TRIAL] for j in jobs_of(api, sweep)}
            assert prometheus.queries > 0

            prometheus.etcd = 0.6  # etcd commit p99 of 600 ms: above the 250 ms breaker
            tripped = time.monotonic()
            wait_until(lambda: not jobs_of(api, sweep), 45, message="the sweep's jobs deleted by the breaker")
            took = time.monotonic() - tripped
            assert took >= 10  # persist: not on the first readings above the threshold
            cm = api.get(CONFIGMAP, record_name(sweep))
            record = parse_record(cm)
            assert record.breaker.startswith("etcd commit p99 600ms above 250ms") and not record.drained
            marks = suspended_of(cm)
            assert set(marks) == first and {m["by"] for m in marks.values()} == {"breaker"}
            wait_until(lambda: not running_pods(api, f"{labels.STUDY}={sweep}"), 60, message="the sweep's pods gone")
            snap = cli.status(sweep)
            assert snap["studies"][0]["breaker"] == record.breaker and not snap["studies"][0]["drained"]
            assert snap["studies"][0]["states"]["suspended"] == 3
            # the critical study and the `hold` study: the same jobs, still running
            for name in (prod, steady):
                assert uids(api, name) == before[name], name
                assert len(running_pods(api, f"{labels.STUDY}={name}")) == 2, name
                assert parse_record(api.get(CONFIGMAP, record_name(name))).breaker == ""
            # the sweep's loop holds while the breaker does: nothing new for several cycles
            time.sleep(5)
            assert not jobs_of(api, sweep)

            prometheus.etcd = 0.05  # etcd healthy again
            healthy = time.monotonic()
            back = wait_until(lambda: [j for j in jobs_of(api, sweep)
                                       if j["metadata"]["labels"][labels.ATTEMPT] == "1"], 120,
                              message="the sweep's suspended trials back as attempt 1")
            # not before 30 s below 200 ms, and at least 60 s after the trip
            assert time.monotonic() - healthy >= 25 and time.monotonic() - tripped >= 60
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
    # every trial succeeded exactly once: its latest attempt, and no other attempt of it exists
    latest = latest_attempts(jobs)
    assert len(latest) == 6 and all(classify(j) is TrialState.SUCCEEDED for j in latest.values())
    assert len(jobs) == 6  # the suspended trials' first attempts were deleted, the others never suspended
    assert {j["metadata"]["labels"][labels.TRIAL] for j in jobs if j["metadata"]["labels"][labels.ATTEMPT] == "0"} \
        == set(latest) - first
    for name in (prod, steady):
        assert progress[name]["succeeded"] == 2 and progress[name]["failed"] == 0
        assert {j["metadata"]["labels"][labels.ATTEMPT] for j in jobs_of(api, name)} == {"0"}
