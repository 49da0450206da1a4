"""`stratctl submit` of a study on each batch backend's real testbed (Slurm's daemons, a
YARN ResourceManager and its NodeManagers): every trial exactly once across a SIGKILL and a
rerun, and across a controller that stops answering; a preemption by higher-tier work is
resumed from the checkpoint, never a failure; drain and resume; `status` agrees with the
scheduler. Where the backends truly differ (a preemption requeues the same job or ends the
attempt; drain holds or kills), the backend's parameters say how (backends.py)."""

from __future__ import annotations

import json
import signal
import socket
import textwrap
import time
import urllib.request

import pytest

STUDY = """\
name: {name}
{header}checkpoint: {{location: "{ckpt}/{{{{ trial }}}}"}}
space:
  seed: {{type: int, low: 0, high: {last}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["bash", "-c", {command}]
  resources: {{{requests}limits: {{nvidia.com/gpu: {gpus}}}}}
  tasks: [{{name: worker, replicas: {tasks}}}]
throttle: {{parallelism: {{min: 1, initial: {inflight}, max: {inflight}}}}}
"""


def study(backend, tmp_path, name, trials, command, gpus=1, tasks=1, inflight=4):
    path = tmp_path / "study.yaml"
    path.write_text(
        STUDY.format(
            name=name,
            header=backend.header(),
            requests=backend.requests,
            ckpt=tmp_path / "ckpt",
            last=trials - 1,
            command=json.dumps(command),
            gpus=gpus,
            tasks=tasks,
            inflight=inflight,
        )
    )
    return path


def files(tmp_path, name):
    """trial -> the attempt files and logs its directory holds (the study's own, `.study/`
    and a merged study's `.blocks/`, are no trial's)."""
    root = tmp_path / "stratctl-out" / name
    trials = [d for d in root.iterdir() if not d.name.startswith(".")] if root.is_dir() else []
    return {d.name: sorted(p.name for p in d.iterdir()) for d in trials}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, series: str) -> str | None:
    """The line of one series on a /metrics page, None while it is not served."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            text = page.read().decode()
    except OSError:
        return None
    return next((line for line in text.splitlines() if line.startswith(series)), None)


# each backend's trials (and tasks a trial) for the exactly-once test, as the testbed holds them
ONCE = {"slurm": (10, 1), "yarn": (8, 2)}
# what each attempt leaves in its trial's directory: Slurm's job script its marks and its log,
# YARN's scheduler the record of each ended application, and each container its log
MARKS = {
    "slurm": (["attempt-0.job", "attempt-0.exit"], "attempt-1.job", 1),
    "yarn": (["attempt-0.yarn.json"], "attempt-1.yarn.json", None),  # None: a log per container of the gang
}


def test_every_trial_runs_exactly_once_across_a_kill_and_a_rerun(backend, tmp_path):
    bed = backend.bed
    trials, tasks = ONCE[backend.name]
    name = f"once-{int(time.time()) % 100000}"
    command = (
        'sleep 3; echo "$STRATCTL_TASK_INDEX" >> "$STRATCTL_OUTPUT_DIR/ran"; '
        '[ "$STRATCTL_TASK_INDEX" = 0 ] && echo "{\\"loss\\": $RANDOM}" > "$STRATCTL_OUTPUT_DIR/result.json"; true'
    )
    path = study(backend, tmp_path, name, trials, command, tasks=tasks, inflight=4)
    first = bed.start("submit", str(path), "--poll-interval", "0.5", cwd=tmp_path)
    bed.wait("the first trials in the scheduler", lambda: sum(map(len, backend.records(name).values())) >= 3)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    done = bed.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    progress = json.loads(done.stdout)
    assert progress["succeeded"] == trials and progress["failed"] == 0, progress
    # the rerun recognised what the killed run had submitted and submitted only the rest
    assert progress["existing"] >= 3 and progress["created"] + progress["existing"] == trials, progress
    records = backend.records(name)
    assert len(records) == trials and all(len(r) == 1 for r in records.values()), records
    out = tmp_path / "stratctl-out" / name
    for trial in records:  # every task of the gang ran, once each
        assert sorted((out / trial / "ran").read_text().split()) == [str(i) for i in range(tasks)], trial
    marks, never, logs = MARKS[backend.name]
    logs = tasks if logs is None else logs
    seen = files(tmp_path, name)
    assert set(seen) == set(records)
    for trial, names in seen.items():
        assert len([n for n in names if n.endswith(".log")]) == logs, (trial, names)
        assert all(m in names for m in marks) and never not in names and "result.json" in names, (trial, names)
    # status reads what the scheduler says: every attempt done, its trial succeeded with its result
    shown = bed.stratctl("status", str(path), "-o", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["trials"]
    assert {r["trial"] for r in rows} == set(records)
    ran = {}
    for row in rows:
        [record] = records[row["trial"]]
        assert (row["state"], row["phase"], backend.state(record)) == ("succeeded", backend.done, backend.done), row
        assert row["attempt"] == 0 and "loss" in row["result"] and row["queue"] == "research", row
        if backend.name == "slurm":  # the job is named after its trial
            assert row["job"] == record["name"] == row["trial"], row
        else:
            assert record["finalStatus"] == "SUCCEEDED", record
        # GPU time: a GPU a task, over the attempt's run in the scheduler's own times
        ran[row["trial"]] = backend.seconds(record) * tasks
        assert row["gpu_seconds"] == pytest.approx(ran[row["trial"]]), (row, record)
        assert row["gpu_seconds"] >= 3, row  # each task slept 3 s on its GPU
    [study_row] = json.loads(shown.stdout)["studies"]
    assert study_row["gpu_hours"] == pytest.approx(sum(ran.values()) / 3600)


# each backend's trials and in flight for the silent-controller test
SILENT = {"slurm": (16, 8, "sleep 2"), "yarn": (12, 6, "sleep 1")}


def test_a_controller_that_stops_answering_mid_submit_loses_nothing_and_duplicates_nothing(backend, tmp_path):
    """The controller of a flooded cluster stops answering: here it is stopped (SIGSTOP:
    slurmctld, the ResourceManager's JVM) for 15 s while the study is submitting, longer than
    a request waits, then continued. Requests sent meanwhile may still go through after
    their client gave up: the loop backs off, looks each one up before sending it again,
    and every attempt runs exactly once; its metrics are served throughout. On Slurm, a job
    that was starting just then may fail with the silent controller: its trial runs again
    as its next attempt, for that reason alone."""
    bed = backend.bed
    assert bed.local, "stops the testbed's own controller: needs this repo's testbed"
    trials, inflight, command = SILENT[backend.name]
    name = f"flood-{int(time.time()) % 100000}"
    if backend.name == "slurm":
        command += '; echo "{\\"loss\\": 1}" > "$STRATCTL_OUTPUT_DIR/result.json"'
    path = study(backend, tmp_path, name, trials, command, inflight=inflight)
    port = free_port()
    loop = bed.start(
        "submit",
        str(path),
        "--poll-interval",
        "0.5",
        "--workers",
        "4",
        "-o",
        "json",
        "--metrics-port",
        str(port),
        cwd=tmp_path,
    )
    bed.wait("the first trials in the scheduler", lambda: sum(map(len, backend.records(name).values())) >= 2)
    # the study's own metrics, exported as on Kubernetes
    metrics = bed.wait("the loop's metrics", lambda: scrape(port, f'stratctl_trials_in_flight{{study="{name}"}}'))
    bed.pause(15)
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == trials and progress["failed"] == 0, progress
    assert "trying again" in err, err[-2000:]  # it did meet the silent controller, and backed off
    if backend.name == "yarn":
        assert f"{backend.controller}:" in err and "answering again" in err, err[-2000:]
    assert float(metrics.split()[-1]) >= 1
    records = backend.records(name)
    assert len(records) == trials
    per_attempt: dict[tuple[str, int], int] = {}
    for trial, attempts in records.items():
        for record in attempts:
            key = (trial, backend.attempt_of(record))
            per_attempt[key] = per_attempt.get(key, 0) + 1
    assert all(n == 1 for n in per_attempt.values()), per_attempt  # no attempt submitted twice
    retried = [(trial, n) for trial, n in per_attempt if n != 0]
    if backend.name == "yarn":
        assert retried == [], retried  # every trial in its first application
    # A Slurm job that starts as the controller stops has its srun (and the script's one
    # scontrol before it) time out, and fails: that trial's next attempt ran it, no other retry
    for trial, _ in retried:
        logs = "".join(p.read_text() for p in (tmp_path / "stratctl-out" / name / trial).glob("*.log"))
        assert "srun: error: Unable to confirm allocation" in logs or "Socket timed out" in logs, (trial, logs)


# each backend's preemption test: GPUs a trial (four trials fill the testbed), seconds each runs
PREEMPT = {"slurm": (4, 10), "yarn": (2, 15)}
# what a resumed run writes: Slurm's restart count of the same job, YARN's attempt number
RESUMED = {"slurm": "$SLURM_RESTART_COUNT", "yarn": "$STRATCTL_ATTEMPT"}


def test_a_preempted_trial_resumes_from_its_checkpoint_not_a_failure(backend, tmp_path):
    bed = backend.bed
    gpus, seconds = PREEMPT[backend.name]
    name = f"preempt-{int(time.time()) % 100000}"
    command = textwrap.dedent(f"""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo "{RESUMED[backend.name]}" > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep {seconds}; echo '{{"loss": 1}}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(backend, tmp_path, name, 4, command, gpus=gpus, inflight=4)  # four trials take every GPU
    bed.wait_idle()
    loop = bed.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    bed.wait("every trial running", lambda: backend.running(name) == 4 and backend.full())
    backend.preempt(tmp_path, name)
    if backend.preemption == "requeue":
        bed.wait("a trial requeued", lambda: [j for j in bed.jobs(name) if j["restart_cnt"] > 0])
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == 4 and progress["failed"] == 0, progress
    records = backend.records(name)
    if backend.preemption == "requeue":  # the same job, requeued: no new attempt, nothing duplicated
        assert sum(map(len, records.values())) == 4, records
        preempted = {t: r for t, r in records.items() if r[0]["restart_cnt"] > 0}
    else:  # the attempt ended, preempted; the next one resumed
        preempted = {t: r for t, r in records.items() if len(r) > 1}
    assert preempted, "no trial was preempted"
    rows = {
        r["trial"]: r
        for r in json.loads(bed.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
    }
    for trial, attempts in preempted.items():
        resumed = (tmp_path / "stratctl-out" / name / trial / "resumed").read_text().strip()
        if backend.preemption == "requeue":
            assert resumed == "1"
            assert f"trial {trial}: preempted, requeued by {backend.title}" in err
            times = attempts[0]["restart_cnt"]
        else:
            first = attempts[0]
            assert first["finalStatus"] == "FAILED" and "stratctl: preempted" in first["diagnostics"], first
            assert resumed == str(len(attempts) - 1)
            assert f"trial {trial}: attempt 1 submitted (attempt 0 preempted)" in err
            times = len(attempts) - 1
        assert rows[trial]["preemptions"] == times and rows[trial]["failed_attempts"] == 0, rows[trial]
        assert rows[trial]["state"] == "succeeded"


# each backend's drain test: trials, GPUs a trial, how many run at once, seconds each runs
DRAIN = {"slurm": (6, 4, 4, 6), "yarn": (4, 4, 2, 8)}


def test_drain_suspends_the_study_and_resume_brings_it_back(backend, tmp_path):
    bed = backend.bed
    trials, gpus, fit, seconds = DRAIN[backend.name]
    name = f"drain-{int(time.time()) % 100000}"
    command = textwrap.dedent(f"""\
        if [ "$STRATCTL_RESUME" = 1 ]; then echo resumed > "$STRATCTL_OUTPUT_DIR/resumed"; fi
        sleep {seconds}; echo '{{"loss": 1}}' > "$STRATCTL_OUTPUT_DIR/result.json\"""")
    path = study(backend, tmp_path, name, trials, command, gpus=gpus, inflight=trials)  # `fit` at once, the rest wait
    bed.wait_idle()
    loop = bed.start("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    bed.wait(f"{fit} trials running", lambda: backend.running(name) == fit)
    drained = bed.stratctl("drain", str(path), "-o", "json", cwd=tmp_path)
    assert drained.returncode == 0, drained.stderr
    assert len(json.loads(drained.stdout)[0]["suspended"]) == trials

    seen: list[tuple] = []

    def all_suspended():
        if backend.drain == "hold":  # held: pending, priority 0, the same jobs
            jobs = bed.jobs(name)
            seen[:] = [(j["job_id"], j["job_state"], j["state_reason"], j["priority"], j["restart_cnt"]) for j in jobs]
            return len(jobs) == trials and all(j["job_state"] == "PENDING" and j["priority"] == 0 for j in jobs)
        apps = bed.apps(name)  # killed, every one
        seen[:] = [(a["id"], a["state"]) for a in apps]
        return len(apps) == trials and all(a["state"] == "KILLED" for a in apps)

    try:
        bed.wait("every attempt suspended", all_suspended)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the study's attempts: {seen}") from None
    time.sleep(3)  # a drained study stays drained: the loop admits nothing, nothing runs
    assert all_suspended(), seen
    shown = json.loads(bed.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)
    assert shown["studies"][0]["states"] == {"suspended": trials} and shown["studies"][0]["drained"]
    assert {r["state"] for r in shown["trials"]} == {"suspended"}
    resumed = bed.stratctl("resume", str(path), "-o", "json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(json.loads(resumed.stdout)["resumed"]) == trials
    out, err = loop.communicate(timeout=240)
    assert loop.returncode == 0, err[-2000:]
    progress = json.loads(out)
    assert progress["succeeded"] == trials and progress["failed"] == 0, progress
    assert "preempted" not in err  # a drain is no preemption
    records = backend.records(name)
    back = [d for d in (tmp_path / "stratctl-out" / name).iterdir() if (d / "resumed").exists()]
    if backend.drain == "hold":
        assert sum(map(len, records.values())) == trials  # held and released, never resubmitted
        assert len(back) == fit  # those that were running came back from their checkpoints
    else:
        assert all(len(a) == 2 and a[0]["state"] == "KILLED" for a in records.values()), records
        assert len(back) == trials  # each killed one's next attempt resumed
    rows = json.loads(bed.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
    assert all(r["state"] == "succeeded" and r["failed_attempts"] == 0 and r["preemptions"] == 0 for r in rows), rows
