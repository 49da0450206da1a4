"""The loop's reader of report lines in the running pods' logs (search/reportlog.py): what it
asks the API server for, when, and what it makes of the answers."""

from __future__ import annotations

from stratctl.backends.kubernetes.search.reportlog import LogReports, since_of
from stratctl.errors import ClusterError, Unavailable
from stratctl.trial.metrics import report_line


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Logs:
    """pods/log as the API server answers it: each pod's lines with their timestamps, from
    the whole second of `sinceTime`; a pod may fail instead."""

    def __init__(self):
        self.lines: dict[str, list[str]] = {}
        self.fail: dict[str, Exception] = {}
        self.reads: list[tuple[str, str | None, str | None]] = []

    def pod_log(self, name, namespace=None, container=None, timestamps=False, since_time=None, limit_bytes=None):
        assert timestamps and limit_bytes and namespace == "ns"
        self.reads.append((name, container, since_time))
        if name in self.fail:
            raise self.fail[name]
        since = (since_time or "")[:19]
        return iter((line + "\n").encode() for line in self.lines.get(name, []) if line[:19] >= since)


def pod(name: str, job: str, phase: str = "Running") -> dict:
    return {
        "metadata": {"name": name, "uid": f"u-{name}", "labels": {"volcano.sh/job-name": job}},
        "spec": {"containers": [{"name": "worker"}, {"name": "sidecar"}]},
        "status": {"phase": phase},
    }


def said(stamp: str, step: int, **values: float) -> str:
    return f"{stamp} {report_line(step, values).rstrip()}"


def test_reports_are_read_per_job_incrementally_and_at_most_every_interval():
    logs, clock = Logs(), Clock()
    reader = LogReports(logs, "ns", every=5.0, clock=clock)
    logs.lines["j1-worker-0"] = [
        "2026-12-07T02:00:00.100Z epoch 1",
        said("2026-12-07T02:00:01.200Z", 1, loss=0.9, acc=0.1),
        said("2026-12-07T02:00:02.300Z", 2, acc=0.2),  # no loss at this step
    ]
    pods = [pod("j1-worker-0", "j1"), pod("j2-worker-0", "j2", phase="Pending")]
    assert reader.read(pods, "loss") == {"j1": {1: 0.9}}
    assert logs.reads == [("j1-worker-0", "worker", None)]  # the trial's container; a pending pod is not read

    logs.lines["j1-worker-0"].append(said("2026-12-07T02:00:02.900Z", 3, loss=0.7))
    clock.now += 4.5
    assert reader.read(pods, "loss") == {"j1": {1: 0.9}}  # not due: what it read before
    assert len(logs.reads) == 1
    clock.now += 0.5
    assert reader.read(pods, "loss") == {"j1": {1: 0.9, 3: 0.7}}
    # again from the whole second of the last line read: that second's lines come twice, harmlessly
    assert logs.reads[-1] == ("j1-worker-0", "worker", "2026-12-07T02:00:02Z")
    assert since_of("2026-12-07T02:00:02.300000000Z") == "2026-12-07T02:00:02Z"


def test_a_gang_reports_once_per_step_and_ended_pods_are_forgotten():
    logs, clock = Logs(), Clock()
    reader = LogReports(logs, "ns", every=5.0, clock=clock)
    logs.lines["j-worker-0"] = [said("2026-12-07T02:00:01Z", 1, loss=0.5)]
    logs.lines["j-worker-1"] = [said("2026-12-07T02:00:01Z", 1, loss=0.6), said("2026-12-07T02:00:02Z", 2, loss=0.4)]
    both = [pod("j-worker-0", "j"), pod("j-worker-1", "j")]
    assert reader.read(both, "loss") == {"j": {1: 0.5, 2: 0.4}}  # the first pod's value of a step wins
    clock.now += 10
    assert reader.read([pod("j-worker-0", "j", phase="Succeeded")], "loss") == {}
    assert reader.steps == {} and reader.since == {}


def test_a_pod_whose_node_serves_no_log_is_not_asked_again_a_transient_failure_is():
    logs, clock = Logs(), Clock()
    reader = LogReports(logs, "ns", every=1.0, clock=clock)
    logs.fail["fake-0"] = ClusterError("the node's kubelet does not answer")
    logs.fail["blip-0"] = Unavailable("the stream broke")
    pods = [pod("fake-0", "fake"), pod("blip-0", "blip")]
    for _ in range(3):
        assert reader.read(pods, "loss") == {}
        clock.now += 1
    assert [name for name, _, _ in logs.reads].count("fake-0") == 1
    assert [name for name, _, _ in logs.reads].count("blip-0") == 3
