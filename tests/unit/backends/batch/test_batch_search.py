"""A closed-loop search on a batch scheduler (backends/batch/search.py), over Slurm's commands
faked at the process boundary (tests/unit/backends/fakes.py) on a virtual clock: trials are
asked as they are admitted and journalled before they are sent, ended ones are told with
their results, a loop killed mid-search and run again asks no trial twice and keeps the
budget, the pruner stops a trial by its reports and `status` shows it pruned."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from stratctl.backends.batch.loop import AttemptLoop
from stratctl.backends.batch.search import ASKED, TOLD, Journal
from stratctl.backends.batch.status import snapshot
from stratctl.backends.slurm.commands import Slurm
from stratctl.backends.slurm.scheduler import SlurmScheduler, output_of
from stratctl.core.space import expand
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
space:
  x: {type: uniform, low: -5.0, high: 5.0}
strategy: {kind: tpe, trials: 6, seed: 3}
objective: {metric: loss, direction: minimize}
trial:
  command: ["train"]
  resources: {limits: {nvidia.com/gpu: 1}}
"""


def make(tmp_path, fake, study_text=STUDY, cap=2):
    study = load(tmp_path, study_text)
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    scheduler = SlurmScheduler(study, Renderer(study), Slurm(run=fake), workdir=str(tmp_path))
    loop = AttemptLoop(
        study,
        expand(study),
        scheduler,
        throttle,
        SubmitOptions(poll_interval=1, workers=1),
        policy=StaticPolicy(cap),
        clock=clock,
        sleep=clock.sleep,
    )
    return loop, scheduler


def finish(fake, scheduler, name, loss):
    """The trial's job ends, its result written where its script writes it."""
    job = next(j for j in fake.jobs if trial_of(j) == name)
    job.update(job_state="COMPLETED", state_reason="None", exit_code=0)
    (scheduler.output / name).mkdir(parents=True, exist_ok=True)
    (scheduler.output / name / "result.json").write_text(json.dumps({"loss": loss}))


def trial_of(job):
    """The trial a job is an attempt of (its first attempt's name is the trial's)."""
    name = job["name"]
    return name.rsplit("-a", 1)[0] if name.rsplit("-", 1)[-1].startswith("a") and name.count("-") > 1 else name


def test_trials_are_asked_as_admitted_journalled_before_sent_and_told_with_their_results(tmp_path):
    fake = FakeSlurm()
    loop, scheduler = make(tmp_path, fake)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(loop, pool)
        assert len(fake.jobs) == 2  # the cap: two asked, two sent
        asked = Journal(output_of(loop.study)).asked()
        assert [t.name for t in asked] == loop.order == sorted({trial_of(j) for j in fake.jobs}, key=loop.order.index)
        assert loop.progress.total == 6 and loop.progress.waiting == 4
        study_row = snapshot(loop.study, scheduler).studies[0]  # the budget not asked yet waits: not done
        assert study_row.trials == 6 and study_row.states == {"pending": 2, "waiting": 4} and not study_row.done
        for job in fake.jobs:
            job.update(job_state="RUNNING", state_reason="None")
        finish(fake, scheduler, loop.order[0], 0.5)
        states = one_cycle(loop, pool)
        assert states[loop.order[0]] is TrialState.SUCCEEDED
        assert len(fake.jobs) == 3  # one ended, one more asked and sent
        told = Journal(output_of(loop.study)).told()
        assert told[loop.order[0]]["state"] == "complete" and told[loop.order[0]]["values"] == [0.5]
        while not loop.finished(loop.states):
            for job in fake.jobs:
                if job["job_state"] == "PENDING":
                    job.update(job_state="RUNNING", state_reason="None")
                elif job["job_state"] == "RUNNING":
                    finish(fake, scheduler, trial_of(job), 1.0)
            one_cycle(loop, pool)
    assert len(fake.jobs) == 6 and len({trial_of(j) for j in fake.jobs}) == 6
    assert loop.progress.succeeded == 6 and loop.progress.total == 6
    shot = snapshot(loop.study, scheduler)
    assert [r.trial for r in shot.trials] == loop.order and {r.state for r in shot.trials} == {"succeeded"}
    assert shot.studies[0].done and shot.studies[0].trials == 6


def test_a_loop_killed_after_asking_and_run_again_asks_no_trial_twice_and_keeps_the_budget(tmp_path):
    fake = FakeSlurm()
    loop, scheduler = make(tmp_path, fake, cap=1)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(loop, pool)
    loop.search.ask(1)  # asked and journalled; the loop is SIGKILLed before it sends it
    asked_first = list(loop.order)
    assert len(asked_first) == 2 and len(fake.jobs) == 1
    again, scheduler = make(tmp_path, fake, cap=6)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(again, pool)
        assert again.order[:2] == asked_first  # the unsent one is sent now, not asked again
        assert sorted(trial_of(j) for j in fake.jobs) == sorted(again.order)
        while not again.finished(again.states):
            for job in fake.jobs:
                if job["job_state"] in ("PENDING", "RUNNING"):
                    finish(fake, scheduler, trial_of(job), 1.0)
            one_cycle(again, pool)
    lines = (output_of(again.study) / ASKED).read_text().splitlines()
    names = [json.loads(line)["name"] for line in lines]
    assert len(names) == len(set(names)) == 6  # each trial asked once, the budget held
    assert len(fake.jobs) == 6 and len({trial_of(j) for j in fake.jobs}) == 6


def test_a_torn_last_line_of_the_journal_is_skipped(tmp_path):
    journal = Journal(tmp_path)
    (tmp_path / ASKED).write_text('{"index":0,"name":"s-a","params":{"x":1}}\n{"index":1,"na')
    (tmp_path / TOLD).write_text('{"trial":"s-a","state":"complete","values":[1.0]}\n{"trial":"s-b","st')
    assert [t.name for t in journal.asked()] == ["s-a"]
    assert journal.told() == {"s-a": {"state": "complete", "values": [1.0]}}


PRUNED = STUDY.replace(
    "trials: 6, seed: 3}", "trials: 4, seed: 3}\npruner: {kind: median, warmup_steps: 0, startup_trials: 1}"
)


def test_the_pruner_reads_the_reports_records_the_trial_pruned_then_cancels_its_job(tmp_path):
    fake = FakeSlurm()
    loop, scheduler = make(tmp_path, fake, PRUNED, cap=2)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(loop, pool)
        good, bad = loop.order
        for job in fake.jobs:
            job.update(job_state="RUNNING", state_reason="None")
        for name, losses in ((good, [0.1, 0.1, 0.1]), (bad, [9.0, 9.0, 9.0])):
            (scheduler.output / name).mkdir(parents=True, exist_ok=True)
            lines = [{"attempt": 0, "rank": 0, "step": s, "values": {"loss": v}} for s, v in enumerate(losses)]
            (scheduler.output / name / "report.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        finish(fake, scheduler, good, 0.1)  # the good one ends: the median is its
        states = one_cycle(loop, pool)
        assert states[bad] is TrialState.PRUNED
        assert ["scancel", str(next(j["job_id"] for j in fake.jobs if trial_of(j) == bad))] in fake.commands
        entry = Journal(output_of(loop.study)).told()[bad]
        assert entry["state"] == "pruned" and entry["value"] == 9.0 and entry["steps"][-1] == [2, 9.0]
        states = one_cycle(loop, pool)  # its job cancelled: pruned still, never resubmitted
        assert states[bad] is TrialState.PRUNED and loop.progress.pruned == 1
    assert sum(1 for j in fake.jobs if trial_of(j) == bad) == 1
    shot = snapshot(loop.study, scheduler)
    row = next(r for r in shot.trials if r.trial == bad)
    assert row.state == "pruned" and row.result == {"loss": 9.0, "step": 2}
    assert shot.studies[0].states["pruned"] == 1


def test_a_merged_search_sends_the_trials_asked_in_one_cycle_as_one_job_array(tmp_path):
    fake = FakeSlurm(nodes=slurm_nodes([4]))
    loop, scheduler = make(tmp_path, fake, STUDY.replace("name: s\n", "name: s\nmerge: auto\n"), cap=3)
    with ThreadPoolExecutor(1) as pool:
        one_cycle(loop, pool)
        assert len(fake.jobs) == 1 and fake.jobs[0]["array_task_string"] == "0-2%3"  # the 3 asked: one array
        tasks = [start_task(fake, 1, i) for i in range(3)]
        states = one_cycle(loop, pool)
        assert [states[n] for n in loop.order] == [TrialState.RUNNING] * 3
        for task, name in zip(tasks, loop.order, strict=True):
            task.update(job_state="COMPLETED", state_reason="None", exit_code=0)
            (scheduler.output / name).mkdir(parents=True, exist_ok=True)
            (scheduler.output / name / "result.json").write_text('{"loss": 1.0}')
        one_cycle(loop, pool)
        arrays = [j for j in fake.jobs if j.get("array_task_string", "").endswith("%3")]
        assert len(arrays) == 2 and arrays[1]["array_task_string"] == "0-2%3"  # the next 3 asked: the next array
        assert len(loop.order) == 6 and len(Journal(output_of(loop.study)).told()) == 3
