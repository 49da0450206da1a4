from stratctl import labels
from stratctl.backends.kubernetes.objects.record import StudyRecord, parse_record, record_manifest
from stratctl.backends.kubernetes.objects.state import TrialState, classify, latest_attempts


def vjob(phase=None, trial="s-abc", attempt="0"):
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": f"{trial}" + ("" if attempt == "0" else f"-a{attempt}"),
            "labels": {labels.TRIAL: trial, labels.ATTEMPT: attempt},
        },
    }
    if phase:
        job["status"] = {"state": {"phase": phase}}
    return job


def test_volcano_phases():
    assert classify(vjob()) is TrialState.PENDING  # just created: no status yet
    assert classify(vjob("Inqueue")) is TrialState.PENDING
    assert classify(vjob("Running")) is TrialState.RUNNING
    assert classify(vjob("Restarting")) is TrialState.RUNNING
    assert classify(vjob("Completed")) is TrialState.SUCCEEDED
    for phase in ("Failed", "Aborted", "Terminated"):
        assert classify(vjob(phase)) is TrialState.FAILED


def test_batch_job_conditions():
    job = {"apiVersion": "batch/v1", "kind": "Job", "status": {}}
    assert classify(job) is TrialState.PENDING
    job["status"] = {"active": 2}  # a server that does not report ready pods
    assert classify(job) is TrialState.RUNNING
    job["status"] = {"active": 2, "ready": 0}  # pods created, the gang waits for GPUs
    assert classify(job) is TrialState.PENDING
    job["status"] = {"active": 2, "ready": 2}
    assert classify(job) is TrialState.RUNNING
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert classify(job) is TrialState.SUCCEEDED
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    assert classify(job) is TrialState.FAILED


def test_latest_attempt_wins():
    jobs = [
        vjob("Failed", attempt="0"),
        vjob("Running", attempt="2"),
        vjob("Failed", attempt="1"),
        vjob("Completed", trial="s-def"),
    ]
    latest = latest_attempts(jobs)
    assert classify(latest["s-abc"]) is TrialState.RUNNING
    assert latest["s-abc"]["metadata"]["name"] == "s-abc-a2"
    assert set(latest) == {"s-abc", "s-def"}


def test_record_round_trips_through_its_configmap():
    record = StudyRecord(
        study="sweep",
        spec_hash="abc123",
        trials=40,
        critical=True,
        drained=True,
        target=7,
        reason="static cap 7",
        finished={"sweep-1": "succeeded"},
        source="name: sweep\n",
    )
    cm = record_manifest(record, "team-a")
    assert cm["metadata"]["name"] == "stratctl-study-sweep"
    assert cm["metadata"]["labels"][labels.STUDY] == "sweep"
    assert all(isinstance(v, str) for v in cm["data"].values())  # ConfigMap data must be strings
    assert parse_record(cm) == record
