import inspect
import socket
import urllib.request

import pytest
from prometheus_client import generate_latest

from stratctl.cli.submit import submit
from stratctl.errors import UsageError
from stratctl.run.progress import Progress
from stratctl.view.metrics import MetricsReporter


def test_progress_becomes_prometheus_metrics():
    reporter = MetricsReporter()
    p = Progress(study="sweep", total=10, pending=2, running=3, target=6, throttled_429=4, free_gpus=12, gangs_fit=3)
    reporter.update(p)
    p.target, p.throttled_429 = 3, 7
    reporter.update(p)
    text = generate_latest(reporter.registry).decode()
    assert 'stratctl_target_in_flight{study="sweep"} 3.0' in text
    assert 'stratctl_trials_in_flight{study="sweep"} 5.0' in text
    assert 'stratctl_cluster_gangs_fit{study="sweep"} 3.0' in text
    assert 'stratctl_http_429_total{study="sweep"} 7.0' in text
    assert 'stratctl_target_changes_total{study="sweep"} 1.0' in text


def test_counters_are_exported_at_zero_from_the_first_update():
    reporter = MetricsReporter()
    reporter.update(Progress(study="sweep", total=4, target=2))
    text = generate_latest(reporter.registry).decode()
    for counter in ("stratctl_http_429_total", "stratctl_watch_failures_total", "stratctl_target_changes_total"):
        assert f'{counter}{{study="sweep"}} 0.0' in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_are_served_on_loopback_by_default():
    port = _free_port()
    MetricsReporter().serve(port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200
    assert inspect.signature(submit).parameters["metrics_address"].default == "127.0.0.1"


def test_a_metrics_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError) as caught:
            MetricsReporter().serve(port)
    assert str(caught.value) == (
        f"--metrics-port {port}: 127.0.0.1:{port} is in use; choose another port or stop what listens there"
    )
    assert caught.value.exit_code == 2
