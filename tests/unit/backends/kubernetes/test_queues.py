"""Queue fallback: the pure choice of a queue for each new trial, the manifests it writes,
and the submit loop placing trials in a capped queue, then the next one."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import QUEUE
from stratctl.backends.kubernetes.attempts.requeue import create_attempt
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.run.queues import Room, choose, gang_demand, moves, place, place_all, queue_of_job, room_of
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import Events, FakeClock
from tests.unit.loop import STUDY, make
from tests.unit.rendering import Renderer

G = "nvidia.com/gpu"


def gpus(n) -> dict:
    return {G: Decimal(n)}


def test_the_first_queue_with_room_takes_the_gang():
    rooms = [Room("research", gpus(16), gpus(12)), Room("overflow")]
    assert choose(rooms, gpus(4)).queue == "research"
    placement = choose(rooms, gpus(8))
    assert (placement.queue, placement.reason, placement.fallback) == ("overflow", "research full (12/16 GPUs)", False)


def test_only_the_resources_the_capability_names_count():
    room = Room("research", gpus(16), {G: Decimal(16), "cpu": Decimal(100)})
    assert not room.fits(gpus(1))
    assert room.fits({"cpu": Decimal(4)})  # the capability says nothing of cpu
    assert Room("research", gpus(16), gpus(16)).fits({"cpu": Decimal(1), G: Decimal(0)})


def test_a_queue_without_capability_always_has_room_and_a_closed_one_never():
    assert Room("open", None, gpus(1000)).fits(gpus(64))
    closed = [Room("a", open=False), Room("b", gpus(8), gpus(8))]
    assert choose(closed + [Room("c")], gpus(1)).queue == "c"
    assert choose(closed + [Room("c")], gpus(1)).reason == "a not open, b full (8/8 GPUs)"


def test_when_no_queue_has_room_the_gang_waits_in_the_last():
    placement = choose([Room("a", gpus(8), gpus(8)), Room("b", gpus(4), gpus(2))], gpus(4))
    assert (placement.queue, placement.fallback) == ("b", True)
    assert placement.reason == "a full (8/8 GPUs), b full (2/4 GPUs); waits in the last queue"


def test_each_placement_counts_the_gangs_placed_before_it():
    rooms = [Room("capped", gpus(16), gpus(4)), Room("overflow")]
    assert [p.queue for p in place_all(rooms, [gpus(4)] * 5)] == ["capped"] * 3 + ["overflow"] * 2


def test_room_from_a_queue_object_less_the_gangs_in_transit():
    queue = {
        "metadata": {"name": "capped"},
        "spec": {"capability": {G: "16", "cpu": "8"}},
        "status": {"allocated": {G: "8", "cpu": "500m", "pods": "4"}, "state": "Open"},
    }
    room = room_of("capped", queue, [gpus(4), gpus(2)])
    assert room.capability == {G: Decimal(16), "cpu": Decimal(8)}
    assert room.used[G] == Decimal(14) and room.used["cpu"] == Decimal("0.5")
    assert room.fits(gpus(2)) and not room.fits(gpus(3))
    assert room_of("gone", None).open is False
    assert room_of("shut", {"status": {"state": "Closed"}}).open is False
    assert room_of("uncapped", {"spec": {}}).capability is None


def test_gang_demand_of_a_volcano_job_and_of_a_podgroup():
    pod = {"spec": {"containers": [{"resources": {"limits": {G: "2"}, "requests": {G: "2", "cpu": "1"}}}]}}
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "spec": {"tasks": [{"replicas": 4, "minAvailable": 3, "template": pod}, {"replicas": 1, "template": pod}]},
    }
    assert gang_demand([job]) == {G: Decimal(8), "cpu": Decimal(4)}
    group = {"kind": "PodGroup", "spec": {"minResources": {G: "6"}}}
    assert gang_demand([{"apiVersion": "batch/v1", "kind": "Job"}, group]) == gpus(6)


@pytest.fixture
def listed(tmp_path):
    def write(extra: str = "") -> str:
        path = tmp_path / "study.yaml"
        path.write_text(STUDY.replace("queue: default", "queue: [capped, overflow]") + extra)
        return str(path)

    return write


def test_placing_sets_the_queue_and_keeps_the_spec_hash(listed):
    study = load_study(listed())
    trial = expand(study)[0]
    manifests = Renderer(study).render(trial)
    assert manifests[0]["spec"]["queue"] == "capped"  # rendered for the first queue
    placed = place(manifests, "overflow")
    assert placed[0]["spec"]["queue"] == "overflow" and queue_of_job(placed[0]) == "overflow"
    assert placed[0]["metadata"]["labels"][labels.SPEC_HASH] == manifests[0]["metadata"]["labels"][labels.SPEC_HASH]
    assert manifests[0]["spec"]["queue"] == "capped"  # the rendering is left as it was


def test_a_rerun_adopts_a_trial_wherever_an_earlier_run_placed_it(listed):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(listed(), cluster, clock)
    manifests = submitter.renderer.render(trials[0])
    assert submitter.submit_trial(trials[0], manifests=place(manifests, "overflow")) == "created"
    # a rerun whose create answer was lost chose another queue this time: the same trial, adopted
    assert submitter.submit_trial(trials[0], manifests=place(manifests, "capped")) == "existing"
    assert cluster.creates == [trials[0].name]


def queues(cluster: FakeCluster, capability: int) -> None:
    for name, cap in (("capped", {G: str(capability)}), ("overflow", None)):
        cluster.objects[(*QUEUE, cluster.namespace, name)] = {
            "apiVersion": QUEUE[0],
            "kind": QUEUE[1],
            "metadata": {"name": name},
            "spec": {"capability": cap} if cap else {},
            "status": {"state": "Open", "allocated": {}},
        }


def allocate(cluster: FakeCluster) -> None:
    """What Volcano does: a queue's allocated is the GPUs of its running gangs."""
    for name in ("capped", "overflow"):
        running = [j for j in cluster.jobs(lambda p: p == "Running") if j["spec"]["queue"] == name]
        cluster.objects[(*QUEUE, cluster.namespace, name)]["status"]["allocated"] = {G: str(2 * len(running))}


def test_the_loop_fills_the_capped_queue_then_sends_trials_to_the_next(listed):
    cluster, clock = FakeCluster(), FakeClock()
    queues(cluster, capability=4)  # room for two gangs of 2 GPUs
    submitter, trials = make(listed(), cluster, clock)
    events = Events()
    submitter.reporter = events
    advance = submitter.sleep

    def sleep(seconds):
        advance(seconds)
        allocate(cluster)

    submitter.sleep = sleep
    progress = submitter.run()
    assert progress.succeeded == 10 and sorted(cluster.creates) == sorted(t.name for t in trials)
    jobs = cluster.jobs()
    # at most 3 in flight: two in capped, the third to overflow, from the first cycle on
    first = sorted((j for j in jobs), key=lambda j: cluster.creates.index(j["metadata"]["name"]))[:3]
    assert [j["spec"]["queue"] for j in first] == ["capped", "capped", "overflow"]
    assert {j["spec"]["queue"] for j in jobs} == {"capped", "overflow"}
    assert all(j["metadata"]["annotations"][labels.QUEUE] == j["spec"]["queue"] for j in jobs)
    assert events.about("→ queue overflow: capped full (4/4 GPUs)")
    record = json.loads(cluster.record("loop")["data"]["placements"])
    assert sum(record.values()) == 10 and record == {
        q: sum(1 for j in jobs if j["spec"]["queue"] == q) for q in ("capped", "overflow")
    }


def test_a_one_queue_study_is_placed_as_before(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    assert submitter.placer is None
    submitter.run()
    jobs = cluster.jobs()
    assert {j["spec"]["queue"] for j in jobs} == {"default"}
    assert not any(labels.QUEUE in (j["metadata"].get("annotations") or {}) for j in jobs)
    assert "placements" not in cluster.record("loop")["data"] or not cluster.record("loop")["data"]["placements"]


def test_a_gang_waiting_in_a_full_queue_moves_to_one_with_room():
    rooms = [Room("capped", gpus(4), gpus(8)), Room("overflow", gpus(4), gpus(0))]  # capped: 4 others' + 2 x 2 ours
    got = moves([("a", "capped", gpus(2)), ("b", "capped", gpus(2)), ("c", "capped", gpus(2))], rooms)
    assert [(m.trial, m.source, m.target) for m in got] == [("a", "capped", "overflow"), ("b", "capped", "overflow")]
    assert got[0].reason == "capped full (4/4 GPUs, 2 more waiting)"  # and c: overflow is full once a and b go there


def test_a_gang_its_queue_has_room_for_stays():
    rooms = [Room("capped", gpus(16), gpus(14)), Room("overflow")]  # 12 running + this gang of 2 in transit
    assert moves([("a", "capped", gpus(2))], rooms) == []
    assert moves([("a", "overflow", gpus(2))], [Room("capped", gpus(16), gpus(16)), Room("overflow")]) == []


def test_move_waiting_recreates_a_not_started_trial_in_the_queue_with_room(listed):
    cluster, clock = FakeCluster(), FakeClock()
    queues(cluster, capability=4)
    cluster.objects[(*QUEUE, cluster.namespace, "capped")]["status"]["allocated"] = {G: "4"}  # full, by others
    submitter, trials = make(listed(), cluster, clock, move_waiting=True, max_inflight=1, pending_grace=2.0)
    stuck = trials[0]
    # an earlier run placed it in capped when capped had room; it has not started since
    create_attempt(cluster, place(submitter.renderer.render(stuck), "capped"), cluster.namespace)
    events = Events()
    submitter.reporter = events

    def sleep(seconds):  # Volcano: nothing starts in the full queue, the rest starts then finishes
        clock.sleep(seconds)
        for job in cluster.jobs():
            phase = cluster.phase(job)
            if phase == "Running":
                cluster.set_phase(job, "Completed")
            elif phase == "Pending" and job["spec"]["queue"] != "capped":
                cluster.set_phase(job, "Running")

    submitter.sleep = sleep
    progress = submitter.run()
    assert progress.succeeded == 10
    assert cluster.creates.count(stuck.name) == 2  # deleted from capped, created once more in overflow
    assert {j["spec"]["queue"] for j in cluster.jobs()} == {"overflow"}
    assert events.about(
        f"trial {stuck.name} moved: queue capped → overflow, it had not started and capped full (4/4 GPUs)"
    )
    assert cluster.record("loop")["data"]["moved"] == "1"


def test_without_move_waiting_a_queued_trial_stays_where_it_is(listed):
    cluster, clock = FakeCluster(), FakeClock()
    queues(cluster, capability=4)
    cluster.objects[(*QUEUE, cluster.namespace, "capped")]["status"]["allocated"] = {G: "4"}
    submitter, trials = make(listed(), cluster, clock, max_inflight=1, pending_grace=2.0, timeout=30.0)
    create_attempt(cluster, place(submitter.renderer.render(trials[0]), "capped"), cluster.namespace)
    submitter.sleep = clock.sleep  # nothing ever starts
    submitter.run()
    assert cluster.jobs()[0]["spec"]["queue"] == "capped" and len(cluster.jobs()) == 1


def test_status_shows_a_queue_column_when_trials_are_in_several_queues():
    from stratctl.run.rows import TrialRow
    from stratctl.view.columns import trial_columns

    rows = [TrialRow("s", "s-a", "running", 0, queue="capped"), TrialRow("s", "s-b", "pending", 0, queue="overflow")]
    column = next(c for c in trial_columns(rows, 0.0) if c.key == "queue")
    assert column.cells == ["capped", "overflow"]
    one = [TrialRow("s", "s-a", "running", 0, queue="default")]
    assert "queue" not in [c.key for c in trial_columns(one, 0.0)]
