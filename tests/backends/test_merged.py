"""Merged submissions (`merge: auto`) on the real Slurm testbed: a study's first attempts
as one job array, read back trial by trial. Every trial exactly once across a SIGKILL and
a rerun; a preempted array task resumed from its checkpoint, not failed; drain and resume
of trials running inside one block; the array's throttle following the adaptive target.
YARN has no arrays: `merge: auto` keeps one application per trial there (unit tests)."""

from __future__ import annotations

import json
import signal
import textwrap
import time

from tests.backends.backends import Slurm

STUDY = """\
name: {name}
backend: slurm
merge: auto
slurm: {{partition: research, time_limit: 5m}}
checkpoint: {{location: "{ckpt}/{{{{ trial }}}}"}}
space:
  seed: {{type: int, low: 0, high: {last}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["bash", "-c", {command}]
  resources: {{limits: {{nvidia.com/gpu: 1}}}}
throttle: {{parallelism: {{min: 1, initial: {inflight}, max: {inflight}}}}}
"""


def study(tmp_path, name, trials, command, inflight=4):
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(name=name, ckpt=tmp_path / "ckpt", last=trials - 1, command=json.dumps(command), inflight=inflight)
    )
    return path


def arrays(slurm, name) -> list[dict]:
    """The study's records in squeue: its arrays' tasks and pending remainders."""
    return [j for j in slurm.jobs(name) if j.get("array_job_id")]


def ran(tmp_path, name, trial) -> list[str]:
    path = tmp_path / "stratctl-out" / name / trial / "ran"
    return path.read_text().split() if path.exists() else []


def test_a_merged_study_is_one_array_its_trials_each_run_exactly_once_across_a_kill_and_a_rerun(slurm, tmp_path):
    name = f"mrg-{int(time.time()) % 100000}"
    trials = 12
    command = (
        'sleep 4; echo "$SLURM_ARRAY_TASK_ID" >> "$STRATCTL_OUTPUT_DIR/ran"; '
        'echo "$STRATCTL_TRIAL $STRATCTL_ATTEMPT $STRATCTL_PARAMS $STRATCTL_CHECKPOINT_DIR $STRATCTL_RESUME"; '
        'echo \'{"loss": 1}\' > "$STRATCTL_OUTPUT_DIR/result.json"'
    )
    path = study(tmp_path, name, trials, command, inflight=4)
    slurm.wait_idle()
    first = slurm.start("submit", str(path), "--poll-interval", "0.5", cwd=tmp_path)
    slurm.wait(
        "the block's first tasks running", lambda: sum(j["job_state"] == "RUNNING" for j in arrays(slurm, name)) >= 2
    )
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    done = slurm.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    progress = json.loads(done.stdout)
    assert progress["succeeded"] == trials and progress["failed"] == 0, progress
    assert progress["existing"] == trials and progress["created"] == 0, progress  # the block was recognised
    records = arrays(slurm, name)
    assert {j["array_job_id"] for j in records} == {records[0]["array_job_id"]}  # one array: one sbatch in all
    blocks = (tmp_path / "stratctl-out" / name / ".blocks" / "block-1").read_text().split()
    assert len(blocks) == trials and not (tmp_path / "stratctl-out" / name / ".blocks" / "block-2").exists()
    study_dir = tmp_path / "stratctl-out" / name
    lines = (study_dir / ".blocks" / "block-1.tasks").read_text().splitlines()  # what every task read: one file
    assert [line.split("\t")[0] for line in lines] == blocks
    seeds = []
    for index, trial in enumerate(blocks):  # each trial ran once, as its array task, with its own values
        assert ran(tmp_path, name, trial) == [str(index)], trial
        assert not (study_dir / trial / "attempt-0.sh").exists()  # no script written per trial
        log = slurm.stratctl("logs", str(path), trial, cwd=tmp_path)
        assert log.returncode == 0, log.stderr
        said = [line.split() for line in log.stdout.splitlines() if line.startswith(f"{trial} ")]
        assert len(said) == 1, log.stdout
        (trial_id, attempt, params, checkpoint, resume) = said[0]
        assert (trial_id, attempt, checkpoint, resume) == (trial, "0", f"{tmp_path}/ckpt/{trial}", "0")
        seeds.append(json.loads(params)["seed"])
    assert sorted(seeds) == list(range(trials))  # every trial its own parameters
    shown = slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["trials"]
    assert {r["trial"]: r["state"] for r in rows} == dict.fromkeys(blocks, "succeeded")
    assert all(r["attempt"] == 0 and "loss" in r["result"] and r["gpu_seconds"] >= 4 for r in rows), rows


def test_a_preempted_array_task_resumes_from_its_checkpoint_not_a_failure(slurm, tmp_path):
    name = f"mrgp-{int(time.time()) % 100000}"
    command = textwrap.dedent("""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo 1 > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep 8; echo '{"loss": 1}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(tmp_path, name, 16, command, inflight=16)  # sixteen trials take every GPU
    slurm.wait_idle()
    loop = slurm.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    slurm.wait(
        "every GPU taken by the block", lambda: sum(j["job_state"] == "RUNNING" for j in arrays(slurm, name)) == 16
    )
    Slurm(slurm).preempt(tmp_path, name)  # a prod job takes one node's 4 GPUs back
    slurm.wait("an array task requeued", lambda: [j for j in arrays(slurm, name) if j.get("restart_cnt")])
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == 16 and progress["failed"] == 0, progress
    rows = json.loads(slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
    preempted = [r for r in rows if r["preemptions"]]
    assert preempted, "no trial was preempted"
    for row in preempted:
        assert row["state"] == "succeeded" and row["failed_attempts"] == 0 and row["attempt"] == 0, row
        assert (tmp_path / "stratctl-out" / name / row["trial"] / "resumed").read_text().strip() == "1"
        assert f"trial {row['trial']}: preempted, requeued by Slurm" in err


def test_drain_suspends_the_trials_inside_a_block_and_resume_brings_them_back(slurm, tmp_path):
    name = f"mrgd-{int(time.time()) % 100000}"
    command = textwrap.dedent("""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo 1 > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep 6; echo '{"loss": 1}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(tmp_path, name, 6, command, inflight=2)
    slurm.wait_idle()
    sent = slurm.stratctl("submit", str(path), "--detach", cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    slurm.wait(
        "two of the block's trials running", lambda: sum(j["job_state"] == "RUNNING" for j in arrays(slurm, name)) == 2
    )
    drained = slurm.stratctl("drain", str(path), cwd=tmp_path)
    assert drained.returncode == 0, drained.stderr
    rows = json.loads(slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
    assert {r["state"] for r in rows} == {"suspended"}, rows  # the two that ran and the four the block held back
    time.sleep(3)
    assert not [j for j in arrays(slurm, name) if j["job_state"] == "RUNNING"]  # nothing starts while drained
    resumed = slurm.stratctl("resume", str(path), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    done = slurm.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    progress = json.loads(done.stdout)
    assert progress["succeeded"] == 6 and progress["created"] == 0, progress
    back = [
        r
        for r in json.loads(slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
        if (tmp_path / "stratctl-out" / name / r["trial"] / "resumed").exists()
    ]
    assert len(back) == 2, back  # the two drain stopped came back from their checkpoints
