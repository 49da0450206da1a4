"""The `Scheduler` protocol's contract (backends/batch/scheduler.py), one suite run against each
backend's fake: Slurm over its faked commands, YARN over a faked ResourceManager's REST
API (the real client sends and counts the requests), and an in-memory scheduler that is
neither. What the shared loop, `status`, `drain` and `resume` rely on:

- attempts are listed by trial, each trial's latest; an ended one outlives its
  controller's memory (with marks), and a failure counts against the next attempt;
- prepare/create/find: a create whose answer was lost is found, so nothing is created
  twice; a refusal for a limit creates nothing and is counted;
- hold/stop/release, the drained flag, free GPUs, a trial's result, the counters;
- the submit loop over it reaches every trial exactly once, retries failures while they
  last, counts a preemption once and never as a failure, admits nothing while drained.

Where backends truly differ, the backend's parameters say how: a preemption is a requeue of
the same job (Slurm) or ends the attempt and the next one resumes (YARN); a released
attempt is the same job (Slurm) or the next attempt (YARN: it cannot hold, drain kills)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from stratctl.backends.batch import drain as attemptdrain
from stratctl.backends.batch.loop import AttemptLoop
from stratctl.backends.batch.status import snapshot
from stratctl.backends.slurm.commands import Slurm
from stratctl.backends.slurm.scheduler import SlurmScheduler
from stratctl.backends.slurm.script import parse_comment
from stratctl.backends.yarn.app import parse_tags
from stratctl.backends.yarn.rest import ResourceManager
from stratctl.backends.yarn.scheduler import YarnScheduler
from stratctl.core.space import expand
from stratctl.errors import Throttled, Unavailable
from stratctl.run.options import SubmitOptions
from stratctl.run.policy import StaticPolicy
from stratctl.run.throttle import Throttle
from stratctl.trialstate import TrialState
from stratctl.view.display import summary
from tests.unit.backends.fakes import FakeRM, FakeSlurm, MemoryScheduler, slurm_nodes, yarn_nodes
from tests.unit.fakes import FakeClock, MaxRng, one_cycle
from tests.unit.rendering import Renderer
from tests.unit.studies import load

BODY = """\
retries: {max_failures: 1}
space:
  seed: {type: int, low: 0, high: 2, grid: true}
strategy: {kind: grid}
trial:
  command: ["train"]
  resources: {limits: {nvidia.com/gpu: 1}}
"""


class SlurmBackend:
    """SlurmScheduler over FakeSlurm; the job script's marks written as a job would."""

    preemption = "requeue"  # Slurm requeues a preempted job: the same attempt runs again
    release = "same"  # a held job is released, the same job

    def __init__(self, tmp_path):
        self.study = load(tmp_path, "name: s\nbackend: slurm\n" + BODY)
        self.fake = FakeSlurm(nodes=slurm_nodes([4, 4]))
        self.sched = SlurmScheduler(self.study, Renderer(self.study), Slurm(run=self.fake), workdir=str(tmp_path))

    def answer(self, *answers):  # the next creates' answers: ok, lost, limit
        self.fake.sbatch_answers += answers

    def created(self):
        return [parse_comment(j["comment"])[1:3] for j in self.fake.jobs]

    def _latest(self, trial):
        return max((j for j in self.fake.jobs if parse_comment(j["comment"])[1] == trial), key=lambda j: j["job_id"])

    def _mark(self, job, suffix, text):
        number = parse_comment(job["comment"])[2]
        (self.sched.output / parse_comment(job["comment"])[1] / f"attempt-{number}.{suffix}").write_text(text)

    def run(self, trial):
        job = self._latest(trial)
        job.update(job_state="RUNNING", state_reason="None", start_time=1000)
        self._mark(job, "job", f"{job['job_id']}\n")

    def _end(self, trial, state, status, code):
        job = self._latest(trial)
        if job["job_state"] != "RUNNING":
            self.run(trial)
        job.update(job_state=state, exit_code=status, end_time=4000)
        self._mark(job, "exit", f"{code}\n")

    def succeed(self, trial):
        self._end(trial, "COMPLETED", 0, 0)

    def fail(self, trial):
        self._end(trial, "FAILED", 256, 1)  # the wait status of exit 1

    def preempt(self, trial):  # PreemptMode=REQUEUE: back in the queue and started again, its restarts up
        job = self._latest(trial)
        job.update(job_state="RUNNING", restart_cnt=job["restart_cnt"] + 1, start_time=2000)

    def forget(self):  # MinJobAge passed: the controller lists no ended job
        self.fake.jobs = [j for j in self.fake.jobs if j["job_state"] in ("PENDING", "RUNNING")]

    def set_free(self, free):
        self.fake.nodes = slurm_nodes(free)

    def write_result(self, trial, value):
        (self.sched.output / trial).mkdir(parents=True, exist_ok=True)
        (self.sched.output / trial / "result.json").write_text(json.dumps(value))


class YarnBackend:
    """YarnScheduler over the real REST client and a FakeRM behind it."""

    preemption = "next attempt"  # the gang AM ends a preempted attempt: the next one resumes
    release = "next"  # YARN cannot hold: drain killed the attempt, resume submits the next

    def __init__(self, tmp_path):
        self.study = load(
            tmp_path,
            'name: s\nbackend: yarn\nyarn: {resource_managers: ["http://rm:8088"], queue: research, '
            "classpath: [/etc/hadoop]}\n" + BODY,
        )
        self.fake = FakeRM()
        self.fake.nodes = yarn_nodes([4, 4])
        jar = tmp_path / "am.jar"
        jar.write_bytes(b"jar")
        rm = ResourceManager(["http://rm:8088"], pool=self.fake)
        self.sched = YarnScheduler(self.study, rm=rm, workdir=str(tmp_path), jar=jar)

    def answer(self, *answers):
        self.fake.submit_answers += answers

    def created(self):
        out = []
        for body in self.fake.submitted:
            tags = parse_tags(body["application-tags"]["tag"])
            out.append((tags["trial"], int(tags["n"])))
        return out

    def _latest(self, trial):
        return self.fake.of(trial)[-1]["id"]

    def run(self, trial):
        self.fake.apps[self._latest(trial)].update(state="RUNNING", progress=50.0, launchTime=1_000_000, diagnostics="")

    def succeed(self, trial):
        self.fake.end(self._latest(trial), "FINISHED", "SUCCEEDED")

    def fail(self, trial):
        self.fake.end(self._latest(trial), "FAILED", "FAILED", "container_1_0001_01_000002 exited with code 1")

    def preempt(self, trial):
        self.fake.end(
            self._latest(trial), "FAILED", "FAILED", "stratctl: preempted: container_1_0001_01_000002 was preempted"
        )

    def forget(self):  # max-completed-applications passed: the RM lists no ended application
        self.fake.apps = {k: a for k, a in self.fake.apps.items() if a["state"] in ("ACCEPTED", "RUNNING")}

    def set_free(self, free):
        self.fake.nodes = yarn_nodes(free)

    def write_result(self, trial, value):
        (self.sched.output / trial).mkdir(parents=True, exist_ok=True)
        (self.sched.output / trial / "result.json").write_text(json.dumps(value))


class MemoryBackend:
    """The in-memory scheduler: the seam itself, no scheduler behind it."""

    preemption = "requeue"
    release = "same"

    def __init__(self, tmp_path):
        self.study = load(tmp_path, "name: mem\nbackend: slurm\n" + BODY)
        self.sched = MemoryScheduler()

    def answer(self, *answers):
        self.sched.answers += answers

    def created(self):
        return list(self.sched.creates)

    def run(self, trial):
        self.sched.set(trial, state=TrialState.RUNNING, native_state="RUNNING", started=1000.0, reason="")

    def _end(self, trial, state, code):
        started = self.sched.jobs[trial].started or 1000.0
        self.sched.set(trial, state=state, native_state="DONE", exit_code=code, started=started, ended=4000.0)

    def succeed(self, trial):
        self._end(trial, TrialState.SUCCEEDED, 0)

    def fail(self, trial):
        self._end(trial, TrialState.FAILED, 1)

    def preempt(self, trial):
        attempt = self.sched.jobs[trial]
        self.sched.set(trial, state=TrialState.RUNNING, restarts=attempt.restarts + 1)

    def forget(self):
        self.sched.jobs = {t: a for t, a in self.sched.jobs.items() if a.state.in_flight}

    def set_free(self, free):
        self.sched.gpus = list(free)

    def write_result(self, trial, value):
        self.sched.results[trial] = value


@pytest.fixture(params=[SlurmBackend, YarnBackend, MemoryBackend], ids=["slurm", "yarn", "memory"])
def backend(request, tmp_path):
    return request.param(tmp_path)


def trials(backend):
    return expand(backend.study)


def create(backend, trial, number):
    prepared = backend.sched.prepare(trial, number)
    backend.sched.create(prepared)
    return prepared


def make_loop(backend, events=None):
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())
    loop = AttemptLoop(
        backend.study,
        expand(backend.study),
        backend.sched,
        throttle,
        SubmitOptions(poll_interval=1, workers=1),
        policy=StaticPolicy(4),
        clock=clock,
        sleep=clock.sleep,
    )
    if events is not None:
        loop.reporter.event = events.append
    return loop


def cycle(loop, times=1):
    with ThreadPoolExecutor(1) as pool:
        for _ in range(times):
            states = one_cycle(loop, pool)
    return states


# -- the protocol, call by call -------------------------------------------------------------


def test_it_names_itself_for_messages_and_status(backend):
    s = backend.sched
    for word in (s.kind, s.title, s.controller, s.create_command, s.limit_words, s.calls_word):
        assert isinstance(word, str) and word
    assert s.where.startswith(f"{s.kind}:") and isinstance(s.queue, str)


def test_attempts_are_listed_by_trial_each_its_latest(backend):
    a, b, _ = trials(backend)
    s = backend.sched
    assert s.attempts() == {}
    first = create(backend, a, 0)
    assert s.find(first) and not s.find(s.prepare(b, 0))
    seen = s.attempts()
    assert list(seen) == [a.name]
    assert (seen[a.name].trial, seen[a.name].attempt, seen[a.name].state) == (a.name, 0, TrialState.PENDING)
    assert seen[a.name].job and seen[a.name].failures == 0 and seen[a.name].preemptions == 0
    backend.run(a.name)
    assert s.attempts()[a.name].state is TrialState.RUNNING
    backend.fail(a.name)
    failed = s.attempts()[a.name]
    assert failed.state is TrialState.FAILED and failed.attempt == 0 and failed.exit_code == 1
    second = s.prepare(a, 1)
    assert not s.find(second)  # the failed attempt is not the next one
    s.create(second)
    latest = s.attempts()[a.name]
    assert (latest.attempt, latest.state, latest.failures) == (1, TrialState.PENDING, 1)
    assert latest.job != failed.job and s.find(second)


def test_an_ended_attempt_outlives_the_controllers_memory_with_marks(backend):
    a, b, _ = trials(backend)
    s = backend.sched
    create(backend, a, 0)
    create(backend, b, 0)
    backend.succeed(a.name)
    ended = s.attempts()[a.name]  # seen ended once while the controller still lists it
    assert ended.state is TrialState.SUCCEEDED
    backend.forget()
    again = s.attempts()
    assert again[a.name].state is TrialState.SUCCEEDED and again[a.name].job == ended.job
    assert again[b.name].state is TrialState.PENDING
    assert set(s.attempts(marks=False)) == {b.name}  # the controller's own listing


def test_a_create_whose_answer_was_lost_is_found_not_created_twice(backend):
    a, b, _ = trials(backend)
    s = backend.sched
    backend.answer("lost")
    prepared = s.prepare(a, 0)
    with pytest.raises(Unavailable):
        s.create(prepared)
    assert s.find(prepared)  # it went through: the loop finds it before sending it again
    assert backend.created() == [(a.name, 0)]
    assert s.attempts()[a.name].attempt == 0 and not s.find(s.prepare(b, 0))


def test_a_refusal_for_a_limit_creates_nothing_and_is_counted(backend):
    a, _, _ = trials(backend)
    s = backend.sched
    backend.answer("limit")
    prepared = s.prepare(a, 0)
    with pytest.raises(Throttled):
        s.create(prepared)
    assert backend.created() == [] and not s.find(prepared) and s.attempts() == {}
    assert s.refused == {s.create_command: 1}
    s.create(prepared)  # the next one goes through
    assert backend.created() == [(a.name, 0)]


def test_the_counters_count_every_call_by_kind_and_the_creates(backend):
    a, b, _ = trials(backend)
    s = backend.sched
    assert s.calls == 0 and s.sent == {} and s.refused == {}
    create(backend, a, 0)
    create(backend, b, 0)
    s.attempts()
    s.free_gpus()
    assert s.sent[s.create_command] == 2
    assert s.calls == sum(s.sent.values()) and len(s.sent) >= 3  # the creates, the list, the capacity
    assert s.refused == {}


def test_hold_stop_and_release(backend):
    a, b, _ = trials(backend)
    s = backend.sched
    create(backend, a, 0)
    create(backend, b, 0)
    backend.run(a.name)
    seen = s.attempts(marks=False)
    s.hold(seen[b.name])  # pending: kept from starting
    s.stop(seen[a.name])  # running: stopped, kept to resume
    held = s.attempts(marks=False)
    assert {held[t].state for t in (a.name, b.name)} == {TrialState.SUSPENDED}
    for trial in (a.name, b.name):
        s.release(held[trial])
    back = s.attempts()
    number = {"same": 0, "next": 1}[backend.release]
    for trial in (a.name, b.name):
        assert (back[trial].state, back[trial].attempt) == (TrialState.PENDING, number), back[trial]
        assert back[trial].failures == 0 and back[trial].preemptions == 0  # a drain is neither
    assert sorted(backend.created()) == sorted([(a.name, 0), (b.name, 0)] + [(t, 1) for t in (a.name, b.name)] * number)


def test_give_up_ends_the_attempt_and_is_remembered_with_its_reason(backend):
    a, b, c = trials(backend)
    s = backend.sched
    for trial in (a, b, c):
        create(backend, trial, 0)
    backend.run(a.name)
    backend.fail(c.name)
    assert s.given_up() == {}
    seen = s.attempts()
    s.give_up(seen[a.name], "preempted 3 times, more than retries.max_preemptions (2)")  # running
    s.give_up(seen[b.name], "given up while pending")
    s.give_up(seen[c.name], "given up once ended")
    assert s.given_up() == {
        a.name: "preempted 3 times, more than retries.max_preemptions (2)",
        b.name: "given up while pending",
        c.name: "given up once ended",
    }
    after = s.attempts()
    assert not any(after[t.name].state.in_flight for t in (a, b, c)), after  # nothing left running or waiting
    assert len(backend.created()) == 3  # and nothing new


def test_the_drained_flag(backend):
    s = backend.sched
    assert not s.drained()
    s.set_drained(True)
    assert s.drained()
    s.set_drained(False)
    assert not s.drained()


def test_free_gpus_of_each_usable_node(backend):
    backend.set_free([4, 2, 0])
    assert backend.sched.free_gpus() == [4, 2, 0]
    backend.set_free([])
    assert backend.sched.free_gpus() == []


def test_a_trials_result(backend):
    a, b, _ = trials(backend)
    backend.write_result(a.name, {"loss": 0.5})
    assert backend.sched.result(a.name) == {"loss": 0.5} and backend.sched.result(b.name) is None


# -- the shared loop, status, drain and resume over it ---------------------------------------


def test_the_loop_reaches_every_trial_exactly_once_past_a_lost_answer_and_a_refusal(backend):
    backend.answer("lost", "limit")  # the first trial's answer lost; the second refused once
    loop = make_loop(backend)
    cycle(loop)
    assert sorted(backend.created()) == sorted((n, 0) for n in loop.order)
    assert loop.progress.created == 3 and loop.clock() > 1000  # the retries waited, on the virtual clock
    s = backend.sched
    text = summary(loop.progress)  # in the scheduler's own words; the lost create found, the refused one sent again
    assert f"created 3, already there 0; {s.sent[s.create_command]} {s.create_command}, 1 refused for " in text
    assert s.limit_words in text and "429" not in text and s.sent[s.create_command] == 4
    for name in loop.order:
        backend.succeed(name)
    progress = loop.run()
    assert (progress.succeeded, progress.failed, progress.created) == (3, 0, 3)
    again = make_loop(backend)  # a rerun recognises every trial and submits nothing
    cycle(again)
    assert again.progress.existing == 3 and again.progress.created == 0 and len(backend.created()) == 3


def test_the_loop_retries_a_failed_trial_until_its_failures_run_out(backend):
    loop = make_loop(backend)
    cycle(loop)
    for name in loop.order:
        backend.fail(name)
    cycle(loop)  # attempt 1 of each trial (max_failures 1)
    assert sorted(backend.created()) == sorted((n, k) for n in loop.order for k in (0, 1))
    for name in loop.order:
        backend.fail(name)
    states = cycle(loop)
    assert all(s is TrialState.FAILED for s in states.values())
    assert loop.progress.failed == 3 and loop.progress.created == 6 and len(backend.created()) == 6


def test_a_preemption_is_counted_once_and_never_as_a_failure(backend):
    events: list[str] = []
    loop = make_loop(backend, events)
    cycle(loop)
    first = loop.order[0]
    backend.run(first)
    backend.preempt(first)
    states = cycle(loop, 2)
    latest = backend.sched.attempts()[first]
    assert latest.preemptions == 1 and latest.failures == 0 and states[first] is not TrialState.FAILED
    said = [e for e in events if first in e and "preempt" in e]
    if backend.preemption == "requeue":  # the same job again: no new attempt
        assert latest.attempt == 0 and (first, 1) not in backend.created()
        assert said == [
            f"trial {first}: preempted, requeued by {backend.sched.title} (restart 1 of job {latest.job}): "
            "it resumes from its checkpoint; not a failure"
        ]
    else:  # the next attempt resumes
        assert latest.attempt == 1 and backend.created().count((first, 1)) == 1
        assert said == [f"trial {first}: attempt 1 submitted (attempt 0 preempted)"]
    backend.fail(first)  # a failure after it: the trial's one failure, so one more attempt
    cycle(loop)
    number = latest.attempt + 1
    assert backend.created().count((first, number)) == 1 and loop.progress.failed == 0
    assert backend.sched.attempts()[first].failures == 1


def test_drain_holds_a_loop_admits_nothing_and_resume_brings_it_back(backend):
    loop = make_loop(backend)
    cycle(loop)
    backend.run(loop.order[0])
    study, s = backend.study, backend.sched
    out = attemptdrain.drain(study, s)
    assert sorted(out.suspended) == sorted(loop.order) and s.drained()
    assert {x.state for x in s.attempts().values()} == {TrialState.SUSPENDED}
    rows = {r.trial: r for r in snapshot(study, s, now=5000).trials}
    assert {r.state for r in rows.values()} == {"suspended"} and snapshot(study, s).studies[0].drained
    events: list[str] = []
    loop.reporter.event = events.append
    created = len(backend.created())
    cycle(loop, 2)  # drained: nothing admitted, and drain's stop counts no preemption
    assert len(backend.created()) == created == 3 and not [e for e in events if "preempt" in e]
    back = attemptdrain.resume(study, s)
    assert sorted(back.resumed) == sorted(loop.order) and not s.drained()
    seen = s.attempts()
    assert {x.state for x in seen.values()} == {TrialState.PENDING}
    assert all(x.failures == 0 for x in seen.values())
    assert attemptdrain.resume(study, s).resumed == []  # nothing resumed twice
    cycle(loop)
    assert not [e for e in events if "preempt" in e]
    assert len(backend.created()) == {"same": 3, "next": 6}[backend.release]


def test_status_reads_each_trials_state_and_result(backend):
    loop = make_loop(backend)
    cycle(loop)
    a, b, c = loop.order
    backend.run(a)
    backend.succeed(c)
    backend.write_result(c, {"loss": 0.5})
    snap = snapshot(backend.study, backend.sched, now=5000)
    rows = {r.trial: r for r in snap.trials}
    assert snap.namespace == backend.sched.where
    assert (rows[a].state, rows[b].state, rows[c].state) == ("running", "pending", "succeeded")
    assert rows[c].result == {"loss": 0.5} and rows[a].result is None and rows[a].queue == backend.sched.queue
    assert rows[c].gpu_seconds == 3000.0  # 1 GPU from its start (1000) to its end (4000)
    [study] = snap.studies
    assert study.states == {"running": 1, "pending": 1, "succeeded": 1} and not study.drained
