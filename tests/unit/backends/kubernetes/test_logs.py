"""logs: which pods of a trial are read, how several sources are told apart, and how a
followed stream carries on after a timeout without repeating or losing lines."""

from __future__ import annotations

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.verbs import logs as core
from stratctl.errors import Unavailable, UsageError
from tests.unit.fake_cluster import FakeCluster


def pod(name, trial="t1", attempt=0, task="worker", node="n1", containers=("main",), study="s"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "stratctl-e2e",
            "labels": {labels.STUDY: study, labels.TRIAL: trial, labels.ATTEMPT: str(attempt), core.TASK_KEY: task},
        },
        "spec": {"nodeName": node, "containers": [{"name": c} for c in containers]},
    }


class LogCluster(FakeCluster):
    """Pods whose containers have logs; `breaks` makes a followed stream fail after n lines."""

    def __init__(self):
        super().__init__()
        self.logs: dict[tuple[str, str], list[str]] = {}
        self.breaks: list[int] = []
        self.asked: list[dict] = []

    def pod_log(self, name, namespace=None, container=None, tail=None, follow=False, timestamps=False, since_time=None):
        self.asked.append({"pod": name, "container": container, "tail": tail, "since": since_time})
        lines = self.logs[(name, container)]
        if since_time is not None:  # the API server's sinceTime has whole seconds
            lines = [line for line in lines if line.split(" ")[0][:19] >= since_time[:19]]
        if tail is not None:
            lines = lines[-tail:]
        for n, line in enumerate(lines):
            if follow and self.breaks and n == self.breaks[0]:
                self.breaks.pop(0)
                raise Unavailable("the stream broke")
            yield ((line if timestamps else line.split(" ", 1)[1]) + "\n").encode()


def test_the_latest_attempt_of_the_trial_is_read_and_a_task_narrows_it():
    cluster = LogCluster()
    for p in (
        pod("t1-w-0"),
        pod("t1a1-w-0", attempt=1),
        pod("t1a1-w-1", attempt=1),
        pod("t1a1-ps-0", attempt=1, task="ps"),
        pod("t2-w-0", trial="t2"),
    ):
        cluster.create(p)
    assert [p["metadata"]["name"] for p in core.pods_of(cluster, "stratctl-e2e", "s", "t1")] == [
        "t1a1-ps-0",
        "t1a1-w-0",
        "t1a1-w-1",
    ]
    assert [p["metadata"]["name"] for p in core.pods_of(cluster, "stratctl-e2e", "s", "t1", "ps")] == ["t1a1-ps-0"]
    with pytest.raises(UsageError, match=r"no task 'eval' \(tasks: ps, worker\)"):
        core.pods_of(cluster, "stratctl-e2e", "s", "t1", "eval")
    with pytest.raises(UsageError, match="no study 's' in namespace stratctl-e2e"):  # why t9 has none: absent.py
        core.pods_of(cluster, "stratctl-e2e", "s", "t9")


def test_lines_are_prefixed_only_when_there_are_several_sources():
    one = core.sources([pod("a")])
    assert one == [core.Source("a", "main", "")]
    gang = core.sources([pod("a"), pod("b"), pod("c", node="")])  # c is not scheduled: nothing to read
    assert [s.prefix for s in gang] == ["a", "b"]
    sidecar = core.sources([pod("a", containers=("main", "proxy"))])
    assert [s.prefix for s in sidecar] == ["a/main", "a/proxy"]


def test_reading_a_gang_gives_each_pods_lines_with_its_name():
    cluster = LogCluster()
    for name in ("a", "b"):
        cluster.logs[(name, "main")] = [f"2026-01-01T00:00:0{i}Z {name} line {i}" for i in range(2)]
    got = list(core.lines(cluster, "ns", core.sources([pod("a"), pod("b")]), tail=1))
    assert got == [("a", "a line 1"), ("b", "b line 1")]


def test_instant_pads_the_fraction_so_timestamps_compare_as_strings():
    assert core.instant("2026-01-01T00:00:01.5Z") == "2026-01-01T00:00:01.500000000Z"
    assert core.instant("2026-01-01T00:00:01Z") == "2026-01-01T00:00:01.000000000Z"
    assert core.instant("2026-01-01T00:00:01.5Z") > core.instant("2026-01-01T00:00:01.25Z")


def test_a_followed_stream_that_breaks_is_resumed_without_repeating_or_losing_lines():
    cluster = LogCluster()
    cluster.create(pod("a"))  # still there: the break was a timeout, not the end
    stamps = ["2026-01-01T00:00:01.1Z", "2026-01-01T00:00:01.2Z", "2026-01-01T00:00:01.2Z", "2026-01-01T00:00:02Z"]
    cluster.logs[("a", "main")] = [f"{s} line {i}" for i, s in enumerate(stamps)]
    cluster.breaks = [2, 3]  # after "line 1"; again after "line 2" (same instant as "line 1")
    got = list(core.follow_one(cluster, "stratctl-e2e", core.Source("a", "main")))
    assert got == ["line 0", "line 1", "line 2", "line 3"]
    assert [a["since"] for a in cluster.asked] == [None, core.instant(stamps[1]), core.instant(stamps[2])]


def test_following_stops_when_the_pod_is_gone():
    cluster = LogCluster()
    cluster.logs[("a", "main")] = ["2026-01-01T00:00:01Z only"]
    cluster.breaks = [1]  # breaks after its one line; the pod no longer exists
    assert list(core.follow_one(cluster, "ns", core.Source("a", "main"))) == ["only"]


def test_the_cluster_reads_a_log_as_text_from_the_pods_log_subresource():
    from tests.unit.fakes import FakeClock
    from tests.unit.http_fakes import Answer, cluster

    made = cluster(FakeClock(), Answer(200, b"epoch 1\nnot {json\n"))
    assert list(made.pod_log("t1-w-0", container="main", tail=5)) == [b"epoch 1\n", b"not {json\n"]
    [request] = made.api.requests
    assert request["url"].endswith("/api/v1/namespaces/ns/pods/t1-w-0/log?container=main&tailLines=5")
    assert made.metrics.sent == {"log Pod": 1}


def test_logs_needs_one_trial_or_best_and_says_where_to_find_the_names():
    from typer.testing import CliRunner

    from stratctl.cli.main import app

    neither = CliRunner().invoke(app, ["logs", "sweep"])
    assert neither.exit_code == 2
    assert "name one trial of sweep (`stratctl status sweep -o name` lists them), or pass --best" in neither.output
    both = CliRunner().invoke(app, ["logs", "sweep", "sweep-1", "--best"])
    assert both.exit_code == 2 and "not both" in both.output
