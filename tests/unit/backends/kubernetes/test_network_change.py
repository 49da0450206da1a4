"""A network change as a laptop meets it: every open connection to the API server goes
silent for good (no FIN, no RST), new ones work again once the network is back.

A fake API server over real HTTP behind a proxy whose connections can go silent
(tests/netfault.py), with the deadlines shortened so that each test takes seconds."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from stratctl.backends.kubernetes.api import connect as connecting
from stratctl.backends.kubernetes.api import connections
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, POD, Cluster
from stratctl.backends.kubernetes.verbs.logs import Source, follow_one
from stratctl.cli.main import app
from stratctl.errors import ExitCode, Unavailable
from stratctl.run.outage import Outage
from stratctl.run.throttle import Backoff, Throttle
from tests.netfault import SilentProxy
from tests.unit.api_server import ApiServer
from tests.unit.fake_cluster import FakeCluster

NS = "stratctl-e2e"


@pytest.fixture
def network(tmp_path: Path, monkeypatch):
    """(fake API server, the proxy in front of it, a kubeconfig through the proxy)."""
    monkeypatch.setattr(connections, "SILENT", 1.0)
    monkeypatch.setattr(connections, "PROBE_TIMEOUT", 0.5)
    fake = FakeCluster(NS)
    fake.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": NS}, "data": {}})
    server = ApiServer(fake)
    proxy = SilentProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1]))
    config = yaml.safe_load(server.kubeconfig(tmp_path, NS).read_text())
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{proxy.port}"
    kubeconfig = tmp_path / "through-proxy"
    kubeconfig.write_text(yaml.safe_dump(config))
    yield server, proxy, kubeconfig
    proxy.close()
    server.close()


def idle(cluster: Cluster) -> list:
    """The pool's idle connections that are still open."""
    pool = cluster.api._server
    return [c for c in list(pool.pool.queue) if c is not None and c.sock is not None]


def test_a_request_on_a_dead_connection_fails_at_its_deadline_and_every_idle_one_is_closed(network):
    server, proxy, kubeconfig = network
    cluster = Cluster.connect(str(kubeconfig), namespace=NS, outage=Outage(patience=300))
    try:
        threads = [threading.Thread(target=cluster.get, args=(CONFIGMAP, "a")) for _ in range(3)]
        server_delay(server, 0.3)  # three at once: three connections, then idle in the pool
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        server_delay(server, 0.0)
        assert len(idle(cluster)) >= 2
        proxy.blackout()
        started = time.monotonic()
        with pytest.raises(Unavailable):
            cluster.get(CONFIGMAP, "a")
        assert 0.9 <= time.monotonic() - started < 2.0  # the deadline (SILENT 1 s here), not the old 60 s
        assert idle(cluster) == []  # they went down together: none is tried again
        proxy.restore()
        accepted, started = proxy.accepted, time.monotonic()
        assert cluster.get(CONFIGMAP, "a")["metadata"]["name"] == "a"
        assert time.monotonic() - started < 0.5 and proxy.accepted == accepted + 1  # a new connection at once
    finally:
        cluster.close()


def server_delay(server: ApiServer, seconds: float) -> None:
    """Answer every request `seconds` late (several requests then hold several connections)."""
    answer = ApiServer.answer

    def late(method, target, body):
        time.sleep(seconds)
        return answer(server, method, target, body)

    server.answer = late if seconds else (lambda *a: answer(server, *a))  # type: ignore[method-assign]


def test_a_watch_whose_connection_died_fails_within_its_span_and_grace(network, monkeypatch):
    """stratctl's watches end every WATCH_SPAN seconds (8) and a read waits WATCH_GRACE (2)
    more: SILENT (10) in all. Here: a span of 1 s and a grace of 0.5 s."""
    server, proxy, kubeconfig = network
    monkeypatch.setattr(connections, "WATCH_GRACE", 0.5)
    server.watch_open = True  # the server keeps a quiet watch open for its timeoutSeconds, then ends it
    cluster = Cluster.connect(str(kubeconfig), namespace=NS, outage=Outage(patience=300))
    try:
        started = time.monotonic()
        assert list(cluster.watch(POD, "1", timeout_seconds=1)) == []  # a live quiet watch: a clean end
        assert 0.9 <= time.monotonic() - started < 1.4
        threading.Timer(0.3, proxy.blackout).start()  # once the watch is open: its end never arrives
        started = time.monotonic()
        with pytest.raises(Unavailable, match="the stream broke"):
            list(cluster.watch(POD, "1", timeout_seconds=1))  # not a clean end: nothing says "no change"
        assert time.monotonic() - started < 1.5 + 0.4  # its span and grace from its last byte
    finally:
        cluster.close()


def test_once_the_server_answers_again_a_request_stuck_on_a_dead_connection_goes_again_at_once(network, monkeypatch):
    """The deadline here is 30 s: only the probe's answer and the cut can end the wait early."""
    server, proxy, kubeconfig = network
    monkeypatch.setattr(connections, "SILENT", 30.0)
    said: list[str] = []
    outage = Outage(patience=300)
    outage.stall = 0.5  # a request unanswered this long starts the outage (10 s by default)
    outage.listen(lambda change: said.append(outage.said(change)))
    throttle = Throttle(qps=0, burst=1, backoff=Backoff(base=0.01, cap=0.02))
    cluster = Cluster.connect(str(kubeconfig), namespace=NS, gate=throttle.call, outage=outage)
    try:
        cluster.get(CONFIGMAP, "a")  # a connection, now idle and about to die
        proxy.blackout()
        got: list = []
        started = time.monotonic()
        asker = threading.Thread(target=lambda: got.append(cluster.get(CONFIGMAP, "a")))
        asker.start()
        time.sleep(2.5)  # the outage is seen (stall), the probes find no answer
        assert said and said[0].startswith("API server unreachable")
        proxy.restore()
        back = time.monotonic()
        asker.join(timeout=10)
        assert got and got[0]["metadata"]["name"] == "a"
        assert time.monotonic() - back < 4  # the next probe (every 1 s) answers, the request is cut and sent again
        assert time.monotonic() - started < 6
        assert len(said) == 2 and said[1].startswith("API server answering again")  # the cut is no new outage
    finally:
        cluster.close()


def test_a_followed_log_whose_connection_died_goes_on_from_its_last_line(network):
    server, proxy, kubeconfig = network
    server.cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}})
    server.log, server.log_hold = ["2026-12-06T10:00:01Z one", "2026-12-06T10:00:02Z two"], 30.0
    cluster = Cluster.connect(str(kubeconfig), namespace=NS, outage=Outage(patience=300))
    try:
        lines = follow_one(cluster, NS, Source("p", "trial"))
        assert [next(lines), next(lines)] == ["one", "two"]  # then the container is quiet, the stream open

        def back() -> None:
            server.log.append("2026-12-06T10:00:09Z three")  # printed while the network was out
            proxy.restore()

        proxy.blackout()
        threading.Timer(2.0, back).start()
        started = time.monotonic()
        assert next(lines) == "three"  # from the last line's timestamp on: none twice, none lost
        assert time.monotonic() - started < 2.0 + 2 * connections.SILENT + 1
    finally:
        cluster.close()


def test_status_rides_out_a_network_change_and_says_unreachable_in_one_line_when_it_lasts(network, monkeypatch):
    server, proxy, kubeconfig = network
    runner = CliRunner()
    args = ["status", "--kubeconfig", str(kubeconfig), "-n", NS]
    assert runner.invoke(app, args).exit_code == 0
    proxy.blackout()
    threading.Timer(2.0, proxy.restore).start()
    started = time.monotonic()
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 6  # 2 s out, a dead connection found in 1 s, a new one at once
    proxy.blackout()  # for good now: the one-shot bound (3 s here) ends it
    monkeypatch.setattr(connecting, "ONE_SHOT_PATIENCE", 3.0)
    result = runner.invoke(app, args)
    assert result.exit_code == ExitCode.CLUSTER
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no answer from the API server" in lines[0] and "Traceback" not in result.output
