"""The live panel and the log say why gangs that wait past the grace period cannot start
(engine.blocked), read from the queue and the PodGroup, at most every REFRESH seconds."""

from __future__ import annotations

import io

from stratctl.backends.kubernetes.objects.blocked import REFRESH, Blocked
from stratctl.errors import NotFound, Unavailable
from stratctl.run.progress import Progress
from stratctl.view.display import LogDisplay, progress_table
from tests.unit.view.test_display import text_of

JOB = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "sweep-1a2b", "uid": "u1"},
    "spec": {"queue": "research"},
}
GROUP = {"metadata": {"name": "sweep-1a2b-u1"}, "spec": {"queue": "research"}, "status": {"phase": "Pending"}}


class Cluster:
    def __init__(self, queue_state: str | None):
        self.queue_state = queue_state
        self.gets: list[str] = []
        self.down = False

    def get(self, kind, name, namespace=None):
        self.gets.append(f"{kind[1]} {name}")
        if self.down:
            raise Unavailable("no answer")
        if kind[1] == "Queue" and self.queue_state:
            return {"status": {"state": self.queue_state}}
        raise NotFound(name)

    def list(self, kind, namespace=None, field_selector=None, **_):
        self.gets.append(f"list {kind[1]} {field_selector}")
        return [
            {
                "reason": "Unschedulable",
                "message": "queue resource quota insufficient: insufficient nvidia.com/gpu",
                "lastTimestamp": "2026-01-01T00:00:00Z",
            }
        ], "1"


def test_a_closed_queue_is_said_once_and_read_again_only_after_refresh():
    cluster, said = Cluster("Closed"), []
    blocked = Blocked(cluster, "ns", said.append)
    assert blocked.why([JOB], [GROUP], now=100.0) == "queue 'research' is Closed: Volcano admits no new gang from it"
    assert said == [
        "1 gang(s) waiting to start; sweep-1a2b: queue 'research' is Closed: Volcano admits no new gang from it"
    ]
    assert cluster.gets == ["list Event involvedObject.name=sweep-1a2b-u1", "Queue research"]  # PodGroup: the mirror's
    cluster.queue_state = None  # deleted meanwhile: seen at the next refresh, not before
    assert blocked.why([JOB], [GROUP], now=100.0 + REFRESH - 1).endswith(
        "is Closed: Volcano admits no new gang from it"
    )
    assert blocked.why([JOB], [GROUP], now=100.0 + REFRESH).startswith("queue 'research' does not exist")
    assert len(said) == 2
    assert blocked.why([], [GROUP], now=200.0) == ""


def test_without_a_mirror_the_podgroup_is_read_and_a_failed_read_keeps_the_last_cause():
    cluster = Cluster("Open")
    blocked = Blocked(cluster, "ns")
    assert blocked.why([JOB], None, now=0.0) == "no PodGroup yet: the Volcano job controller has not caught up"
    assert cluster.gets == ["PodGroup sweep-1a2b-u1", "Queue research"]
    # a gang held back by its queue's quota before its pods exist: only the scheduler's events say so
    assert Blocked(cluster, "ns").why([JOB], [GROUP], now=0.0) == (
        "queue resource quota insufficient: insufficient nvidia.com/gpu"
    )
    cluster.down = True
    assert blocked.why([JOB], None, now=REFRESH) == "no PodGroup yet: the Volcano job controller has not caught up"


def test_the_panel_and_the_log_show_the_cause():
    p = Progress(
        study="sweep",
        total=4,
        pending=2,
        stuck=2,
        blocked="queue 'research' is Closed: Volcano admits no new gang from it",
    )
    assert "why pending  2 gang(s): queue 'research' is Closed: Volcano admits no new gang from it" in text_of(
        progress_table(p)
    )
    stream = io.StringIO()
    LogDisplay(stream, clock=lambda: 0.0).update(p)
    assert (
        stream.getvalue()
        .rstrip()
        .endswith("; 2 gang(s) waiting: queue 'research' is Closed: Volcano admits no new gang from it")
    )
    assert "why pending" not in text_of(progress_table(Progress(study="sweep", total=4, pending=2)))
