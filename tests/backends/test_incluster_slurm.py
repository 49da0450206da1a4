"""`submit --in-cluster` on the real Slurm testbed: the study's loop runs as a small batch job
(its driver), the command returns in seconds saying which job and node drive the study; the
driver job is killed once (SIGKILL, its mark left behind) and requeued, as Slurm requeues a
preempted job, onto another node; the same command sent meanwhile submits no second driver
and returns once the restarted job holds the study; the study finishes with every trial
run exactly once, and `logs --driver` shows both runs of the driver."""

from __future__ import annotations

import json
import time

from tests.backends.backends import Slurm
from tests.backends.test_submit import study


def driver_jobs(bed, name: str) -> list[dict]:
    out = json.loads(bed.run("squeue", "--json", "--all").stdout)["jobs"]
    return [j for j in out if j["name"] == f"stratctl-driver-{name}"]


def test_the_loop_as_a_slurm_job_killed_once_goes_on_and_runs_every_trial_once(slurm, tmp_path):
    backend = Slurm(slurm)
    name = f"drv-{int(time.time()) % 100000}"
    trials = 12
    command = (
        'sleep 4; echo ran >> "$STRATCTL_OUTPUT_DIR/ran"; '
        'echo "{\\"loss\\": $RANDOM}" > "$STRATCTL_OUTPUT_DIR/result.json"'
    )
    path = study(backend, tmp_path, name, trials, command, inflight=4)

    started = time.monotonic()
    sent = slurm.stratctl("submit", str(path), "--in-cluster", "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    took = time.monotonic() - started
    assert sent.returncode == 0, sent.stderr[-2000:]
    driven = json.loads(sent.stdout)
    job, node = driven["job"], driven["node"]
    assert driven["study"] == name and not driven["kept"] and node.startswith("sn"), driven
    assert took < 20, took  # queued, started, the study checked and held: seconds

    slurm.wait("the driver's first trials in the scheduler", lambda: len(slurm.jobs(name)) >= 4, 60)
    # its loop killed outright, SIGKILL to the batch step (the script execs the loop), so its mark
    # stays behind; a plain scancel would send SIGTERM, on which the loop ends cleanly and lets it go
    slurm.run("scancel", "--batch", "--signal=KILL", str(job))
    slurm.wait(
        "the driver killed", lambda: (jobs := driver_jobs(slurm, name)) and jobs[0]["job_state"] != "RUNNING", 30
    )
    slurm.run("scontrol", "requeue", str(job))  # what Slurm does to a preempted job
    slurm.run("scontrol", "update", f"jobid={job}", f"ExcNodeList={node}")  # its next run elsewhere

    again = slurm.stratctl("submit", str(path), "--in-cluster", "-o", "json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    back = json.loads(again.stdout)
    assert back["kept"] and back["job"] == job and back["node"] != node, back  # the same job, started again
    assert [j["job_id"] for j in driver_jobs(slurm, name)] == [job]  # no second driver

    slurm.wait(
        "the driver done", lambda: (jobs := driver_jobs(slurm, name)) and jobs[0]["job_state"] == "COMPLETED", 90
    )
    log = slurm.stratctl("logs", name, "--driver", cwd=tmp_path).stdout
    assert f"slurm job {job} on {node}, restart 0" in log and f"slurm job {job} on {back['node']}, restart 1" in log
    # the restarted job took the study at once: the scheduler said the mark's job no longer ran there
    assert f"{name}: its driver slurm job {job} on {node} has ended: this loop drives it now" in log, log
    assert f"study {name}: {trials} succeeded, 0 failed" in log, log

    records = backend.records(name)
    assert len(records) == trials and all(len(jobs) == 1 for jobs in records.values()), records
    assert {j["job_state"] for jobs in records.values() for j in jobs} == {"COMPLETED"}
    out = tmp_path / "stratctl-out" / name
    assert all((out / trial / "ran").read_text() == "ran\n" for trial in records)  # each ran once
    shown = json.loads(slurm.stratctl("status", name, "-o", "json", cwd=tmp_path).stdout)
    assert {r["state"] for r in shown["trials"]} == {"succeeded"} and len(shown["trials"]) == trials
