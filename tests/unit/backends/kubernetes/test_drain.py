"""drain and resume against an in-memory cluster: what gets suspended, what is left alone."""

from __future__ import annotations

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.loop.controller import Submitter
from stratctl.backends.kubernetes.objects.record import suspended_of
from stratctl.backends.kubernetes.verbs.drain import drain, resume
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import UsageError
from stratctl.run.options import SubmitOptions
from stratctl.run.throttle import Throttle
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import STUDY
from tests.unit.rendering import Renderer


def submitted(tmp_path, cluster, name, critical=False, inflight=3):
    """A study whose first `inflight` trials were submitted (pending), the loop gone."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(STUDY.replace("name: loop", f"name: {name}") + f"critical: {str(critical).lower()}\n")
    study = load_study(path)
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    submitter = Submitter(
        study,
        expand(study),
        Renderer(study),
        cluster,
        throttle,
        SubmitOptions(max_inflight=inflight, workers=1),
        clock=clock,
        sleep=clock.sleep,
        source=path.read_text(),
    )
    submitter.ensure_record()
    for trial in expand(study)[:inflight]:
        submitter.submit_trial(trial)
    return study


def jobs_of(cluster, study):
    return sorted(j["metadata"]["name"] for j in cluster.jobs() if j["metadata"]["labels"][labels.STUDY] == study)


def test_drain_suspends_noncritical_studies_and_leaves_critical_ones(tmp_path):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    submitted(tmp_path, cluster, "prod", critical=True)
    cluster.advance()  # both studies' trials running
    before = jobs_of(cluster, "prod")
    outcomes = drain(cluster, cluster.namespace, all_noncritical=True, settle=0)
    by = {o.study: o for o in outcomes}
    assert by["prod"].skipped == "critical" and jobs_of(cluster, "prod") == before
    assert len(by["sweep"].suspended) == 3 and jobs_of(cluster, "sweep") == []
    record = cluster.record("sweep")
    assert record["data"]["drained"] == "true"
    assert {m["attempt"] for m in suspended_of(record).values()} == {0}
    assert cluster.record("prod")["data"]["drained"] == "false"


def test_draining_a_critical_study_by_name_is_refused(tmp_path):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "prod", critical=True)
    with pytest.raises(UsageError, match="critical"):
        drain(cluster, cluster.namespace, "prod", settle=0)
    assert len(jobs_of(cluster, "prod")) == 3


def test_resume_brings_suspended_trials_back_as_next_attempts_and_undrains(tmp_path):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    [drained] = drain(cluster, cluster.namespace, "sweep", settle=0)
    outcome = resume(cluster, cluster.namespace, "sweep")
    assert outcome.resumed == drained.suspended and outcome.left == []
    assert jobs_of(cluster, "sweep") == sorted(f"{t}-a1" for t in drained.suspended)
    for job in cluster.jobs():
        env = {e["name"]: e.get("value") for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}
        assert env["STRATCTL_RESUME"] == "1" and env["STRATCTL_ATTEMPT"] == "1"
        assert job["metadata"]["annotations"][labels.SUSPENSIONS] == "1"
    record = cluster.record("sweep")
    assert record["data"]["drained"] == "false" and suspended_of(record) == {}


def test_drain_twice_suspends_once(tmp_path):
    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    first = drain(cluster, cluster.namespace, "sweep", settle=0)
    again = drain(cluster, cluster.namespace, "sweep", settle=0)
    assert len(first[0].suspended) == 3 and again[0].suspended == []


def test_drain_needs_a_study_or_all_noncritical():
    with pytest.raises(UsageError):
        drain(FakeCluster(), "ns")


def test_a_retried_trial_keeps_its_failure_count_through_drain_and_resume(tmp_path):
    from stratctl.backends.kubernetes.objects.jobview import Carried

    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep", inflight=1)
    [job] = cluster.jobs()  # as if attempt 0 was a retry after one failure and one preemption
    job["metadata"]["annotations"].update(Carried(preemptions=1, failures=1).annotations())
    [drained] = drain(cluster, cluster.namespace, "sweep", settle=0)
    [trial] = drained.suspended
    mark = suspended_of(cluster.record("sweep"))[trial]
    assert (mark["attempt"], mark["preemptions"], mark["failures"], mark["suspensions"]) == (0, 1, 1, 1)
    resume(cluster, cluster.namespace, "sweep")
    [back] = cluster.jobs()
    notes = back["metadata"]["annotations"]
    assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES], notes[labels.SUSPENSIONS]) == ("1", "1", "1")


def test_resume_stops_at_once_when_the_api_server_is_unreachable(tmp_path):
    from stratctl.errors import Unreachable

    cluster = FakeCluster()
    submitted(tmp_path, cluster, "sweep")
    drain(cluster, cluster.namespace, "sweep", settle=0)
    creates = []

    def gone(manifest, dry_run=False):
        creates.append(manifest["metadata"]["name"])
        raise Unreachable("create Job: the API server has not answered for 25s")

    cluster.create = gone
    with pytest.raises(Unreachable):
        resume(cluster, cluster.namespace, "sweep")
    assert len(creates) == 1  # not one more wait per suspended trial
    assert cluster.record("sweep")["data"]["drained"] == "true"
