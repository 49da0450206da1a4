"""delete against an in-memory cluster: what it removes, when it asks, when it refuses; and
the heartbeat a submit loop keeps in the study record so that delete can tell it runs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import POD, PODGROUP, SERVICE
from stratctl.backends.kubernetes.objects.record import LOOP_KEY, LOOP_STALE, loop_following, record_name
from stratctl.backends.kubernetes.verbs import delete as core
from stratctl.errors import ExitCode, UsageError
from tests.unit.backends.kubernetes.test_drain import submitted
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make

NOW = 1_000_000.0


def objects_of(cluster, study):
    return sorted(
        (k[1], k[3])
        for k, o in cluster.objects.items()
        if (o["metadata"].get("labels") or {}).get(labels.STUDY) == study
    )


def with_pods(cluster, study):
    """A PodGroup and two pods beside each of the study's jobs (what Volcano makes)."""
    for job in list(cluster.jobs()):
        meta = job["metadata"]
        if meta["labels"][labels.STUDY] != study:
            continue
        stamp = {"labels": dict(meta["labels"]), "namespace": cluster.namespace}
        cluster.create({"apiVersion": PODGROUP[0], "kind": "PodGroup", "metadata": {"name": meta["name"], **stamp}})
        for i in range(2):
            cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{meta['name']}-w-{i}", **stamp}})


def heartbeat(cluster, study, at, running=True):
    cluster.record(study)["data"][LOOP_KEY] = json.dumps({"at": at, "running": running, "host": "h", "pid": 7})


def test_delete_removes_jobs_podgroups_pods_and_the_record_last(tmp_path):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    submitted(tmp_path, cluster, "other")
    with_pods(cluster, "sweep")
    found = core.survey(cluster, cluster.namespace, "sweep", NOW)
    assert (found.jobs, found.podgroups, found.pods, found.record, found.loop) == (3, 3, 6, True, None)
    assert found.describe() == "3 job(s), 3 PodGroup(s), 6 pod(s) and its record"
    others = objects_of(cluster, "other")
    outcome = core.delete(cluster, cluster.namespace, "sweep", clock=FakeClock(), sleep=lambda s: None)
    assert outcome.deleted == {"jobs": 3, "podgroups": 3, "pods": 6, "services": 0, "record": 1} and outcome.left == {}
    assert objects_of(cluster, "sweep") == []
    assert objects_of(cluster, "other") == others  # another study's objects are left alone


def test_what_a_job_owns_is_left_to_the_garbage_collector(tmp_path):
    """A user who may delete jobs but not pods (the testbed's restricted user): pods and
    PodGroups owned by the jobs are not deleted by stratctl; it waits for the collector."""
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    with_pods(cluster, "sweep")
    owned = [k for k, o in cluster.objects.items() if k[1] in (POD[1], PODGROUP[1])]
    for key in owned:
        cluster.objects[key]["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "x", "uid": "u"}]
    deleted_by_stratctl = []
    real_delete = cluster.delete

    def delete(kind, name, namespace=None, **kw):
        if kind in (POD, PODGROUP):
            deleted_by_stratctl.append(name)
        return real_delete(kind, name, namespace, **kw)

    cluster.delete = delete

    def collector(seconds):  # the garbage collector takes the owned objects while delete waits
        for key in owned:
            cluster.objects.pop(key, None)

    outcome = core.delete(cluster, cluster.namespace, "sweep", clock=FakeClock(), sleep=collector)
    assert deleted_by_stratctl == []
    assert outcome.left == {} and outcome.deleted["record"] == 1
    assert objects_of(cluster, "sweep") == []


def test_a_batch_attempts_service_goes_with_its_job_and_an_orphaned_one_is_deleted(tmp_path):
    """The headless Service of a batch/v1 attempt is owned by its Job: the garbage collector
    takes it; one that lost its owner reference (or a template's without one) is deleted."""
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    names = [job["metadata"]["name"] for job in cluster.jobs() if job["metadata"]["labels"][labels.STUDY] == "sweep"]
    for i, name in enumerate(names[:2]):
        meta = {"name": name, "namespace": cluster.namespace, "labels": {labels.STUDY: "sweep"}}
        if i == 0:
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "u"}]
        cluster.create({"apiVersion": "v1", "kind": "Service", "metadata": meta})
    found = core.survey(cluster, cluster.namespace, "sweep", NOW)
    assert found.describe() == "3 job(s), 0 PodGroup(s), 2 Service(s), 0 pod(s) and its record"
    deleted = []
    real_delete = cluster.delete

    def delete(kind, name, namespace=None, **kw):
        if kind == SERVICE:
            deleted.append(name)
        return real_delete(kind, name, namespace, **kw)

    cluster.delete = delete

    def collector(seconds):  # takes the owned Service once its Job is gone
        cluster.objects.pop((SERVICE[0], SERVICE[1], cluster.namespace, names[0]), None)

    outcome = core.delete(cluster, cluster.namespace, "sweep", clock=FakeClock(), sleep=collector)
    assert deleted == [names[1]]
    assert outcome.deleted["services"] == 2 and outcome.left == {}
    assert objects_of(cluster, "sweep") == []


def test_keep_record_keeps_only_the_record(tmp_path):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    outcome = core.delete(
        cluster, cluster.namespace, "sweep", keep_record=True, clock=FakeClock(), sleep=lambda s: None
    )
    assert outcome.kept_record and "record" not in outcome.deleted
    assert objects_of(cluster, "sweep") == [("ConfigMap", record_name("sweep"))]


class Stubborn(FakeCluster):
    """Pods that outlive their deletion (a node that never confirms)."""

    def delete(self, kind, name, namespace=None, resource_version=None):
        if tuple(kind) != POD:
            super().delete(kind, name, namespace)


def test_objects_still_there_at_the_deadline_are_reported_and_the_record_is_kept(tmp_path):
    cluster = Stubborn()
    submitted(tmp_path, cluster, "sweep")
    with_pods(cluster, "sweep")
    clock = FakeClock()
    outcome = core.delete(cluster, cluster.namespace, "sweep", timeout=10, clock=clock, sleep=clock.sleep)
    assert outcome.left == {"pods": 6}
    assert clock.now - 1000.0 == pytest.approx(10, abs=core.POLL)  # waited, bounded
    assert cluster.record("sweep")  # kept: running the same command again finds the study


def test_an_unknown_study_is_a_usage_error():
    with pytest.raises(UsageError, match="no study 'nope'"):
        core.survey(FakeCluster(), "stratctl-e2e", "nope", NOW)


def test_check_refuses_a_followed_study_unless_forced_and_asks_only_on_a_terminal(tmp_path):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    heartbeat(cluster, "sweep", NOW - 5)
    found = core.survey(cluster, cluster.namespace, "sweep", NOW)
    with pytest.raises(core.Followed, match=r"submit loop on h \(pid 7\) is following study sweep .*5 s ago.*--force"):
        core.check(found, NOW, force=False, yes=True, interactive=True)
    assert core.Followed.exit_code == ExitCode.INVALID_INPUT
    assert core.check(found, NOW, force=True, yes=True, interactive=False) is False
    assert core.check(found, NOW, force=True, yes=False, interactive=True) is True  # asks
    with pytest.raises(UsageError, match="pass --yes"):
        core.check(found, NOW, force=True, yes=False, interactive=False)


@pytest.mark.parametrize(
    "at, running, following", [(NOW - 5, True, True), (NOW - LOOP_STALE - 1, True, False), (NOW - 5, False, False)]
)
def test_a_stale_or_stopped_heartbeat_is_no_loop(tmp_path, at, running, following):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    heartbeat(cluster, "sweep", at, running)
    assert (loop_following(cluster.record("sweep"), NOW) is not None) == following


def test_the_submit_loop_keeps_a_heartbeat_and_says_when_it_stops(study_file):
    cluster, clock = FakeCluster(), FakeClock()
    walls = iter(range(5_000, 10_000))
    submitter, _ = make(study_file(), cluster, clock)
    submitter.wall = lambda: float(next(walls))
    seen = []
    real_patch = cluster.patch

    def patch(kind, name, body, namespace=None):
        if LOOP_KEY in (body.get("data") or {}):
            seen.append(json.loads(body["data"][LOOP_KEY]))
        return real_patch(kind, name, body, namespace)

    cluster.patch = patch
    submitter.run()
    assert seen[0]["running"] is True and seen[-1]["running"] is False
    assert all(m["running"] for m in seen[:-1]) and len(seen) >= 2
    assert loop_following(cluster.record("loop"), seen[-1]["at"]) is None


# -- the command --------------------------------------------------------------------


@pytest.fixture
def cli(tmp_path, monkeypatch):
    from stratctl.backends.kubernetes.api import connect

    cluster = FakeCluster()
    cluster.close = lambda: None
    submitted(tmp_path, cluster, "sweep")
    monkeypatch.setattr(connect, "one_shot", lambda *a, **k: cluster)
    monkeypatch.setattr(core, "POLL", 0.0)

    def run(*args, tty=False, answer=None):
        from stratctl.cli.main import app

        monkeypatch.setattr("stratctl.cli.delete.interactive", lambda: tty)
        return CliRunner().invoke(app, ["delete", "sweep", *args], input=answer)

    run.cluster = cluster
    return run


def test_delete_without_a_terminal_and_without_yes_refuses_with_exit_2(cli):
    result = cli()
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: deleting study sweep needs a confirmation: pass --yes"
    assert cli.cluster.record("sweep")


def test_delete_asks_on_a_terminal(cli):
    result = cli(tty=True, answer="n\n")
    assert result.exit_code == 1 and cli.cluster.record("sweep")
    assert (
        "Delete study sweep in namespace stratctl-e2e: 3 job(s), 0 PodGroup(s), 0 pod(s) and its record?"
        in result.stdout
    )
    result = cli(tty=True, answer="y\n")
    assert result.exit_code == 0, result.output
    assert "sweep: deleted 3 job(s), 0 PodGroup(s), 0 pod(s), and its record" in result.stdout
    assert objects_of(cli.cluster, "sweep") == []


def test_delete_yes_json_and_the_force_a_followed_study_needs(cli):
    heartbeat(cli.cluster, "sweep", __import__("time").time())
    refused = cli("--yes")
    assert refused.exit_code == 2 and "--force" in refused.stderr and len(refused.stderr.splitlines()) == 1
    result = cli("--yes", "--force", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "study": "sweep",
        "deleted": {"jobs": 3, "podgroups": 0, "pods": 0, "services": 0, "record": 1},
        "left": {},
        "kept_record": False,
    }


def test_a_study_driven_in_the_cluster_is_deleted_with_its_driver_without_force(tmp_path):
    from stratctl.backends.kubernetes.api.resources import BATCH_JOB, CONFIGMAP
    from stratctl.backends.kubernetes.rendering.driverjob import DriverSpec, config_map, job, service

    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    heartbeat(cluster, "sweep", NOW - 5)  # the driver's loop follows it
    spec = DriverSpec("sweep", cluster.namespace, "img", {"sweep.yaml": "name: sweep\n"}, "sweep.yaml")
    for manifest in (config_map(spec), service(spec), job(spec)):
        cluster.create(manifest)
    found = core.survey(cluster, cluster.namespace, "sweep", NOW)
    assert found.driver and found.describe().endswith(", and its driver (Job stratctl-driver-sweep)")
    assert core.check(found, NOW, force=False, yes=True, interactive=False) is False  # delete stops the driver itself
    outcome = core.delete(cluster, cluster.namespace, "sweep", clock=FakeClock(), sleep=lambda s: None)
    assert outcome.deleted["driver"] == 1
    for kind in (BATCH_JOB, CONFIGMAP, SERVICE):
        with pytest.raises(Exception, match="not found"):
            cluster.get(kind, "stratctl-driver-sweep")
