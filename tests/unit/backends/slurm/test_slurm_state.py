"""A Slurm study's trial states from squeue's jobs and the attempt files (pure), and the
capacity the loop reads from sinfo."""

from __future__ import annotations

import json
import os
from pathlib import Path

from stratctl.backends.batch.status import snapshot
from stratctl.backends.batch.trials import gangs_fit
from stratctl.backends.slurm.scheduler import free_gpus
from stratctl.backends.slurm.state import Mark, ending, exit_of, latest, read_marks
from stratctl.core.space import expand
from stratctl.trialstate import TrialState
from stratctl.view.columns import why
from tests.unit.studies import load


def job(trial, attempt, state, job_id, reason="None", restarts=0, study="s", exit_code=0):
    return {
        "job_id": job_id,
        "comment": f"stratctl:{study}/{trial}/{attempt}/h",
        "job_state": state,
        "state_reason": reason,
        "restart_cnt": restarts,
        "exit_code": exit_code,
    }


def test_squeue_states_map_to_trial_states():
    jobs = [
        job("a", 0, "PENDING", 1, "Resources"),
        job("b", 0, "RUNNING", 2, restarts=1),
        job("c", 0, "COMPLETED", 3),
        job("d", 0, "TIMEOUT", 4),
        job("e", 0, "PENDING", 5, "JobHeldUser"),
        job("f", 0, "PENDING", 6, "QOSMaxGRESPerUser"),
        job("x", 0, "RUNNING", 7, study="other"),
        job("g", 0, "REQUEUE_HOLD", 9, "JobHeldAdmin"),
        {**job("h", 0, "PENDING", 10, "Priority"), "priority": 0},
        {"job_id": 8, "comment": "", "job_state": "RUNNING"},
    ]
    seen = latest(jobs, "s", {})
    assert {t: a.state for t, a in seen.items()} == {
        "a": TrialState.PENDING,
        "b": TrialState.RUNNING,
        "c": TrialState.SUCCEEDED,
        "d": TrialState.FAILED,
        "e": TrialState.SUSPENDED,
        "f": TrialState.PENDING,
        "g": TrialState.SUSPENDED,
        "h": TrialState.SUSPENDED,
    }
    assert seen["a"].waits_for_capacity and not seen["a"].waits_for_limits
    assert seen["f"].waits_for_limits and not seen["f"].waits_for_capacity
    assert seen["b"].restarts == 1 and seen["b"].reason == ""


def test_the_latest_attempt_wins_and_of_two_jobs_of_one_attempt_the_first():
    seen = latest(
        [job("a", 0, "FAILED", 1, exit_code=1), job("a", 1, "RUNNING", 9), job("a", 1, "PENDING", 12)], "s", {}
    )
    assert (seen["a"].attempt, seen["a"].job, seen["a"].state) == (1, "9", TrialState.RUNNING)


def test_attempts_slurm_forgot_come_from_their_files(tmp_path):
    """Their state, and their run time: the marks' modification times (written at start and end)."""
    for trial, files in {
        "a": {"attempt-0.job": ("11", 100), "attempt-0.exit": ("0", 160)},
        "b": {"attempt-0.job": ("12", 100), "attempt-0.exit": ("3", 130), "attempt-1.job": ("15", 200)},
        "c": {"attempt-0.job": ("13", 100)},
        "d": {},
    }.items():
        (tmp_path / trial).mkdir()
        for name, (text, at) in files.items():
            (tmp_path / trial / name).write_text(text + "\n")
            os.utime(tmp_path / trial / name, (at, at))
    marks = read_marks(tmp_path)
    assert marks == {
        "a": {0: Mark(11, 0, 100, 160)},
        "b": {0: Mark(12, 3, 100, 130), 1: Mark(15, None, 200, None)},
        "c": {0: Mark(13, None, 100, None)},
    }
    seen = latest([job("c", 1, "PENDING", 20)], "s", marks)
    assert seen["a"].state is TrialState.SUCCEEDED and seen["a"].run_seconds(now=999) == 60
    assert (seen["b"].attempt, seen["b"].state) == (1, TrialState.FAILED)  # ended without its script finishing
    assert seen["b"].earlier_seconds == 30 and seen["b"].run_seconds(now=999) == 0  # its end time is unknown
    assert (seen["c"].attempt, seen["c"].state) == (1, TrialState.PENDING)  # squeue's newer attempt wins
    assert seen["c"].earlier_seconds == 0  # attempt 0 never said how it ended
    assert read_marks(tmp_path / "missing") == {}


def test_run_times_come_from_squeue_while_it_lists_the_job():
    running = {**job("a", 0, "RUNNING", 1), "start_time": 1000, "end_time": 4600}  # end_time: its time limit
    done = {**job("b", 0, "COMPLETED", 2), "start_time": 1000, "end_time": 1300}
    pending = {**job("c", 0, "PENDING", 3, "Resources"), "start_time": 2000}  # a forecast
    seen = latest([running, done, pending], "s", {})
    assert seen["a"].run_seconds(now=1100) == 100 and seen["b"].run_seconds(now=9999) == 300
    assert seen["c"].started is None and seen["c"].run_seconds(now=9999) == 0


def test_free_gpus_and_whole_gangs_from_sinfo():
    nodes = [
        {"name": "n1", "state": "idle", "gres": "gpu:4", "gres_used": "gpu:0", "partitions": ["research"]},
        {
            "name": "n2",
            "state": "mixed",
            "gres": "gpu:a100:4(S:0-1)",
            "gres_used": "gpu:a100:3(IDX:0-2)",
            "partitions": ["research", "prod"],
        },
        {"name": "n3", "state": "down", "gres": "gpu:4", "gres_used": "gpu:0", "partitions": ["research"]},
        {"name": "n4", "state": "idle", "gres": "gpu:4", "gres_used": "gpu:0", "partitions": ["prod"]},
    ]
    assert free_gpus(nodes, ("research",)) == [4, 1]
    assert free_gpus(nodes) == [4, 1, 4]
    assert free_gpus(nodes, ("edge", "prod")) == [1, 4]  # a study listing partitions: a node in any of them
    assert gangs_fit([4, 1], [2, 2]) == 1  # the lone GPU on n2 holds no 2-GPU task
    assert gangs_fit([4, 1], [1, 1]) == 2 and gangs_fit([4, 1, 4], [4]) == 2


def ended_jobs(trials: dict[str, str] | None = None) -> list[dict]:
    """Ended jobs as squeue --json of Slurm 22.05 lists them (golden/, from the testbed), their
    trials renamed by `trials`."""
    jobs = json.loads((Path(__file__).parents[2] / "golden" / "squeue-22.05-ended.json").read_text())["jobs"]
    for job in jobs:
        _, name, rest = job["comment"].split("/", 2)
        job["comment"] = f"stratctl:s/{(trials or {}).get(name, name)}/{rest}"
    return jobs


def test_squeue_22_05_gives_a_wait_status_an_exit_code_and_a_signal_are_read_from_it():
    seen = latest(ended_jobs(), "s", {})
    assert {t: (a.state, a.exit_code, a.reason) for t, a in seen.items()} == {
        "exit3": (TrialState.FAILED, 3, "NonZeroExitCode"),  # exit_code 768 = 3 << 8
        "sig9": (TrialState.FAILED, None, "signal 9 (SIGKILL)"),  # the batch script killed: 9
        "tasksig9": (TrialState.FAILED, None, "signal 9 (SIGKILL)"),  # srun's 137 << 8, derived_exit_code 9
        "cancelled": (TrialState.FAILED, None, "signal 15 (SIGTERM)"),
    }  # scancel
    assert (exit_of(768), exit_of(9), exit_of(35072), exit_of(0), exit_of(None)) == (
        (3, None),
        (None, 9),
        (137, None),
        (0, None),
        (None, None),
    )
    # later Slurm writes an object (data_parser 0.0.39+): read the same way
    exited = {
        "status": "EXITED",
        "return_code": {"set": True, "infinite": False, "number": 3},
        "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""},
    }
    killed = {
        "status": "SIGNALED",
        "return_code": {"set": True, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"},
    }
    assert (exit_of(exited), exit_of(killed)) == ((3, None), (None, 9))
    # a script that exits 137 itself (no step killed) exited 137
    assert ending({"exit_code": 137 << 8, "derived_exit_code": 0}) == (137, "")


class Ended:
    """A Slurm scheduler as `status` asks it, its attempts from the golden squeue jobs."""

    where, queue = "slurm:research", "research"

    def __init__(self, jobs):
        self.jobs = jobs

    def attempts(self, marks=True):
        return latest(self.jobs, "s", {})

    def result(self, trial):
        return None


def test_status_of_a_task_that_exited_3_says_exit_3_and_of_one_killed_says_its_signal(tmp_path):
    study = load(
        tmp_path,
        "name: s\nbackend: slurm\nretries: {max_failures: 0}\n"
        "space: {seed: {type: int, low: 0, high: 3, grid: true}}\nstrategy: {kind: grid}\n"
        "trial: {command: [train], resources: {limits: {nvidia.com/gpu: 1}}}\n",
    )
    trials = expand(study)
    names = dict(zip(("exit3", "sig9", "tasksig9", "cancelled"), (t.name for t in trials)))
    rows = {r.trial: r for r in snapshot(study, Ended(ended_jobs(names)), now=2e9).trials}
    assert [why(rows[names[k]]) for k in names] == [
        "exit 3",
        "signal 9 (SIGKILL)",
        "signal 9 (SIGKILL)",
        "signal 15 (SIGTERM)",
    ]
    assert rows[names["exit3"]].exit_code == 3 and rows[names["sig9"]].exit_code is None


def test_status_names_the_live_driver_of_a_study_from_its_mark_in_the_study_directory(tmp_path):
    from stratctl.backends.batch.driverfile import FileStore
    from stratctl.backends.batch.scheduler import study_directory
    from stratctl.run.driver import Mark as DriverMark

    study = load(
        tmp_path,
        "name: s\nbackend: slurm\nspace: {seed: {type: int, low: 0, high: 1, grid: true}}\nstrategy: {kind: grid}\n"
        "trial: {command: [train], resources: {limits: {nvidia.com/gpu: 1}}}\n",
    )
    assert snapshot(study, Ended([]), now=2e9).studies[0].driver == ""  # no mark: nobody drives it
    directory = study_directory(study)
    directory.mkdir(parents=True, exist_ok=True)
    FileStore(directory).write(DriverMark("slurm job 42 on sn2", 2e9 - 60, 2e9 - 5, 30.0), "")
    [row] = snapshot(study, Ended([]), now=2e9).studies
    assert row.driver.startswith("slurm job 42 on sn2 since ")
    assert snapshot(study, Ended([]), now=2e9 + 60).studies[0].driver == ""  # its mark expired


def test_status_shows_the_partition_each_trial_started_in_of_the_studys_list(tmp_path):
    """Queue fallback on Slurm: squeue lists a pending job of `--partition=edge,research`
    in both, a started one in the partition it runs in; `status` says which."""
    study = load(
        tmp_path,
        "name: s\nbackend: slurm\nqueue: [edge, research]\n"
        "space: {seed: {type: int, low: 0, high: 1, grid: true}}\nstrategy: {kind: grid}\n"
        "trial: {command: [train], resources: {limits: {nvidia.com/gpu: 1}}}\n",
    )
    first, second = (t.name for t in expand(study))
    jobs = [
        {"job_id": 7, "comment": f"stratctl:s/{first}/0/h", "job_state": "RUNNING", "partition": "research"},
        {"job_id": 8, "comment": f"stratctl:s/{second}/0/h", "job_state": "PENDING", "partition": "edge,research"},
    ]
    rows = {r.trial: r for r in snapshot(study, Ended(jobs), now=2e9).trials}
    assert (rows[first].queue, rows[second].queue) == ("research", "edge,research")
