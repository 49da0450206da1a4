"""The submit loop replaces a job the Volcano job controller lost with the trial's next attempt
(virtual time; the fake cluster plays Volcano)."""

from __future__ import annotations

from stratctl import labels
from stratctl.backends.kubernetes.objects.lost import LOST_AFTER, LOST_BY_CONTROLLER
from stratctl.backends.kubernetes.objects.state import run_starts
from stratctl.backends.kubernetes.verbs.status import collect
from stratctl.backends.kubernetes.watch.capacity import Capacity
from stratctl.backends.kubernetes.watch.disruptions import Disruptions
from stratctl.errors import Unavailable
from stratctl.view.tables import table
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import Events, FakeClock, text
from tests.unit.loop import make

PG = ("scheduling.volcano.sh/v1beta1", "PodGroup")


def env_of(job: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}


class Volcano:
    """What Volcano makes of the study's jobs in the fake cluster, one step per loop sleep: a
    PodGroup for each job, admitted (Inqueue) then its pods, Running, Completed. Jobs named in
    `lost` are lost by its job controller: admitted, but no pod ever comes. Gangs named in
    `waiting` wait for GPUs: PodGroup Pending, no pods."""

    def __init__(self, cluster: FakeCluster, clock: FakeClock):
        self.cluster, self.clock = cluster, clock
        self.lost: set[str] = set()
        self.waiting: set[str] = set()

    def _put(self, kind, name, obj):
        self.cluster.objects.setdefault((*kind, self.cluster.namespace, name), obj)
        return self.cluster.objects[(*kind, self.cluster.namespace, name)]

    def step(self):
        for job in self.cluster.jobs():
            meta = job["metadata"]
            group = self._put(
                PG,
                f"{meta['name']}-{meta['uid']}",
                {
                    "apiVersion": PG[0],
                    "kind": PG[1],
                    "metadata": {
                        "name": f"{meta['name']}-{meta['uid']}",
                        "namespace": self.cluster.namespace,
                        "labels": dict(meta["labels"]),
                        "ownerReferences": [{"kind": "Job", "uid": meta["uid"]}],
                    },
                    "status": {"phase": "Pending"},
                },
            )
            if meta["name"] in self.waiting:
                continue
            group["status"]["phase"] = "Inqueue"
            if meta["name"] in self.lost:
                continue
            self._put(
                ("v1", "Pod"),
                f"{meta['name']}-worker-0",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{meta['name']}-worker-0",
                        "namespace": self.cluster.namespace,
                        "labels": {"volcano.sh/job-name": meta["name"]},
                    },
                    "status": {"phase": "Running"},
                },
            )
            phase = self.cluster.phase(job)
            self.cluster.set_phase(job, {"Pending": "Running", "Running": "Completed"}.get(phase, phase))

    def sleep(self, seconds):
        self.clock.sleep(seconds)
        self.step()


class Mirrors:
    """The pods and PodGroups the loop's ClusterSignals mirror, read from the fake cluster."""

    class Items:
        def __init__(self, cluster, kind):
            self.cluster, self.kind = cluster, kind

        def items(self):
            return [o for k, o in self.cluster.objects.items() if k[:2] == self.kind]

    def __init__(self, cluster):
        self.pods = self.Items(cluster, ("v1", "Pod"))
        self.groups = self.Items(cluster, PG)
        self.disruptions = Disruptions()  # no pod here is ever disrupted

    def pod_starts(self):
        return run_starts(self.pods.items())

    def pods_complete_since(self):
        return None

    def capacity(self, now=None):
        return Capacity(16, 8, 0.0, 2)

    def latency_p90(self):
        return None


def loop(study_file, mirrored=True):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = make(study_file(), cluster, clock)
    volcano = Volcano(cluster, clock)
    submitter.sleep = volcano.sleep
    submitter.signals = Mirrors(cluster) if mirrored else None
    submitter.reporter = events = Events(clock)
    return submitter, trials, cluster, clock, volcano, events


def attempts(cluster, trial):
    return sorted(j["metadata"]["name"] for j in cluster.jobs() if j["metadata"]["labels"][labels.TRIAL] == trial)


def check_replaced(cluster, events, victim, created_at):
    [said] = events.about("lost by the job controller")
    assert said == (
        f"trial {victim}: job {victim} lost by the job controller (Pending, PodGroup Inqueue, no pods for "
        f"1m): deleted; attempt 1 resumes from its checkpoint"
    )
    # noticed a minute after it was first seen admitted without pods (one step after its create)
    assert LOST_AFTER <= events.at[said] - created_at <= LOST_AFTER + 3
    assert attempts(cluster, victim) == [f"{victim}-a1"]  # the lost job is gone
    [new] = [j for j in cluster.jobs() if j["metadata"]["name"] == f"{victim}-a1"]
    notes = new["metadata"]["annotations"]
    assert notes[labels.REQUEUED_BECAUSE] == LOST_BY_CONTROLLER and notes[labels.LOST] == "1"
    assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES]) == ("0", "0")  # neither a preemption nor a failure
    assert env_of(new)["STRATCTL_RESUME"] == "1" and env_of(new)["STRATCTL_ATTEMPT"] == "1"


def test_a_job_admitted_but_never_given_pods_is_replaced_by_its_next_attempt(study_file):
    submitter, trials, cluster, clock, volcano, events = loop(study_file)
    victim = trials[0].name
    volcano.lost = {victim}
    created_at = clock()
    progress = submitter.run()
    assert progress.succeeded == 10 and progress.errors == {}
    check_replaced(cluster, events, victim, created_at)
    assert sorted(cluster.creates) == sorted([t.name for t in trials] + [f"{victim}-a1"])  # each once
    # status shows why the attempt exists
    rows = collect(cluster, cluster.namespace, "loop").trials
    [row] = [r for r in rows if r.trial == victim]
    assert row.requeued == LOST_BY_CONTROLLER and row.attempt == 1
    assert "attempt 1 requeued: lost by the job controller" in text(table(rows, clock()))


def test_without_mirrored_pods_the_api_server_is_asked_and_decides(study_file):
    submitter, trials, cluster, clock, volcano, events = loop(study_file, mirrored=False)
    victim = trials[0].name
    volcano.lost = {victim}
    created_at = clock()
    progress = submitter.run()
    assert progress.succeeded == 10
    check_replaced(cluster, events, victim, created_at)


def test_a_gang_waiting_an_hour_for_gpus_is_left_alone(study_file):
    for mirrored in (True, False):
        submitter, trials, cluster, clock, volcano, events = loop(study_file, mirrored=mirrored)
        victim = trials[0].name
        volcano.waiting = {victim}
        sleep = volcano.sleep

        def gpus_free_after_an_hour(seconds, clock=clock, volcano=volcano, sleep=sleep):
            if clock() >= 1000.0 + 3600:
                volcano.waiting = set()
            sleep(seconds)

        submitter.sleep = gpus_free_after_an_hour
        progress = submitter.run()
        assert progress.succeeded == 10 and not events.about("lost")
        assert attempts(cluster, victim) == [victim]
        assert clock() > 1000.0 + 3600


def test_a_replaced_job_whose_delete_failed_is_deleted_next_cycle(study_file):
    submitter, trials, cluster, clock, volcano, events = loop(study_file)
    victim = trials[0].name
    volcano.lost = {victim}
    delete = cluster.delete
    failed = []

    def flaky(kind, name, namespace=None, **given):
        if name == victim and not failed:
            failed.append(clock())
            raise Unavailable(f"delete Job {name}: cannot reach the API server: Connection refused")
        return delete(kind, name, namespace, **given)

    cluster.delete = flaky
    progress = submitter.run()
    assert failed and progress.succeeded == 10
    assert attempts(cluster, victim) == [f"{victim}-a1"] and cluster.creates.count(f"{victim}-a1") == 1


def test_no_pods_while_the_api_server_was_out_does_not_count(study_file):
    submitter, trials, cluster, clock, volcano, events = loop(study_file)
    victim = trials[0].name
    volcano.lost = {victim}
    sleep, back = volcano.sleep, {}

    def outage(seconds):
        if 1030.0 <= clock() < 1050.0:
            cluster.down = Unavailable("list Job: cannot reach the API server: Connection refused")
        elif cluster.down is not None:
            cluster.down, back["at"] = None, clock()
        sleep(seconds)

    submitter.sleep = outage
    progress = submitter.run()
    assert progress.succeeded == 10
    [said] = events.about("lost by the job controller")
    assert events.at[said] - back["at"] >= LOST_AFTER  # counted again from the end of the outage
