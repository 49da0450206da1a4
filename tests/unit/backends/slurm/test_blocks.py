"""Merged submissions on Slurm (core/merging.py, backends/batch/blocks.py): a block of first attempts
as one job array, read back trial by trial, its throttle following the target; faked at
the process boundary (tests/unit/backends/fakes.py), on a virtual clock."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from stratctl.backends.batch.loop import AttemptLoop
from stratctl.backends.slurm.blocks import QUEUED, read_blocks, task_ids
from stratctl.backends.slurm.commands import Slurm
from stratctl.backends.slurm.scheduler import SlurmScheduler
from stratctl.backends.slurm.state import latest
from stratctl.core.merging import merging
from stratctl.core.space import expand
from stratctl.errors import Invalid
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import StaticPolicy
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState
from tests.unit.backends.fakes import FakeSlurm, slurm_nodes, start_task
from tests.unit.fakes import FakeClock, MaxRng, one_cycle
from tests.unit.rendering import Renderer
from tests.unit.studies import load

STUDY = """\
name: s
backend: slurm
merge: auto
slurm: {partition: research}
space:
  seed: {type: int, low: 0, high: 5, grid: true}
strategy: {kind: grid}
trial:
  command: ["train", "--seed={{ params.seed }}"]
  resources: {limits: {nvidia.com/gpu: 1}}
"""


def test_task_ids_of_an_arrays_pending_remainder():
    assert task_ids("4-7%4") == [4, 5, 6, 7]
    assert task_ids("3,17-19%16") == [3, 17, 18, 19]
    assert task_ids("5") == [5]
    assert task_ids("") == []


def test_merge_auto_merges_a_sweep_of_one_process_trials_on_slurm_and_says_why_not_elsewhere(tmp_path):
    study = load(tmp_path, STUDY)
    assert merging(study).merged and merging(study).block == 1000
    gang = load(tmp_path, STUDY.replace("resources: {limits: {nvidia.com/gpu: 1}}", "tasks: [{name: w, replicas: 2}]"))
    assert not merging(gang).merged and "several processes" in merging(gang).why
    yarn = load(
        tmp_path, STUDY.replace("backend: slurm", "backend: yarn").replace("slurm: {partition: research}\n", "")
    )
    assert not merging(yarn).merged and "YARN has no job arrays" in merging(yarn).why
    off = load(tmp_path, STUDY.replace("merge: auto", "merge: off"))
    assert not merging(off).merged


def test_a_blocks_tasks_are_read_back_as_their_trials_started_pending_or_queued():
    blocks = {"block-1": [f"t{i}" for i in range(6)]}
    comment = "stratctl:s/@block-1/0/h"
    jobs = [
        # task 0 runs (its own job id), task 1 was held and released: split off, held back by the throttle
        {"job_id": 901, "array_job_id": 900, "array_task_id": 0, "comment": comment, "job_state": "RUNNING"},
        {
            "job_id": 902,
            "array_job_id": 900,
            "array_task_id": 1,
            "comment": comment,
            "job_state": "PENDING",
            "state_reason": "JobArrayTaskLimit",
        },
        # the remainder: throttle 3, one running, so two may run (waiting for GPUs), the others queued
        {
            "job_id": 900,
            "array_job_id": 900,
            "array_task_string": "2-5%3",
            "array_max_tasks": 3,
            "comment": comment,
            "job_state": "PENDING",
            "state_reason": "Resources",
        },
        {"job_id": 7, "comment": "stratctl:other/@block-1/0/h", "job_state": "RUNNING"},  # another study's
    ]
    seen = latest(jobs, "s", {}, blocks)
    assert {n: (a.state, a.job, a.queued) for n, a in seen.items()} == {
        "t0": (TrialState.RUNNING, "900_0", False),
        "t1": (TrialState.PENDING, "900_1", True),
        "t2": (TrialState.PENDING, "900_2", False),
        "t3": (TrialState.PENDING, "900_3", False),
        "t4": (TrialState.PENDING, "900_4", True),
        "t5": (TrialState.PENDING, "900_5", True),
    }
    assert seen["t2"].waits_for_capacity and not seen["t4"].waits_for_capacity
    assert seen["t4"].reason == seen["t1"].reason == QUEUED
    assert all(a.block == "block-1" for a in seen.values())


def test_a_blocks_task_file_and_log_beside_its_list_are_no_blocks(tmp_path):
    blocks = tmp_path / ".blocks"
    blocks.mkdir()
    (blocks / "block-1").write_text("t0\nt1\n")
    (blocks / "block-1.tasks").write_text("t0\t0\ttrain\nt1\t0\ttrain\n")
    (blocks / "block-1.log").write_text("slurmstepd: error: *** JOB 901 CANCELLED ***\n")
    assert read_blocks(tmp_path) == {"block-1": ["t0", "t1"]}


def test_a_block_without_its_file_is_no_trial_of_the_study():
    jobs = [{"job_id": 901, "array_job_id": 900, "array_task_id": 0, "comment": "stratctl:s/@block-9/0/h"}]
    assert latest(jobs, "s", {}, {}) == {}


def loop(tmp_path, fake, policy, text=STUDY, detach=True):
    study = load(tmp_path, text)
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    scheduler = SlurmScheduler(study, Renderer(study), Slurm(run=fake), workdir=str(tmp_path))
    run = AttemptLoop(
        study,
        expand(study),
        scheduler,
        throttle,
        SubmitOptions(poll_interval=1, workers=1, detach=detach),
        policy=policy,
        clock=clock,
        sleep=clock.sleep,
    )
    return run, scheduler


def test_first_attempts_go_as_one_array_exactly_once_and_its_throttle_follows_the_target(tmp_path):
    fake = FakeSlurm(["lost"])  # the block went through, its answer lost: looked up, not sent again
    run, scheduler = loop(tmp_path, fake, StaticPolicy(2))
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
        assert fake.sent == ["s-block-1"] and len(fake.jobs) == 1
        script = fake.scripts[0]
        assert "#SBATCH --array=0-5%2" in script and "#SBATCH --partition=research" in script
        assert "#SBATCH --job-name=s-block-1" in script and "#SBATCH --comment=stratctl:s/@block-1/0/" in script
        listed = (scheduler.output / ".blocks" / "block-1").read_text().split()
        assert listed == [t.name for t in expand(run.study)]  # the block's trials, in task order
        lines = (scheduler.output / ".blocks" / "block-1.tasks").read_text().splitlines()
        assert [line.split("\t")[0] for line in lines] == listed  # what each task runs: one file, a line each
        assert not [p for p in scheduler.output.iterdir() if p.name != ".blocks"]  # no script per trial
        assert run.progress.created == 6 and run.progress.pending == 2 and run.progress.queued == 4
        start_task(fake, 1, 0)
        one_cycle(run, pool)  # the same target: the throttle is not written again
        assert not [a for a in fake.commands if a[:2] == ["scontrol", "update"]]
        run.policy = StaticPolicy(4)
        one_cycle(run, pool)
        one_cycle(run, pool)
    updates = [a for a in fake.commands if a[:2] == ["scontrol", "update"]]
    assert updates == [["scontrol", "update", "JobId=1", "ArrayTaskThrottle=4"]]  # once, as the target moved
    assert fake.sent == ["s-block-1"]  # still the one sbatch
    states = run.states
    assert states[listed[0]] is TrialState.RUNNING and run.progress.queued == 2  # 4 at once, one running


@pytest.mark.parametrize(
    ("stderr", "ok"),
    [
        ("scontrol: error: 697_0-3: Job has already finished\n697_4-19: No error\n", True),
        ("scontrol: error: Invalid job id specified\n", False),
    ],
)
def test_changing_a_throttle_is_done_when_some_tasks_ended_already(stderr, ok):
    def run(argv, **_):
        return subprocess.CompletedProcess(argv, 1, "", stderr)

    slurm = Slurm(run=run)
    if ok:
        slurm.throttle(697, 8)
    else:
        with pytest.raises(Invalid, match="Invalid job id"):
            slurm.throttle(697, 8)


def test_a_block_whose_send_failed_is_sent_again_under_its_own_name_never_as_a_second_block(tmp_path):
    fake = FakeSlurm(["timeout"] * 20)  # the controller does not answer this cycle
    run, scheduler = loop(tmp_path, fake, StaticPolicy(2))
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
        assert run.progress.created == 0 and fake.jobs == []
        fake.sbatch_answers = []
        one_cycle(run, pool)
    assert set(fake.sent) == {"s-block-1"} and len(fake.jobs) == 1  # the same block, once in the end
    assert sorted(p.name for p in (scheduler.output / ".blocks").iterdir()) == ["block-1", "block-1.tasks"]
    assert run.progress.created == 6


def test_a_sites_smaller_max_array_size_makes_smaller_blocks_the_next_one_once_the_first_holds_none_back(tmp_path):
    fake = FakeSlurm(max_array=4)  # task ids 0-3: four trials a block
    run, scheduler = loop(tmp_path, fake, StaticPolicy(2))
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
        assert fake.sent == ["s-block-1"] and "#SBATCH --array=0-3%2" in fake.scripts[0]
        start_task(fake, 1, 0)
        start_task(fake, 1, 1)
        one_cycle(run, pool)  # block-1 still holds two trials back: no second block yet
        assert fake.sent == ["s-block-1"]
        start_task(fake, 1, 2)
        start_task(fake, 1, 3)
        for task in fake.jobs[1:]:
            task.update(job_state="COMPLETED")
        one_cycle(run, pool)
    assert fake.sent == ["s-block-1", "s-block-2"] and "#SBATCH --array=0-1%2" in fake.scripts[1]
    assert [c[:3] for c in fake.commands].count(["scontrol", "show", "config"]) == 1  # read once


@pytest.mark.parametrize(("free", "throttle"), [([4, 4, 4, 4], 16), ([1, 1, 0, 0], 4)])
def test_a_block_sent_to_an_idle_cluster_runs_as_many_trials_as_its_free_gpus_hold_at_once(tmp_path, free, throttle):
    # the adaptive policy's first target from sinfo's free GPUs (run/policy.py start_free):
    # all 16 tasks start at Slurm's first pass, not 4 and then 8 and 16 a pass or more apart;
    # `initial` (4) is the floor when fewer are free
    fake = FakeSlurm(nodes=slurm_nodes(free))
    run, _ = loop(tmp_path, fake, None, STUDY.replace("high: 5", "high: 47"), detach=False)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
        assert fake.sent == ["s-block-1"] and f"#SBATCH --array=0-47%{throttle}" in fake.scripts[0]
        assert run.progress.target == throttle and run.progress.queued == 48 - throttle
        for index in range(throttle):  # Slurm's pass starts them: the GPUs they took are no longer free
            start_task(fake, 1, index)
        fake.nodes = slurm_nodes([0, 0, 0, 0])
        one_cycle(run, pool)
    assert not [a for a in fake.commands if a[:2] == ["scontrol", "update"]]  # the throttle stays as sent
    assert run.progress.running == throttle and run.progress.target == throttle


def test_trials_that_end_between_a_cycles_two_reads_are_not_taken_for_room_to_grow(tmp_path):
    # a wave of 16 tasks ends between the cycle's two reads, before Slurm's next pass starts
    # the 16 the throttle now lets in: their GPUs must not also count as room to grow (read
    # after the listing, they did: on the testbed the target went 16 -> 30, the tasks it let
    # in waited for GPUs, and the congestion rule then halved it for a 10 s cooldown)
    fake = FakeSlurm(nodes=slurm_nodes([4, 4, 4, 4]))
    between: list[bool] = []

    def slurm(argv, **kw):
        done = fake(argv, **kw)
        if between and argv[:2] in (["sinfo", "--json"], ["squeue", "--json"]):
            between.clear()
            for task in fake.jobs[1:]:
                task.update(job_state="COMPLETED", state_reason="None", exit_code=0)
            fake.nodes = slurm_nodes([4, 4, 4, 4])
        return done

    run, _ = loop(tmp_path, slurm, None, STUDY.replace("high: 5", "high: 47"), detach=False)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
        for index in range(16):
            start_task(fake, 1, index)
        fake.nodes = slurm_nodes([0, 0, 0, 0])
        run.pause()  # the poll interval (1 s, virtual): the target may take its next step
        one_cycle(run, pool)
        run.pause()
        between.append(True)
        one_cycle(run, pool)
    assert run.progress.target == 16 and not [a for a in fake.commands if a[:2] == ["scontrol", "update"]]
    assert run.progress.succeeded == 16 and run.progress.pending == 16  # the next 16, let in by the throttle


def test_a_block_of_a_study_listing_partitions_asks_for_all_of_them(tmp_path):
    """Merged first attempts go to the study's partitions as its single jobs do: one
    `--partition=edge,research` on the job array."""
    fake = FakeSlurm()
    text = STUDY.replace("slurm: {partition: research}", "queue: [edge, research]")
    run, _ = loop(tmp_path, fake, StaticPolicy(2), text=text)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
    [script] = fake.scripts
    assert [line for line in script.splitlines() if "--partition" in line] == ["#SBATCH --partition=edge,research"]
