"""The Grafana board against the testbed's Prometheus: while a study runs (its submit loop
scraped through `--metrics-port`), every panel's query and every alerting rule's
expression evaluates without error, and every panel's query returns series.

Grafana's `$__rate_interval` is 1m here, `$study` the study's name. A burst of the
restricted user's requests under the testbed's APF limit makes the API server answer
429s, so the 429 panel has something to draw; a 5xx is not provoked (the one target
allowed to come back empty)."""

from __future__ import annotations

import importlib.util
import json
import socket
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from stratctl import labels
from tests.e2e.support import fake_study, finish, running_pods, unique, wait_until
from tests.e2e.test_testbed import _burst, _cleanup_configmaps

pytestmark = pytest.mark.e2e

BOARD = Path(__file__).resolve().parents[2] / "dashboards" / "board.py"
MAY_BE_EMPTY = {"5xx {{verb}}"}  # no 5xx is provoked


def generator():
    spec = importlib.util.spec_from_file_location("board", BOARD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def query(url: str, expr: str) -> dict:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10) as r:
        return json.load(r)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_panel_and_rule_evaluates_against_prometheus_while_a_study_runs(testbed, api, cli, studies):
    if testbed.prometheus_url is None or testbed.prometheus_targets is None:
        pytest.skip("no Prometheus with file-based discovery (STRATCTL_TEST_PROMETHEUS_URL, _TARGETS)")
    board = generator()
    name = unique("board")
    path = studies(name, fake_study(name, testbed.namespace, 6, "15s", parallelism=3))
    port = free_port()
    target = testbed.prometheus_targets / f"{name}.json"
    target.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"]}]))
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
        testbed.prometheus_url,
    )
    try:
        wait_until(lambda: len(running_pods(api, f"{labels.STUDY}={name}")) == 3, 60, message="three trials running")
        testbed.apf(True)  # a burst under the one-seat APF limit: 429s for the 429 panel
        try:
            assert any(code == 429 for code, _ in _burst(testbed.restricted(), testbed.namespace, f"{name}-apf"))
        finally:
            testbed.apf(False)
            _cleanup_configmaps(testbed, f"{name}-apf")
        wait_until(
            lambda: query(testbed.prometheus_url, f'stratctl_target_in_flight{{study="{name}"}}')["data"]["result"],
            30,
            message="the submit loop's series scraped",
        )

        def empty_panels():
            empty = []
            for _, title, _, targets in board.PANELS:
                for expr, legend in targets:
                    answer = query(
                        testbed.prometheus_url, expr.replace("$__rate_interval", "1m").replace("$study", name)
                    )
                    assert answer["status"] == "success", (title, expr, answer)
                    if not answer["data"]["result"] and legend not in MAY_BE_EMPTY:
                        empty.append(f"{title}: {expr}")
            return empty

        # each series needs a scrape or two (and a rate two samples): wait for the last to show
        wait_until(lambda: not empty_panels(), 60, message="every panel's query returning series")
        for alert, expr, *_ in board.RULES:
            assert query(testbed.prometheus_url, expr)["status"] == "success", alert
        assert finish(run, timeout=180)["succeeded"] == 6
    finally:
        target.unlink(missing_ok=True)
        if run.poll() is None:
            run.kill()
