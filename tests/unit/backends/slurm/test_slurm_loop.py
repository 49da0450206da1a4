"""The shared submit loop over Slurm's own commands (faked at the process boundary:
tests/unit/backends/fakes.py), on a virtual clock, where Slurm is its own: the summary in
Slurm's words (its commands, a lookup by `squeue --name` before each resend), each trial's
job of its own size. What every backend does for the loop is the contract suite's
(tests/unit/backends/test_scheduler_contract.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from stratctl.backends.batch.loop import AttemptLoop
from stratctl.backends.slurm.commands import Slurm
from stratctl.backends.slurm.scheduler import SlurmScheduler
from stratctl.core.space import expand
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import StaticPolicy
from stratctl.run.throttle import Throttle
from stratctl.view.display import summary
from tests.unit.backends.fakes import FakeSlurm
from tests.unit.fakes import FakeClock, MaxRng, one_cycle
from tests.unit.rendering import Renderer
from tests.unit.studies import load

STUDY = """\
name: s
backend: slurm
retries: {max_failures: 1}
space:
  seed: {type: int, low: 0, high: 1, grid: true}
strategy: {kind: grid}
trial:
  command: ["train"]
  resources: {limits: {nvidia.com/gpu: 1}}
"""


def loop(tmp_path, fake):
    study = load(tmp_path, STUDY)
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    scheduler = SlurmScheduler(study, Renderer(study), Slurm(run=fake), workdir=str(tmp_path))
    return AttemptLoop(
        study,
        expand(study),
        scheduler,
        throttle,
        SubmitOptions(poll_interval=1, workers=1),
        policy=StaticPolicy(4),
        clock=clock,
        sleep=clock.sleep,
    ), clock


def test_the_summary_counts_slurms_commands_past_a_lost_answer_and_a_timeout(tmp_path):
    fake = FakeSlurm(["lost", "timeout"])  # the first submit went through, its answer lost; then a refusal
    run, clock = loop(tmp_path, fake)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
    names = sorted({j["name"] for j in fake.jobs})
    assert len(fake.jobs) == 2 and len(names) == 2  # one job per trial
    assert len(fake.sent) == 3  # the lost one sent once, looked up on the retry; the refused one sent again
    assert clock() > 0  # the retries waited (backoff), on the virtual clock
    assert run.progress.created == 2
    text = summary(run.progress)  # in Slurm's words: its commands, not API writes and 429s
    assert "created 2, already there 0; 3 sbatch, 0 refused for submit limits" in text and "429" not in text
    assert "Slurm commands: squeue 3, sbatch 3, sinfo 1" in text  # one list and a lookup before each resend


def test_trials_of_different_sizes_each_get_their_own_job_and_gpu_count(tmp_path):
    """`replicas` (and GPUs) may be templates over the trial's values: each trial's job has
    its own number of tasks, capacity is counted in the largest trial's gang, and status
    counts each trial's own GPUs."""
    from stratctl.backends.batch.status import snapshot

    study = load(
        tmp_path,
        STUDY.replace("seed: {type: int, low: 0, high: 1, grid: true}", "n: {type: choice, values: [2, 3]}")
        + '  tasks: [{name: worker, replicas: "{{ params.n }}"}]\n',
    )
    fake = FakeSlurm()
    clock = FakeClock()
    scheduler = SlurmScheduler(study, Renderer(study), Slurm(run=fake), workdir=str(tmp_path))
    run = AttemptLoop(
        study,
        expand(study),
        scheduler,
        Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep),
        SubmitOptions(poll_interval=1, workers=1),
        policy=StaticPolicy(4),
        clock=clock,
        sleep=clock.sleep,
    )
    assert run.gang == [1, 1, 1]
    with ThreadPoolExecutor(1) as pool:
        one_cycle(run, pool)
    assert sorted(line for text in fake.scripts for line in text.splitlines() if "--ntasks=" in line) == [
        "#SBATCH --ntasks=2",
        "#SBATCH --ntasks=3",
    ]
    for job in fake.jobs:
        job.update(job_state="RUNNING", start_time=100, end_time=0)
    rows = {r.params["n"]: r for r in snapshot(study, scheduler, now=110).trials}
    assert (rows[2].gpu_seconds, rows[3].gpu_seconds) == (20, 30)
