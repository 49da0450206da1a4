"""`stratctl submit` of a `backend: slurm` study against real Slurm daemons: every trial
exactly once across a SIGKILL and a rerun, and preemption by a higher-tier partition is
a requeue the trial resumes from, not a failure."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

STUDY = """\
name: {name}
backend: slurm
slurm: {{partition: research, time_limit: 5m}}
checkpoint: {{location: "{ckpt}/{{{{ trial }}}}"}}
space:
  seed: {{type: int, low: 0, high: {last}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["bash", "-c", {command}]
  resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
  tasks: [{{name: worker, replicas: 1}}]
throttle: {{parallelism: {{min: 1, initial: {inflight}, max: {inflight}}}}}
"""


def study(tmp_path, name, trials, command, gpus=1, inflight=4):
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(
            name=name,
            ckpt=tmp_path / "ckpt",
            last=trials - 1,
            command=json.dumps(command),
            gpus=gpus,
            inflight=inflight,
        )
    )
    return path


def marks(tmp_path, name):
    """trial -> the attempt files and logs its directory holds."""
    root = tmp_path / "stratctl-out" / name
    return {d.name: sorted(p.name for p in d.iterdir()) for d in root.iterdir()} if root.is_dir() else {}


def test_every_trial_runs_exactly_once_across_a_kill_and_a_rerun(slurm, tmp_path):
    name = f"once-{int(time.time()) % 100000}"
    command = 'sleep 3; echo "{\\"loss\\": $RANDOM}" > "$STRATCTL_OUTPUT_DIR/result.json"'
    path = study(tmp_path, name, 10, command, inflight=4)
    first = slurm.start("submit", str(path), "--poll-interval", "0.5", cwd=tmp_path)
    slurm.wait("the first trials in Slurm", lambda: len(slurm.jobs(name)) >= 3)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    done = slurm.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    progress = json.loads(done.stdout)
    assert progress["succeeded"] == 10 and progress["failed"] == 0
    jobs = slurm.jobs(name)
    per_trial: dict[str, list[int]] = {}
    for job in jobs:
        per_trial.setdefault(job["comment"].split("/")[1], []).append(job["job_id"])
    assert len(per_trial) == 10 and all(len(ids) == 1 for ids in per_trial.values()), per_trial
    files = marks(tmp_path, name)
    assert set(files) == set(per_trial)
    for trial, names in files.items():
        logs = [n for n in names if n.endswith(".log")]
        assert len(logs) == 1 and "attempt-0.job" in names and "attempt-0.exit" in names, (trial, names)
        assert "attempt-1.job" not in names and "result.json" in names
    # the rerun recognised what the killed run had submitted and submitted only the rest
    assert progress["existing"] >= 3 and progress["created"] + progress["existing"] == 10, progress
    # status reads the same: every trial squeue lists, succeeded in its first attempt, with its result
    shown = slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["trials"]
    assert {r["trial"] for r in rows} == set(per_trial)
    names = {j["comment"].split("/")[1]: (j["name"], j["job_state"]) for j in jobs}
    ran = {j["comment"].split("/")[1]: j["end_time"] - j["start_time"] for j in jobs}  # seconds, 1 GPU each
    for row in rows:
        assert (row["job"], row["phase"]) == names[row["trial"]] == (row["trial"], "COMPLETED"), row
        assert row["state"] == "succeeded" and row["attempt"] == 0 and "loss" in row["result"]
        assert row["gpu_seconds"] == ran[row["trial"]] >= 3, row  # each slept 3 s on its GPU
    [study_row] = json.loads(shown.stdout)["studies"]
    assert study_row["gpu_hours"] == pytest.approx(sum(ran.values()) / 3600)


def test_a_preempted_trial_is_requeued_and_resumes_from_its_checkpoint(slurm, tmp_path):
    name = f"preempt-{int(time.time()) % 100000}"
    command = textwrap.dedent("""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo "$SLURM_RESTART_COUNT" > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep 10; echo '{"loss": 1}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(tmp_path, name, 4, command, gpus=4, inflight=4)  # four 4-GPU trials fill the four nodes
    slurm.wait_idle()
    loop = slurm.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    slurm.wait("every trial running", lambda: sum(j["job_state"] == "RUNNING" for j in slurm.jobs(name)) == 4)
    prod = slurm.run(
        "sbatch",
        "--parsable",
        "-p",
        "prod",
        "--gres=gpu:4",
        "--job-name=prod-urgent",
        "--output=/dev/null",
        "--wrap",
        "sleep 2",
    ).stdout.strip()
    requeued = slurm.wait("a trial requeued", lambda: [j for j in slurm.jobs(name) if j["restart_cnt"] > 0])
    out, err = loop.communicate(timeout=180)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == 4 and progress["failed"] == 0
    trial = requeued[0]["comment"].split("/")[1]
    assert (tmp_path / "stratctl-out" / name / trial / "resumed").read_text().strip() == "1"
    assert f"trial {trial}: preempted, requeued by Slurm" in err
    assert len(slurm.jobs(name)) == 4  # the same job, requeued: no new attempt, nothing duplicated
    assert prod.isdigit()


def test_drain_holds_the_study_and_resume_brings_it_back(slurm, tmp_path):
    name = f"drain-{int(time.time()) % 100000}"
    command = textwrap.dedent("""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo resumed > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep 6; echo '{"loss": 1}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(tmp_path, name, 6, command, gpus=4, inflight=6)  # 4 fit at once, 2 wait pending
    slurm.wait_idle()
    loop = slurm.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    slurm.wait("four trials running", lambda: sum(j["job_state"] == "RUNNING" for j in slurm.jobs(name)) == 4)
    drained = slurm.stratctl("drain", str(path), "-o", "json", cwd=tmp_path)
    assert drained.returncode == 0, drained.stderr
    assert len(json.loads(drained.stdout)[0]["suspended"]) == 6

    def all_held():
        jobs = slurm.jobs(name)
        seen[:] = [(j["job_id"], j["job_state"], j["state_reason"], j["priority"], j["restart_cnt"]) for j in jobs]
        return len(jobs) == 6 and all(j["job_state"] == "PENDING" and j["priority"] == 0 for j in jobs)

    seen: list[tuple] = []
    try:
        slurm.wait("every job held", all_held)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the study's jobs: {seen}") from None
    time.sleep(3)  # a drained study stays drained: the loop admits nothing, nothing runs
    assert all_held()
    shown = json.loads(slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)
    assert shown["studies"][0]["states"] == {"suspended": 6} and shown["studies"][0]["drained"]
    resumed = slurm.stratctl("resume", str(path), "-o", "json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(json.loads(resumed.stdout)["resumed"]) == 6
    out, err = loop.communicate(timeout=180)
    assert loop.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 6 and "preempted" not in err  # a drain is no preemption
    assert len(slurm.jobs(name)) == 6  # held and released, never resubmitted
    resumed_trials = [d for d in (tmp_path / "stratctl-out" / name).iterdir() if (d / "resumed").exists()]
    assert len(resumed_trials) == 4  # the four that were running came back from their checkpoints


def test_a_controller_that_stops_answering_mid_submit_loses_nothing_and_duplicates_nothing(slurm, tmp_path):
    """The controller of a flooded cluster answers "Socket timed out" (MessageTimeout): here
    slurmctld is stopped (SIGSTOP) for three times its MessageTimeout while the study is
    submitting, then continued. sbatch calls sent meanwhile wait in the controller's
    socket backlog and may still go through after their client gave up: the loop backs
    off, looks each one up before sending it again, and every attempt runs exactly once
    (a job that was starting just then may fail with the silent controller: its trial
    runs again as its next attempt)."""
    pid_file = Path(slurm.env.get("STRATCTL_SLURM_RUN", "")) / "run" / "slurmctld.pid"
    if not pid_file.is_file():
        pytest.skip("an external Slurm cluster: its controller is not ours to stop")
    pid = int(pid_file.read_text().split()[0])
    name = f"flood-{int(time.time()) % 100000}"
    command = 'sleep 2; echo "{\\"loss\\": 1}" > "$STRATCTL_OUTPUT_DIR/result.json"'
    path = study(tmp_path, name, 16, command, inflight=8)
    loop = slurm.start("submit", str(path), "--poll-interval", "0.5", "--workers", "4", "-o", "json", cwd=tmp_path)
    slurm.wait("the first trials in Slurm", lambda: len(slurm.jobs(name)) >= 2)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(15)
    finally:
        os.kill(pid, signal.SIGCONT)
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == 16 and progress["failed"] == 0, progress
    assert "trying again" in err, err[-2000:]  # it did meet the silent controller, and backed off
    per_attempt: dict[tuple[str, str], list[int]] = {}
    for job in slurm.jobs(name):
        _, trial, attempt, _ = job["comment"].split("/")
        per_attempt.setdefault((trial, attempt), []).append(job["job_id"])
    assert all(len(ids) == 1 for ids in per_attempt.values()), per_attempt  # no attempt submitted twice
    assert len({trial for trial, _ in per_attempt}) == 16
    # A job that starts as the controller stops has its srun (and the script's one scontrol
    # before it) time out, and fails: that trial's next attempt ran it, no other retry
    for trial, attempt in per_attempt:
        if attempt != "0":
            logs = "".join(p.read_text() for p in (tmp_path / "stratctl-out" / name / trial).glob("*.log"))
            assert "srun: error: Unable to confirm allocation" in logs or "Socket timed out" in logs, (trial, logs)
