from prometheus_client import generate_latest

from stratctl.engine.progress import Progress
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
