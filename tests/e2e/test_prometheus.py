"""stratctl and the testbed's real Prometheus.

- Every PromQL query stratctl sends (`stratctl.backends.kubernetes.watch.prometheus.QUERIES`) returns data
  from a Prometheus that scrapes the cluster's components, while a study runs.
- A `submit --metrics-port` named in the Prometheus' file-based discovery directory is
  scraped: its own series (target, in flight, 429s, ...) are there, labelled by study.
- `submit --prometheus-url` with the real Prometheus reads those signals: the live
  panel's JSON shows etcd's p99 and Volcano's scheduling p90 as Prometheus answered them.

The breaker tripping on a real etcd pause, read through this Prometheus, is in
test_breaker.py.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
import urllib.request

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.watch.prometheus import QUERIES, Prometheus
from tests.e2e.support import fake_study, finish, running_pods, unique, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def prometheus_url(testbed):
    if testbed.prometheus_url is None:
        pytest.skip("this cluster has no Prometheus (set STRATCTL_TEST_PROMETHEUS_URL)")
    return testbed.prometheus_url


def instant(url: str, expr: str) -> list[dict]:
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as response:
        doc = json.load(response)
    assert doc["status"] == "success", (expr, doc)
    return doc["data"]["result"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_query_stratctl_sends_returns_data_and_submit_is_scraped(testbed, prometheus_url, api, cli, studies):
    if testbed.prometheus_targets is None:
        pytest.skip("no file-based discovery directory for this Prometheus (STRATCTL_TEST_PROMETHEUS_TARGETS)")
    name = unique("prom")
    path = studies(name, fake_study(name, testbed.namespace, 4, "20s", parallelism=2))
    port = free_port()
    target = testbed.prometheus_targets / f"{name}.json"
    target.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": {"test": name}}]))
    run = cli.start(
        "submit",
        path,
        "-o",
        "json",
        "--poll-interval",
        "1",
        "--metrics-port",
        str(port),
        "--prometheus-url",
        prometheus_url,
    )
    try:
        wait_until(
            lambda: len(running_pods(api, f"{labels.STUDY}={name}")) == 2,
            60,
            message="the study's first two trials running",
        )
        # stratctl's own series, scraped through file-based discovery
        up = wait_until(
            lambda: instant(prometheus_url, f'up{{job="stratctl",test="{name}"}} == 1'),
            30,
            message="Prometheus scraping the submit's --metrics-port",
        )
        assert up[0]["metric"]["instance"] == f"127.0.0.1:{port}"
        target_series = wait_until(
            lambda: instant(prometheus_url, f'stratctl_target_in_flight{{study="{name}"}}'),
            30,
            message="stratctl_target_in_flight of the study in Prometheus",
        )
        assert float(target_series[0]["value"][1]) == 2
        # every query stratctl sends answers a number while the study runs
        prometheus = Prometheus(prometheus_url, timeout=5)
        for expr in QUERIES:
            assert instant(prometheus_url, expr), f"no data for {expr}"
            assert prometheus.query(expr) is not None, expr
        progress = finish(run, timeout=180)
    finally:
        target.unlink(missing_ok=True)
        if run.poll() is None:
            run.kill()
    assert progress["succeeded"] == 4
    # the loop read them too: the final progress carries the readings it acted on
    assert progress["etcd_p99"] is not None and progress["etcd_p99"] < 0.25, progress
    assert progress["scheduling_latency_p90"] is not None, progress
