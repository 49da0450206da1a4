"""Why a gang waits: the queue's state first, then the PodGroup's condition (kube.waiting),
and `status` asking for it (engine.status.explain_pending)."""

from __future__ import annotations

from stratctl.backends.kubernetes.objects.waiting import MISSING, Queues, explain_pending, queue_problem, reason
from stratctl.errors import NotFound
from stratctl.run.rows import TrialRow

UNSCHEDULABLE = {
    "spec": {"queue": "default"},
    "status": {
        "phase": "Inqueue",
        "conditions": [
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable; "
                "Pending: 2 Unschedulable. Origin reason is t-worker-0: 0/8 nodes are unavailable: "
                "8 Insufficient nvidia.com/gpu.",
            }
        ],
    },
}
PENDING = {"spec": {"queue": "gone"}, "status": {"phase": "Pending"}}


def test_a_queue_that_does_not_exist_or_is_not_open_is_the_cause():
    assert queue_problem("gone", MISSING) == (
        "queue 'gone' does not exist: Volcano will not schedule the gang (create the queue, or drain the study)"
    )
    assert (
        queue_problem("q", {"status": {"state": "Closed"}}) == "queue 'q' is Closed: Volcano admits no new gang from it"
    )
    assert (
        queue_problem("q", {"status": {"state": "Closing"}})
        == "queue 'q' is Closing: Volcano admits no new gang from it"
    )
    assert queue_problem("q", {"status": {"state": "Open"}}) == ""
    assert queue_problem("q", {"status": {}}) == ""  # a queue the controller has not synced yet
    assert queue_problem("q", None) == ""  # not readable: no verdict


def test_the_queue_comes_before_what_the_podgroup_says():
    closed = {"status": {"state": "Closed"}}
    assert reason(PENDING, "q", closed) == "queue 'q' is Closed: Volcano admits no new gang from it"
    assert reason(None, "gone", MISSING).startswith("queue 'gone' does not exist")
    assert reason(UNSCHEDULABLE, "default", {"status": {"state": "Open"}}).endswith(
        "0/8 nodes are unavailable: 8 Insufficient nvidia.com/gpu."
    )
    assert reason(PENDING) == "waiting for the queue to admit the gang"
    assert reason(None) == "no PodGroup yet: the Volcano job controller has not caught up"


def event(message: str, at: str, reason: str = "Unschedulable") -> dict:
    return {"reason": reason, "message": message, "lastTimestamp": at}


def test_the_scheduler_s_events_tell_what_a_gang_without_pods_waits_for():
    events = [
        event("0/0 tasks in gang unschedulable: pod group is not ready, 2 minAvailable", "2026-01-01T00:00:09Z"),
        event("queue resource quota insufficient: insufficient cpu", "2026-01-01T00:00:01Z"),
        event("queue resource quota insufficient: insufficient nvidia.com/gpu", "2026-01-01T00:00:05Z"),
        event("something else", "2026-01-01T00:00:08Z", reason="Scheduled"),
    ]
    assert reason({"status": {"phase": "Pending"}}, events=events) == (
        "queue resource quota insufficient: insufficient nvidia.com/gpu"
    )
    assert reason(UNSCHEDULABLE, events=events) == UNSCHEDULABLE["status"]["conditions"][0]["message"]
    assert reason({"status": {"phase": "Pending"}}, events=events[:1]) == "waiting for the queue to admit the gang"


class Cluster:
    def __init__(self, objects):
        self.objects = objects
        self.gets: list[tuple[str, str]] = []

    def list(self, kind, namespace=None, field_selector=None, **_):
        self.gets.append((kind[1], field_selector))
        return self.objects.get((kind[1], field_selector), []), "1"

    def get(self, kind, name, namespace=None):
        self.gets.append((kind[1], name))
        try:
            return self.objects[(kind[1], name)]
        except KeyError:
            raise NotFound(f"{kind[1]} {name} not found") from None


def row(trial: str, job: str) -> TrialRow:
    return TrialRow(study="s", trial=trial, state="pending", attempt=0, job=job, podgroup=f"{job}-uid")


def test_status_names_the_queue_of_a_job_volcano_made_no_podgroup_for():
    cluster = Cluster(
        {
            ("Job", "a"): {"spec": {"queue": "gone"}},
            ("Job", "b"): {"spec": {"queue": "gone"}},
            ("PodGroup", "c-uid"): {"spec": {"queue": "shut"}, "status": {"phase": "Pending"}},
            ("Queue", "shut"): {"status": {"state": "Closed"}},
            ("PodGroup", "d-uid"): UNSCHEDULABLE,
            ("Queue", "default"): {"status": {"state": "Open"}},
            ("PodGroup", "f-uid"): {"spec": {"queue": "default"}, "status": {"phase": "Pending"}},
            ("Event", "involvedObject.name=f-uid"): [
                event("queue resource quota insufficient: insufficient nvidia.com/gpu", "2026-01-01T00:00:00Z")
            ],
        }
    )
    rows = [row("a", "a"), row("b", "b"), row("c", "c"), row("d", "d"), row("e", "e"), row("f", "f")]
    explain_pending(cluster, "ns", rows)
    assert [r.pending for r in rows] == [
        "queue 'gone' does not exist: Volcano will not schedule the gang (create the queue, or drain the study)",
        "queue 'gone' does not exist: Volcano will not schedule the gang (create the queue, or drain the study)",
        "queue 'shut' is Closed: Volcano admits no new gang from it",
        UNSCHEDULABLE["status"]["conditions"][0]["message"],
        "no PodGroup yet: the Volcano job controller has not caught up",
        "queue resource quota insufficient: insufficient nvidia.com/gpu",
    ]
    assert cluster.gets.count(("Queue", "gone")) == 1  # each queue read once per picture
    assert ("Event", "involvedObject.name=d-uid") not in cluster.gets  # the condition said it: no events read


def test_queues_are_read_once_and_unknown_when_unreadable():
    from stratctl.errors import Invalid

    class Forbidden(Cluster):
        def get(self, kind, name, namespace=None):
            self.gets.append((kind[1], name))
            raise Invalid("forbidden", status=403)

    cluster = Forbidden({})
    queues = Queues(cluster)
    assert queues.get("q") is None and queues.get("q") is None and queues.get(None) is None
    assert cluster.gets == [("Queue", "q")]


def test_gangs_of_one_kind_are_explained_by_the_events_of_one_of_them():
    """Each events list is a scan of the namespace's events: gangs in the same queue and
    phase asking for the same resources share one, and a different kind reads its own."""
    pending = {"phase": "Pending"}
    big = {"queue": "default", "minMember": 1, "minResources": {"nvidia.com/gpu": "8"}}
    small = {**big, "minResources": {"nvidia.com/gpu": "1"}}
    objects = {
        ("Queue", "default"): {"status": {"state": "Open"}},
        ("Event", "involvedObject.name=b1-uid"): [
            event("queue resource quota insufficient: insufficient nvidia.com/gpu", "2026-01-01T00:00:00Z")
        ],
        ("Event", "involvedObject.name=s1-uid"): [
            event("0/4 nodes are unavailable: 4 Insufficient nvidia.com/gpu.", "2026-01-01T00:00:00Z")
        ],
    }
    for name, spec in [("b1", big), ("b2", big), ("b3", big), ("s1", small), ("s2", small)]:
        objects[("PodGroup", f"{name}-uid")] = {"spec": spec, "status": pending}
    cluster = Cluster(objects)
    rows = [row(n, n) for n in ("b1", "b2", "b3", "s1", "s2")]
    explain_pending(cluster, "ns", rows)
    assert [r.pending for r in rows] == ["queue resource quota insufficient: insufficient nvidia.com/gpu"] * 3 + [
        "0/4 nodes are unavailable: 4 Insufficient nvidia.com/gpu."
    ] * 2
    assert sorted(sel for kind, sel in cluster.gets if kind == "Event") == [
        "involvedObject.name=b1-uid",
        "involvedObject.name=s1-uid",
    ]
