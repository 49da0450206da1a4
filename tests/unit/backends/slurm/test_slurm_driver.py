"""`submit --in-cluster` on Slurm (backends/slurm/driver.py): the driver job's sbatch script,
the wait until that job holds the study's mark, a driver job sent again, one that ends or
cannot start; its identity in the mark and the dead-check the batch loop asks; `delete`
cancelling it; YARN refusing --in-cluster by name."""

from __future__ import annotations

import re
import sys

import pytest

from stratctl.backends.batch import delete as attemptdelete
from stratctl.backends.batch.driverfile import FileStore
from stratctl.backends.slurm.commands import Slurm
from stratctl.backends.slurm.driver import holder_gone, script, send
from stratctl.backends.slurm.scheduler import SlurmScheduler
from stratctl.errors import ClusterError, ExitCode, Unavailable
from stratctl.run.driver import Mark, identity
from tests.unit.backends.fakes import FakeSlurm
from tests.unit.cli.test_cli import run
from tests.unit.studies import load, write

STUDY = """\
name: sweep
backend: slurm
slurm: {partition: research, account: ml, qos: normal, constraint: a100, time_limit: 10m}
space:
  seed: {type: int, low: 0, high: 11, grid: true}
strategy: {kind: grid}
trial:
  command: ["python", "train.py", "--seed={{ params.seed }}"]
  resources: {limits: {nvidia.com/gpu: 1}}
"""
FLAGS = ["--poll-interval", "0.5", "--workers", "16", "--timeout", "45m", "--move-waiting"]


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def expected_script(tmp_path, options: list[str]) -> str:
    return "\n".join(
        [
            "#!/bin/bash",
            "# The driver of study sweep (`stratctl submit --in-cluster`): its submit loop.",
            *(f"#SBATCH {o}" for o in options),
            "export PYTHONUNBUFFERED=1",
            'echo "stratctl driver: slurm job $SLURM_JOB_ID on $SLURMD_NODENAME, restart ${SLURM_RESTART_COUNT:-0}, '
            '$(date -u +%FT%TZ)"',
            f"exec /opt/venv/bin/python -m stratctl submit {tmp_path}/study.yaml --take-over --poll-interval 0.5 "
            "--workers 16 --timeout 45m --move-waiting",
            "",
        ]
    )


def test_the_driver_is_one_cpu_requeued_with_the_timeout_as_its_limit_where_the_studys_jobs_go(tmp_path):
    study = load(tmp_path, STUDY)
    made = script(study, "/opt/venv/bin/python", FLAGS, 45 * 60, tmp_path / "stratctl-out" / "sweep")
    options = [
        "--job-name=stratctl-driver-sweep",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--requeue",
        f"--output={tmp_path}/stratctl-out/sweep/.driver/driver-%j.log",
        "--open-mode=append",
        "--time=46",  # the loop's --timeout, and a minute to end by itself before Slurm ends it
        "--partition=research",  # where the study's attempts go, on its account and QOS (not its GPU constraint)
        "--account=ml",
        "--qos=normal",
    ]
    assert list(made.options) == options
    assert made.text == expected_script(tmp_path, options)
    # no --timeout: the partition's default time limit
    assert not any(o.startswith("--time") for o in script(study, "py", [], None, tmp_path).options)


def test_a_parameter_of_the_command_stays_one_word(tmp_path):
    study = load(tmp_path, STUDY)
    made = script(study, "/opt/my venv/bin/python", ["--storage", "x; rm -rf ~"], None, tmp_path)
    assert made.text.splitlines()[-1] == (
        f"exec '/opt/my venv/bin/python' -m stratctl submit {tmp_path}/study.yaml --take-over --storage 'x; rm -rf ~'"
    )


def starts(fake: FakeSlurm, directory, node: str, clock: Clock):
    """A sleep during which the driver job starts on `node` and takes the study's mark."""

    def sleep(seconds):
        clock.now += seconds
        job = fake.jobs[-1]
        if job["job_state"] == "PENDING":
            job.update(job_state="RUNNING", state_reason="None", nodes=node)
            store = FileStore(directory)
            store.write(Mark(f"slurm job {job['job_id']} on {node}", clock(), clock(), 30.0), store.read()[1])

    return sleep


def test_send_sbatches_the_script_into_the_study_directory_and_returns_once_the_job_holds_the_study(tmp_path):
    study = load(tmp_path, STUDY)
    fake, clock = FakeSlurm(), Clock()
    directory = tmp_path / "stratctl-out" / "sweep"
    driven = send(
        Slurm(run=fake), study, FLAGS, 45 * 60, "/opt/venv/bin/python", clock, starts(fake, directory, "sn2", clock)
    )
    sbatch = [argv for argv in fake.commands if argv[0] == "sbatch"]
    assert sbatch == [["sbatch", "--parsable"]] and fake.sent == ["stratctl-driver-sweep"]
    assert fake.scripts[0] == (directory / ".driver" / "driver.sh").read_text()
    assert "#SBATCH --requeue" in fake.scripts[0] and "--take-over" in fake.scripts[0]
    assert (driven.job, driven.node, driven.kept) == (1, "sn2", False)
    assert driven.log == f"{directory}/.driver/driver-1.log"
    assert driven.line("sweep") == (
        "study sweep is driven by slurm job 1 on node sn2; `stratctl status sweep` follows it, "
        "`stratctl logs sweep --driver` shows its output"
    )


def test_the_same_study_sent_while_its_driver_job_runs_submits_no_second_job(tmp_path):
    study = load(tmp_path, STUDY)
    fake, clock = FakeSlurm(), Clock()
    directory = tmp_path / "stratctl-out" / "sweep"
    send(Slurm(run=fake), study, FLAGS, None, "py", clock, starts(fake, directory, "sn2", clock))
    again = send(Slurm(run=fake), study, FLAGS, None, "py", clock, starts(fake, directory, "sn2", clock))
    assert fake.sent == ["stratctl-driver-sweep"]  # one sbatch in all
    assert again.kept and again.line("sweep").startswith("study sweep is already driven by slurm job 1 on node sn2;")


def test_the_mark_of_a_killed_run_is_not_taken_for_the_job_slurm_starts_again(tmp_path):
    """Killed and requeued: the job is pending, its old run's mark still live. The command waits
    for the job to run again (here on another node) and hold the study itself."""
    study = load(tmp_path, STUDY)
    fake, clock = FakeSlurm(), Clock()
    directory = tmp_path / "stratctl-out" / "sweep"
    send(Slurm(run=fake), study, FLAGS, None, "py", clock, starts(fake, directory, "sn1", clock))
    fake.jobs[0].update(job_state="PENDING", state_reason="BeginTime", nodes="", restart_cnt=1)
    again = send(Slurm(run=fake), study, FLAGS, None, "py", clock, starts(fake, directory, "sn3", clock))
    assert (again.job, again.node, again.kept) == (1, "sn3", True)


def test_a_driver_job_that_ends_before_it_holds_the_study_fails_the_command_with_its_state_and_log(tmp_path):
    study = load(tmp_path, STUDY)
    fake, clock = FakeSlurm(), Clock()
    log = tmp_path / "stratctl-out" / "sweep" / ".driver" / "driver-1.log"

    def sleep(seconds):
        clock.now += seconds
        fake.jobs[0].update(job_state="FAILED", state_reason="NonZeroExitCode")
        log.write_text("stratctl driver: slurm job 1 on sn1\n/opt/venv/bin/python: No module named stratctl\n")

    with pytest.raises(ClusterError) as failed:
        send(Slurm(run=fake), study, FLAGS, None, "/opt/venv/bin/python", clock, sleep)
    assert str(failed.value) == (
        "slurm job 1, the driver of study sweep, ended FAILED (NonZeroExitCode) before it drove it; its log "
        f"{log} ends: stratctl driver: slurm job 1 on sn1 | /opt/venv/bin/python: No module named stratctl"
    )


def test_a_driver_job_that_cannot_start_is_cancelled_and_said(tmp_path):
    study = load(tmp_path, STUDY)
    fake, clock = FakeSlurm(), Clock()

    def sleep(seconds):
        clock.now += seconds
        fake.jobs[0].update(state_reason="PartitionTimeLimit")

    with pytest.raises(ClusterError, match=r"slurm job 1, the driver of study sweep, cannot start: PartitionTimeLimit"):
        send(Slurm(run=fake), study, FLAGS, 10 * 86400, "py", clock, sleep)
    assert fake.jobs[0]["job_state"] == "CANCELLED" and ["scancel", "1"] in fake.commands


def test_a_driver_job_still_queued_after_two_minutes_is_left_to_start_and_said(tmp_path):
    study = load(tmp_path, STUDY)
    fake, clock = FakeSlurm(), Clock()

    def sleep(seconds):
        clock.now += seconds
        fake.jobs[0].update(state_reason="Resources")

    with pytest.raises(ClusterError) as late:
        send(Slurm(run=fake), study, FLAGS, None, "py", clock, sleep)
    assert str(late.value) == (
        "the driver of study sweep (slurm job 1) did not take it within 120 s: it is PENDING (Resources); it drives "
        "the study once it runs (`squeue -j 1`), `scancel 1` withdraws it"
    )
    assert fake.jobs[0]["job_state"] == "PENDING"


def test_a_driver_in_a_slurm_job_names_its_job_and_node():
    assert identity({"SLURM_JOB_ID": "812", "SLURMD_NODENAME": "gpu-3"}) == "slurm job 812 on gpu-3"
    both = {"STRATCTL_DRIVER_POD": "d-x", "STRATCTL_DRIVER_NODE": "n", "SLURM_JOB_ID": "1", "SLURMD_NODENAME": "s"}
    assert identity(both) == "pod d-x on n"  # a pod first
    assert re.fullmatch(r".+ pid \d+", identity({"SLURM_JOB_ID": "812"}))  # not in a job's step: its host


def test_a_driver_job_that_is_gone_or_not_running_where_its_mark_says_is_dead():
    fake = FakeSlurm()
    fake.jobs = [
        {"job_id": 7, "name": "stratctl-driver-s", "job_state": "RUNNING", "state_reason": "None", "nodes": "sn1"},
        {"job_id": 8, "name": "stratctl-driver-s", "job_state": "PENDING", "state_reason": "BeginTime"},
        {"job_id": 9, "name": "stratctl-driver-s", "job_state": "CANCELLED", "state_reason": "None", "nodes": "sn1"},
    ]
    slurm = Slurm(run=fake)
    assert not holder_gone(slurm, "slurm job 7 on sn1")
    assert holder_gone(slurm, "slurm job 7 on sn2")  # started again elsewhere: that run is over
    assert holder_gone(slurm, "slurm job 8 on sn1")  # requeued, waiting to start again
    assert holder_gone(slurm, "slurm job 9 on sn1") and holder_gone(slurm, "slurm job 10 on sn1")  # ended, forgotten
    assert not holder_gone(slurm, "elsewhere pid 1")  # not a job: the host rule

    def silent(argv, **_):
        raise Unavailable("squeue: Socket timed out")

    assert not holder_gone(Slurm(run=lambda argv, **kw: silent(argv)), "slurm job 7 on sn1")  # alive until it expires


def test_the_batch_loop_asks_the_slurm_scheduler_whether_a_holder_is_dead(tmp_path):
    study = load(tmp_path, STUDY)
    fake = FakeSlurm()
    fake.jobs = [{"job_id": 7, "name": "x", "job_state": "CANCELLED", "state_reason": "None"}]
    assert SlurmScheduler(study, slurm=Slurm(run=fake)).driver_gone("slurm job 7 on sn1")


def test_delete_cancels_the_driver_job_first_and_its_loop_is_no_reason_to_refuse(tmp_path):
    study = load(tmp_path, STUDY)
    fake, clock = FakeSlurm(), Clock()
    directory = tmp_path / "stratctl-out" / "sweep"
    send(Slurm(run=fake), study, FLAGS, None, "py", clock, starts(fake, directory, "sn2", clock))
    scheduler = SlurmScheduler(study, slurm=Slurm(run=fake))
    loop = {"at": clock(), "running": True, "host": "sn2", "pid": 4}
    assert scheduler.driver() == 1
    assert attemptdelete.check(study, loop, clock(), False, True, False, scheduler.driver()) is False
    removal = attemptdelete.delete(study, scheduler)
    assert removal.drivers == [1] and fake.jobs[0]["job_state"] == "CANCELLED"
    assert scheduler.driver() is None and not directory.exists()


def test_yarn_refuses_in_cluster_by_name_before_anything_is_sent(tmp_path, monkeypatch):
    from tests.unit.core.test_capabilities import YARN

    monkeypatch.chdir(tmp_path)
    result = run("submit", str(write(tmp_path, YARN)), "--in-cluster")
    assert result.exit_code == ExitCode.INVALID_INPUT == 2
    assert result.stderr == (
        "error: --in-cluster: backend yarn does not support this option (YARN runs a long-lived process only as an "
        "application with an application master of its own, and the submit loop is none: run submit on a machine "
        "that stays up); nothing was submitted\n"
    )


def test_python_is_the_one_running_this(tmp_path):
    """The driver runs the python that ran the command, by its absolute path (a shared filesystem)."""
    import inspect

    assert inspect.signature(send).parameters["python"].default == sys.executable


def test_the_driver_of_a_study_listing_partitions_may_start_in_any_of_them(tmp_path):
    study = load(tmp_path, STUDY.replace("slurm: {partition: research,", "queue: [edge, research]\nslurm: {"))
    made = script(study, "py", [], None, tmp_path)
    assert [o for o in made.options if o.startswith("--partition")] == ["--partition=edge,research"]
