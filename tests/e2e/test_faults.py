"""Control-plane faults while `stratctl submit` runs (issue 14), against the real testbed.

Each scenario runs a study of gang trials (2 one-GPU pods, a few seconds each) as the
restricted user (subject to RBAC and API Priority and Fairness) and injects one fault with
testbed/fault.sh:

- the API server is killed (SIGKILL) and started again from its own command line;
- etcd is paused (SIGSTOP) and continued;
- `submit` itself is killed (SIGKILL) at seeded random moments and run again.

Then the cluster is checked: every trial exists exactly once per attempt, every trial's
latest attempt is Completed, and `stratctl status -o json` agrees. A last test runs
`status`, `drain` and `resume` while the API server is down: exit 3, one line, no traceback.

Every fault is undone in a `finally` (fault.sh restore), whatever fails, so the tests after
these find the testbed whole. The CLI runs as separate processes, as a user runs it.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, POD, PODGROUP, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.state import latest_attempts, volcano_phase
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from tests.e2e.support import Cli, fake_study, unique

pytestmark = pytest.mark.e2e

FAULT = Path(__file__).resolve().parents[2] / "testbed" / "fault.sh"
GPU = "nvidia.com/gpu"

TRIALS = 30  # gangs of 2 one-GPU pods; at most PARALLEL in flight, so the study runs in waves
PARALLEL = 8
DURATION = "6s"
SUBMIT_TIMEOUT = 240  # seconds a faulted study may take to the end (it takes ~40-60 s unfaulted)

# The submit loop's word for an outage: one line when the API server becomes unreachable,
# maybe a reminder now and then, not one per failed request (a cycle makes dozens).
OUTAGE = re.compile(r"unreachable|retrying", re.IGNORECASE)
MAX_OUTAGE_LINES = 10  # for one outage of ~10-30 s


def study_yaml(name: str, namespace: str, trials: int = TRIALS, duration: str = DURATION) -> str:
    return fake_study(name, namespace, trials, duration, replicas=2, parallelism=PARALLEL, min_parallelism=4)


# ------------------------------------------------------------------ the tools


def fault(*args: str, timeout: float = 120) -> None:
    """Run testbed/fault.sh; its progress goes to the test's stderr."""
    if not FAULT.exists():
        pytest.fail(f"{FAULT} is missing")
    done = subprocess.run(["bash", str(FAULT), *args], capture_output=True, text=True, timeout=timeout)
    sys.stderr.write(done.stderr)
    assert done.returncode == 0, f"fault.sh {' '.join(args)} exited {done.returncode}:\n{done.stderr}"


def restricted_cli(testbed, traceback: bool = True) -> Cli:
    """The CLI as the restricted user (RBAC, APF); with traceback an error escaping submit
    shows where, and counts as a crash below."""
    return Cli(testbed, context=testbed.restricted_context, traceback=traceback)


def submit_json(cli: Cli, path: str) -> subprocess.Popen:
    return cli.start("submit", path, "-o", "json", "--poll-interval", "1")


@pytest.fixture
def cli(testbed):
    return restricted_cli(testbed)


def canary(api, namespace: str, timeout: float = 150) -> None:
    """A one-pod gang (admin) must run to Completed, and a batch Job get its pod: the
    scheduler, the controllers (Volcano's, kube-controller-manager's) and KWOK work. They
    reconnect to a restarted API server by themselves, but their client-go reflectors back
    off exponentially (up to 30 s, jittered up to 60 s): after an outage
    they may take a minute or two (seen: 105 s). Fails as the testbed's fault, not the
    product's."""
    name = unique("canary")
    api.create(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "schedulerName": "volcano",
                "queue": "default",
                "minAvailable": 1,
                "maxRetry": 1,
                "tasks": [
                    {
                        "name": "probe",
                        "replicas": 1,
                        "minAvailable": 1,
                        "template": {
                            "metadata": {"annotations": {"testbed.stratctl.io/run-duration": "1s"}},
                            "spec": {
                                "schedulerName": "volcano",
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "probe",
                                        "image": "stratctl.invalid/probe:0",
                                        "resources": {"requests": {GPU: "1", "cpu": "100m"}, "limits": {GPU: "1"}},
                                    }
                                ],
                            },
                        },
                    }
                ],
            },
        }
    )
    # and a batch/v1 Job's pod: kube-controller-manager's job controller works too (Indexed
    # trials and merged blocks need it; the next test may be one of those)
    api.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{name}-batch", "namespace": namespace},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {"testbed.stratctl.io/run-duration": "1s"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "probe", "image": "stratctl.invalid/probe:0"}],
                    },
                },
            },
        }
    )
    try:
        deadline = time.monotonic() + timeout
        while volcano_phase(api.get(VOLCANO_JOB, name)) != "Completed":
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the testbed does not work: canary job {name} not Completed after {timeout} s: "
                    f"{describe(api, namespace, name)}"
                )
            time.sleep(0.5)
        while not api.list(POD, namespace, label_selector=f"job-name={name}-batch")[0]:
            if time.monotonic() > deadline:
                pytest.fail(f"the testbed does not work: batch Job {name}-batch has no pod after {timeout} s")
            time.sleep(0.5)
    finally:
        api.delete(VOLCANO_JOB, name)
        api.delete(BATCH_JOB, f"{name}-batch")


def describe(api, namespace: str, job: str) -> dict:
    """A Volcano job as the scheduler sees it, and what holds the cluster's GPUs."""
    out: dict = {"job": volcano_phase(api.get(VOLCANO_JOB, job))}
    try:
        group = next(
            g
            for g in api.list(PODGROUP, namespace)[0]
            if g["metadata"]["name"].startswith(f"{job}-") or g["metadata"]["name"] == job
        )
        out["podgroup"] = {
            "phase": group.get("status", {}).get("phase"),
            "conditions": [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in group.get("status", {}).get("conditions") or []
            ],
        }
    except StopIteration:
        out["podgroup"] = None
    pods = api.list(POD, all_namespaces=True)[0]
    out["pods"] = [
        (p["metadata"]["name"], p["status"].get("phase")) for p in pods if p["metadata"]["name"].startswith(f"{job}-")
    ]
    busy = [
        p
        for p in pods
        if p["status"].get("phase") in ("Pending", "Running")
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
    ]
    out["gpus_requested_by_placed_pods"] = sum(
        int(c.get("resources", {}).get("requests", {}).get(GPU, 0)) for p in busy for c in p["spec"]["containers"]
    )
    out["unplaced_pods"] = sum(
        1 for p in pods if p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName")
    )
    return out


@pytest.fixture(autouse=True)
def restored(testbed, api):
    """A working testbed before; after, whatever the test did or failed at: etcd continued,
    the API server running and ready, and the testbed working again."""
    if not testbed.local:
        pytest.skip("fault injection needs the local testbed (testbed/fault.sh)")
    canary(api, testbed.namespace)
    yield
    fault("restore")
    canary(api, testbed.namespace)


@pytest.fixture
def studies(studies):
    yield studies
    fault(
        "restore"
    )  # a test that failed mid-fault: the cleanup (the shared fixture's, after this) needs the API server


def jobs_of(api, study: str) -> list[dict]:
    return api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={study}")[0]


def phases(api, study: str) -> dict[str, str]:
    return {j["metadata"]["name"]: volcano_phase(j) for j in jobs_of(api, study)}


def finish(proc: subprocess.Popen, api, study: str, timeout: float = SUBMIT_TIMEOUT) -> tuple[dict | None, str]:
    """Wait for submit; on a timeout kill it and fail with what the cluster shows (stuck jobs).
    Its exit code is checked by `exited_0`, after the cluster (what is missing tells more)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        stuck = {n: p for n, p in phases(api, study).items() if p != "Completed"}
        pytest.fail(
            f"submit still running after {timeout} s; jobs not Completed: {stuck}\n"
            f"stderr (last 4000 chars):\n{err[-4000:]}"
        )
    sys.stderr.write(f"--- stderr of submit (exit {proc.returncode}) ---\n{err}--- end ---\n")
    assert "Traceback" not in err, f"submit crashed (exit {proc.returncode}):\n{err[-6000:]}"
    try:
        progress = json.loads(out)
    except ValueError:
        progress = None
    return progress, err


def exited_0(proc: subprocess.Popen, err: str) -> None:
    assert proc.returncode == 0, f"submit exited {proc.returncode}, not 0:\n{err[-4000:]}"


def outage_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if OUTAGE.search(line)]


def assert_study_whole(api, cli: Cli, path: str, name: str, progress: dict | None) -> None:
    """Every trial once per attempt, each latest attempt Completed, status agreeing."""
    expected = sorted(t.name for t in expand(load_study(path)))
    jobs = jobs_of(api, name)
    pairs = Counter((j["metadata"]["labels"][labels.TRIAL], j["metadata"]["labels"][labels.ATTEMPT]) for j in jobs)
    twice = {pair: n for pair, n in pairs.items() if n > 1}
    assert not twice, f"jobs created twice for the same (trial, attempt): {twice}"
    by_trial = latest_attempts(jobs)
    assert sorted(by_trial) == expected, (
        f"missing trials: {sorted(set(expected) - set(by_trial))}, unknown: {sorted(set(by_trial) - set(expected))}"
    )
    not_done = {j["metadata"]["name"]: volcano_phase(j) for j in by_trial.values() if volcano_phase(j) != "Completed"}
    assert not not_done, f"latest attempts not Completed: {not_done}"
    # Nothing was preempted and nothing failed: a second attempt is either a spurious requeue,
    # or the replacement of a job the Volcano job controller lost across the restart (its
    # PodGroup never got pods), which says so on the new attempt.
    again = sorted(
        j["metadata"]["name"]
        for j in jobs
        if j["metadata"]["labels"][labels.ATTEMPT] != "0"
        and "lost by the job controller"
        not in (j["metadata"].get("annotations") or {}).get(labels.REQUEUED_BECAUSE, "")
    )
    assert not again, f"attempts beyond the first although no trial failed, was preempted or lost: {again}"
    done = cli.call("status", name, "-o", "json")
    assert done.returncode == 0, f"status exited {done.returncode}:\n{done.stderr}"
    snap = json.loads(done.stdout)
    rows = {t["trial"]: t for t in snap["trials"]}
    assert sorted(rows) == expected
    assert {t: r["state"] for t, r in rows.items() if r["state"] != "succeeded"} == {}
    assert {t: r["job"] for t, r in rows.items()} == {t: j["metadata"]["name"] for t, j in by_trial.items()}
    [study] = snap["studies"]
    assert study["states"]["succeeded"] == len(expected) and study["states"]["failed"] == 0, study
    assert progress is not None, "submit printed no JSON summary"
    assert (progress["succeeded"], progress["failed"], progress["errors"]) == (len(expected), 0, {}), progress


def wait_mid_run(api, name: str, submit: subprocess.Popen, timeout: float = 90) -> None:
    """Until some trials finished and others are not created yet: the submit loop is in the
    middle. Fails with submit's stderr if it ends or the study does not get there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and submit.poll() is None:
        jobs = jobs_of(api, name)
        done = sum(1 for j in jobs if volcano_phase(j) == "Completed")
        if done >= 2 and len(jobs) < TRIALS:
            return
        time.sleep(0.5)
    if submit.poll() is None:
        submit.kill()
    _, err = submit.communicate()
    pytest.fail(
        f"the study never got mid-run in {timeout} s (submit exit {submit.returncode}); jobs: "
        f"{Counter(phases(api, name).values())}\nsubmit's stderr:\n{err[-4000:]}"
    )


# ------------------------------------------------------------------ scenarios


def test_submit_rides_out_an_apiserver_restart(testbed, api, cli, studies):
    """(a) kube-apiserver SIGKILLed mid-run, down 5 s (8-9 s unreachable), started again from
    its own command line. Volcano may take a minute or more to notice (see canary)."""
    name = unique("f-api")
    path = studies(name, study_yaml(name, testbed.namespace))
    submit = submit_json(cli, path)
    try:
        wait_mid_run(api, name, submit)
        fault("apiserver-restart", "5")
        progress, err = finish(submit, api, name)
    finally:
        if submit.poll() is None:
            submit.kill()
        fault("restore")
    assert_study_whole(api, cli, path, name, progress)
    exited_0(submit, err)
    said = outage_lines(err)
    assert said, f"submit never said the API server was unreachable / it was retrying:\n{err[-4000:]}"
    assert len(said) <= MAX_OUTAGE_LINES, f"{len(said)} outage lines for one outage:\n" + "\n".join(said[:40])


def test_submit_rides_out_an_etcd_pause(testbed, api, cli, studies):
    """(b) etcd SIGSTOPped mid-run for 20 s (the API server hangs on it), then continued."""
    name = unique("f-etcd")
    path = studies(name, study_yaml(name, testbed.namespace))
    submit = submit_json(cli, path)
    pause = None
    try:
        wait_mid_run(api, name, submit)
        pause = subprocess.Popen(["bash", str(FAULT), "etcd-pause", "20"], stderr=subprocess.PIPE, text=True)
        _, pause_err = pause.communicate(timeout=60)
        sys.stderr.write(pause_err)
        assert pause.returncode == 0, f"fault.sh etcd-pause exited {pause.returncode}:\n{pause_err}"
        progress, err = finish(submit, api, name)
    finally:
        if pause is not None and pause.poll() is None:
            pause.terminate()  # its trap continues etcd
            pause.wait(10)
        if submit.poll() is None:
            submit.kill()
        fault("restore")
    assert_study_whole(api, cli, path, name, progress)
    exited_0(submit, err)
    # The API server stays reachable (it waits on etcd); whatever submit says, once is enough.
    said = outage_lines(err)
    assert len(said) <= MAX_OUTAGE_LINES, f"{len(said)} outage lines for one pause:\n" + "\n".join(said[:40])


def test_submit_killed_at_random_moments_then_rerun_completes_the_study_once(testbed, api, cli, studies):
    """(c) submit SIGKILLed 3 times at seeded random moments, rerun each time; the last run ends it."""
    seed = int(os.environ.get("STRATCTL_FAULT_SEED", "14"))
    rng = random.Random(seed)
    moments = [round(rng.uniform(1.0, 12.0), 2) for _ in range(3)]
    name = unique("f-kill")
    path = studies(name, study_yaml(name, testbed.namespace))
    seen: list[tuple[float, int]] = []
    proc = None
    try:
        for moment in moments:
            proc = submit_json(cli, path)
            time.sleep(moment)
            assert proc.poll() is None, (
                f"submit ended before its kill at {moment} s (seed {seed}):\n{proc.communicate()[1]}"
            )
            proc.kill()
            _, err = proc.communicate(timeout=10)
            assert "Traceback" not in err, f"submit crashed before its kill at {moment} s (seed {seed}):\n{err}"
            jobs = jobs_of(api, name)
            pairs = Counter(
                (j["metadata"]["labels"][labels.TRIAL], j["metadata"]["labels"][labels.ATTEMPT]) for j in jobs
            )
            assert all(n == 1 for n in pairs.values()), f"duplicates after the kill at {moment} s: {pairs}"
            seen.append((moment, len(jobs)))
        proc = submit_json(cli, path)
        progress, err = finish(proc, api, name)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
    assert seen[-1][1] > 0, f"the kills (seed {seed}) all landed before any create: {seen}"
    # The last run found what the killed runs created and created only the rest (a create a
    # killed run had in flight may land after the listing: the rerun then meets its 409).
    assert_study_whole(api, cli, path, name, progress)
    exited_0(proc, err)
    assert progress["created"] + progress["existing"] <= TRIALS - seen[-1][1], (seen, progress)
    assert not outage_lines(err), err


def test_status_drain_and_resume_fail_cleanly_while_the_apiserver_is_down(testbed, api):
    """With the API server stopped: exit 3, one clear line on stderr, no traceback, soon."""
    plain = restricted_cli(testbed, traceback=False)
    server = yaml.safe_load(Path(testbed.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    address = urlparse(server).netloc
    name = unique("f-down")
    commands = {"status": ("status", name), "drain": ("drain", name), "resume": ("resume", name)}
    procs: dict[str, subprocess.Popen] = {}
    results = {}
    fault("apiserver-stop")
    try:
        started = time.monotonic()
        procs.update({cmd: plain.start(*args) for cmd, args in commands.items()})
        for cmd, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=max(1.0, 90 - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                results[cmd] = (None, out, err, time.monotonic() - started)
                continue
            results[cmd] = (proc.returncode, out, err, time.monotonic() - started)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        fault("apiserver-start")
    for cmd, (code, _out, err, took) in results.items():
        sys.stderr.write(f"--- {cmd}: exit {code} in {took:.1f} s, stderr ---\n{err}")
        lines = [line for line in err.splitlines() if line.strip()]
        assert code is not None, f"{cmd}: still running after 90 s with the API server down:\n{err[-2000:]}"
        assert "Traceback" not in err, f"{cmd} crashed:\n{err}"
        assert code == 3, f"{cmd} exited {code}, not 3:\n{err}"
        assert len(lines) == 1, f"{cmd}: {len(lines)} lines on stderr, not one:\n{err}"
        [line] = lines
        assert re.search(r"unreachable|cannot reach|could not reach|connection refused", line, re.I), line
        assert address in line, f"{cmd}: the line does not name the API server {address}: {line}"
        assert "object at 0x" not in line, f"{cmd}: a Python object's repr is not a message: {line}"
        assert took < 90, f"{cmd} took {took:.0f} s"
