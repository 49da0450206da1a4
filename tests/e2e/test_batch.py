"""`workload: batch` against the real testbed: batch/v1 Jobs ganged by a PodGroup show in
`status` (table and JSON) as they run and finish, with results and GPU-hours; a batch study
drains and resumes; a preempted batch trial comes back as its next attempt. And preemption
is recognised from the pods the loop watched when the scheduler's events are gone.

The stratctl commands run as separate processes; every wait has a deadline.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, EVENT, POD, PODGROUP, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.state import TrialState, classify, latest_attempts
from stratctl.backends.kubernetes.verbs.status import collect
from tests.e2e.support import Cli, fake_study, finish, high_priority_gang, recorded, running_pods, unique, wait_until

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"


def study_yaml(name, namespace, trials, duration, *, workload="batch", replicas=2, **kw):
    return fake_study(name, namespace, trials, duration, fields={"workload": workload}, replicas=replicas, **kw)


@pytest.fixture
def cli(testbed):
    return Cli(testbed, columns=200)  # wide enough that a table cell is one line


def batch_jobs(api, study):
    return api.list(BATCH_JOB, label_selector=f"{labels.STUDY}={study}")[0]


def env_of(job):
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def agrees(cli, api, name):
    """`status -o json` between two equal listings of the jobs, compared with them; None when
    the trials moved meanwhile (the snapshot proves nothing then)."""
    before = latest_attempts(batch_jobs(api, name))
    snap = cli.status(name)
    jobs = latest_attempts(batch_jobs(api, name))
    if {t: (classify(j).value, j["metadata"]["name"]) for t, j in before.items()} != {
        t: (classify(j).value, j["metadata"]["name"]) for t, j in jobs.items()
    }:
        return None
    rows = {t["trial"]: t for t in snap["trials"]}
    assert set(rows) == set(jobs)
    for trial, job in jobs.items():
        assert rows[trial]["state"] == classify(job).value
        assert rows[trial]["job"] == job["metadata"]["name"]
        assert rows[trial]["params"] == json.loads(job["metadata"]["annotations"][labels.PARAMS])
    return snap


def test_status_shows_batch_trials_running_then_succeeded_with_results_and_gpu_hours(testbed, api, cli, studies):
    name = unique("bst")
    seconds, trials, pods = 25, 4, 2
    message = '{"loss": {{ params.seed / 10 }}, "seed": {{ params.seed }}}'
    path = studies(
        name,
        study_yaml(
            name,
            testbed.namespace,
            trials,
            f"{seconds}s",
            replicas=pods,
            annotations={"testbed.stratctl.io/termination-message": message},
        ),
    )
    started = time.monotonic()
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        recorded(api, name)
        # running, as the job status says (status.ready), in JSON and in the table the loop's summary feeds
        snap = wait_until(
            lambda: (s := agrees(cli, api, name)) and s["studies"][0]["states"]["running"] == trials and s,
            60,
            interval=0.3,
            message="status showing every batch trial running",
        )
        assert {t["state"] for t in snap["trials"]} == {"running"}
        assert snap["studies"][0]["in_flight"] == trials and snap["studies"][0]["gpu_hours"] > 0

        # the loop writes its summary at most every 10 s: the table shows it once it has them running
        def study_line(text):  # the study's line of the plain table a pipe gets, by column
            header, row = text.split("\n\n")[0].splitlines()[:2]
            return dict(zip(header.split(), row.split()))

        table = wait_until(
            lambda: (
                (t := cli.run("status", name, "--limit", "1"))
                and "figures as of" in t
                and study_line(t).get("running") == str(trials)
                and t
            ),
            30,
            message="the loop's summary with the trials running",
        )
        assert float(study_line(table)["gpu_hours"]) > 0  # GPU-hours used so far
        progress = finish(submit, timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    wall = time.monotonic() - started
    assert (progress["succeeded"], progress["failed"]) == (trials, 0)
    snap = agrees(cli, api, name)
    assert snap is not None
    [study] = snap["studies"]
    assert study["states"]["succeeded"] == trials
    assert {t["params"]["seed"]: t["result"] for t in snap["trials"]} == {
        seed: {"loss": seed / 10, "seed": seed} for seed in range(trials)
    }
    # GPU time: each trial's pods ran `seconds` on one GPU each, plus the job controller's
    # moment to mark the Job complete; never more than the study's wall time
    gpu_seconds = study["gpu_hours"] * 3600
    assert trials * pods * seconds <= gpu_seconds <= trials * pods * (seconds + 5), gpu_seconds
    assert gpu_seconds <= trials * pods * wall
    # the loop's final summary (what the table shows) agrees with a full listing
    fast, full = collect(api, testbed.namespace, name, shown=2), collect(api, testbed.namespace, name)
    assert fast.studies[0].as_of is not None
    assert fast.studies[0].states == full.studies[0].states
    assert fast.studies[0].gpu_hours == pytest.approx(full.studies[0].gpu_hours, abs=1e-6)
    print(f"\nbatch status: {trials} trials x {pods} GPUs x {seconds}s -> {gpu_seconds:.1f} GPU-s, wall {wall:.1f}s")


def test_drain_then_resume_a_batch_study(testbed, api, cli, studies):
    name = unique("bdr")
    path = studies(name, study_yaml(name, testbed.namespace, 4, "15s", parallelism=2))
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        wait_until(lambda: len(running_pods(api, f"{labels.STUDY}={name}")) == 4, 60, message="two trials running")
        time.sleep(2)  # some GPU time to account
        drained = json.loads(cli.run("drain", name, "--settle", "2", "--json"))
        [outcome] = drained
        assert len(outcome["suspended"]) == 2, outcome
        wait_until(
            lambda: not api.list(POD, label_selector=f"{labels.STUDY}={name}")[0],
            30,
            message="the drained trials' pods gone",
        )
        assert not api.list(PODGROUP, label_selector=f"{labels.STUDY}={name}")[0]
        time.sleep(4)  # the loop holds: nothing new for several cycles
        assert not batch_jobs(api, name), [j["metadata"]["name"] for j in batch_jobs(api, name)]
        snap = cli.status(name)
        assert snap["studies"][0]["states"]["suspended"] == 2 and snap["studies"][0]["drained"]
        resumed = json.loads(cli.run("resume", name, "--json"))
        assert sorted(resumed["resumed"]) == sorted(outcome["suspended"]) and resumed["left"] == []
        back = batch_jobs(api, name)
        assert {j["metadata"]["labels"][labels.ATTEMPT] for j in back} == {"1"}
        assert all(env_of(j)["STRATCTL_RESUME"] == "1" for j in back)
        assert all(float(j["metadata"]["annotations"][labels.GPU_SECONDS]) >= 2 * 2 for j in back)
        assert all(j["metadata"]["annotations"][labels.SUSPENSIONS] == "1" for j in back)
        progress = finish(submit, timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert (progress["succeeded"], progress["failed"]) == (4, 0)
    snap = cli.status(name)
    assert snap["studies"][0]["states"]["succeeded"] == 4 and not snap["studies"][0]["drained"]
    assert sorted(t["attempt"] for t in snap["trials"]) == [0, 0, 1, 1]


def test_a_preempted_batch_trial_resumes_as_its_next_attempt_and_completes(testbed, api, cli, studies):
    """Batch trials hold every GPU (8 pods each, the last 4 elastic); a high-priority gang
    takes 8. Volcano marks the victims DisruptionTarget and deletes them; the node kills
    them (KWOK as a kubelet does: Failed, exit code 137), the pod failure policy fails their
    Jobs, and the trials come back with STRATCTL_RESUME=1."""
    name = unique("bpre")
    nodes, _ = api.list(("v1", "Node"), label_selector="type=kwok")
    gpus = sum(int(n["status"]["allocatable"].get(GPU, "0")) for n in nodes)
    trials = gpus // 8
    path = studies(name, study_yaml(name, testbed.namespace, trials, "30s", replicas=8, min_available=4))
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    high = unique("bprod")
    try:
        wait_until(
            lambda: len(running_pods(api, f"{labels.STUDY}={name}")) == gpus,
            90,
            message=f"the study holding all {gpus} GPUs",
        )
        started = time.monotonic()
        high_priority_gang(api, testbed.namespace, high)
        # placed after 30.5 s alone on this 2-core machine (its trials run 30 s), past 90 s
        # once in a whole `make test`: a bound for a loaded machine, not a figure
        wait_until(
            lambda: len(running_pods(api, f"volcano.sh/job-name={high}")) == 8,
            180,
            message="the high-priority gang running on GPUs taken from the study",
        )
        placed = time.monotonic() - started
        progress = finish(submit, timeout=240)
    finally:
        if submit.poll() is None:
            submit.kill()
        api.delete(VOLCANO_JOB, high)
    assert (progress["succeeded"], progress["failed"]) == (trials, 0), progress
    jobs = batch_jobs(api, name)
    assert all(classify(j) is TrialState.SUCCEEDED for j in latest_attempts(jobs).values())
    resumed = [j for j in jobs if int(j["metadata"]["labels"][labels.ATTEMPT]) > 0]
    assert resumed, "no trial was preempted and resumed"
    # the gang took GPUs from running trials (they run 30 s): preempted, not waited for
    assert placed < 30, placed
    ended = {j["metadata"]["labels"][labels.TRIAL]: j for j in jobs if j["metadata"]["labels"][labels.ATTEMPT] == "0"}
    for job in resumed:
        first = ended[job["metadata"]["labels"][labels.TRIAL]]
        failed = [c for c in first["status"].get("conditions") or [] if c["type"] == "Failed" and c["status"] == "True"]
        # ended by the pod failure policy (DisruptionTarget -> FailJob), not by the loop
        # deleting a Job whose preempted pod never terminated
        assert [c.get("reason") for c in failed] == ["PodFailurePolicy"], first["status"]
        env = env_of(job)
        assert env["STRATCTL_RESUME"] == "1" and env["STRATCTL_ATTEMPT"] == job["metadata"]["labels"][labels.ATTEMPT]
        assert env["STRATCTL_CHECKPOINT_DIR"] == f"/ckpt/{name}/{job['metadata']['labels'][labels.TRIAL]}"
        notes = job["metadata"]["annotations"]
        assert int(notes[labels.PREEMPTIONS]) >= 1 and notes[labels.FAILURES] == "0"
        assert float(notes[labels.GPU_SECONDS_LOST]) > 0
    snap = cli.status(name)
    [study] = snap["studies"]
    assert study["states"]["succeeded"] == trials and study["failed_attempts"] == 0
    assert study["preemptions"] >= len(resumed) and study["gpu_hours_lost"] > 0
    print(
        f"\nbatch preemption: {len(resumed)} of {trials} trials resumed; the high-priority gang placed after "
        f"{placed:.1f}s; {study['gpu_hours_lost'] * 3600:.0f} GPU-s lost"
    )


def test_an_eviction_whose_events_are_gone_still_counts_as_preemption(testbed, api, cli, studies):
    """Volcano trials whose policy aborts the job on PodEvicted: while a thread deletes every
    Evict event as it appears (as if they had expired), the loop still resumes the victims as
    preempted, from the deleted pods its pod mirror saw with DisruptionTarget."""
    name = unique("vev")
    nodes, _ = api.list(("v1", "Node"), label_selector="type=kwok")
    gpus = sum(int(n["status"]["allocatable"].get(GPU, "0")) for n in nodes)
    trials = gpus // 8
    policies = "  policies: [{event: PodEvicted, action: AbortJob}, {event: PodFailed, action: AbortJob}]\n"
    text = study_yaml(name, testbed.namespace, trials, "30s", replicas=8, min_available=4, workload="volcano")
    path = studies(name, text.replace("  tasks:", policies + "  tasks:"))
    stop, deleted = threading.Event(), []

    def forget_evictions():
        while not stop.is_set():
            try:
                for event in api.list(EVENT, testbed.namespace, field_selector="reason=Evict")[0]:
                    api.request("DELETE", f"/api/v1/namespaces/{testbed.namespace}/events/{event['metadata']['name']}")
                    deleted.append(event["metadata"]["name"])
            except Exception:  # best effort; the API server may be restarted by another test
                pass
            stop.wait(0.1)

    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    high = unique("vprod")
    eraser = threading.Thread(target=forget_evictions, daemon=True)
    eraser.start()
    try:
        wait_until(
            lambda: len(running_pods(api, f"{labels.STUDY}={name}")) == gpus,
            90,
            message=f"the study holding all {gpus} GPUs",
        )
        high_priority_gang(api, testbed.namespace, high)
        wait_until(
            lambda: len(running_pods(api, f"volcano.sh/job-name={high}")) == 8,
            90,
            message="the high-priority gang running",
        )
        progress = finish(submit, timeout=240)
    finally:
        stop.set()
        if submit.poll() is None:
            submit.kill()
        api.delete(VOLCANO_JOB, high)
    assert deleted, "no Evict event was seen to delete"
    assert (progress["succeeded"], progress["failed"]) == (trials, 0), progress
    jobs = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")[0]
    resumed = [j for j in jobs if int(j["metadata"]["labels"][labels.ATTEMPT]) > 0]
    assert resumed, "no trial was aborted by an eviction and resumed"
    for job in resumed:
        notes = job["metadata"]["annotations"]
        assert (notes[labels.PREEMPTIONS], notes[labels.FAILURES]) == ("1", "0"), notes
    aborted = [j for j in jobs if (j.get("status") or {}).get("state", {}).get("phase") == "Aborted"]
    assert aborted, "the victims' first attempts were not aborted on PodEvicted"
