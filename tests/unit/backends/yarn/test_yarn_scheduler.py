"""The YARN scheduler over an in-memory ResourceManager, where YARN is its own: ended
applications recorded so a forgetful RM loses no history, the queue's application limits
as pressure, free GPUs within the queue's headroom, the gang AM's jar. What every backend
does (created exactly once, drain and resume, ...) is the contract suite's
(tests/unit/backends/test_scheduler_contract.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratctl.backends.yarn.scheduler import YarnScheduler, am_jar, built_jar, headroom, queue_limit, queue_of, within
from stratctl.core.space import expand
from stratctl.errors import ExitCode, Throttled, UsageError
from stratctl.trialstate import TrialState
from tests.unit.studies import load

STUDY = """\
name: s
backend: yarn
yarn: {resource_managers: ["http://rm:8088"], queue: research, classpath: [/etc/hadoop]}
space:
  seed: {type: int, low: 0, high: 1, grid: true}
strategy: {kind: grid}
trial:
  command: ["train"]
  resources: {limits: {nvidia.com/gpu: 1}}
"""


class MemoryRM:
    """The RM's applications in a dict (`apps`), with the requests YarnScheduler sends."""

    def __init__(self):
        self.apps: dict[str, dict] = {}
        self.calls, self.sent, self.refused = 0, {}, {}
        self.killed: list[str] = []

    def new_application(self):
        return f"application_1_{len(self.apps) + 1:04d}"

    def submit(self, body):
        tags = ",".join(body["application-tags"]["tag"])
        self.apps[body["application-id"]] = {
            "id": body["application-id"],
            "state": "ACCEPTED",
            "progress": 0.0,
            "applicationTags": tags,
            "diagnostics": "",
            "launchTime": 0,
            "finishedTime": 0,
            "finalStatus": "UNDEFINED",
        }

    def apps_of(self, tag):
        return [a for a in self.apps.values() if tag in a["applicationTags"].split(",")]

    def scheduler(self):
        return {}  # no queue of the study's name: no limit reached

    def kill(self, app_id):
        self.killed.append(app_id)
        self.apps[app_id].update(state="KILLED", finalStatus="KILLED", finishedTime=5000)

    def set(self, app_id, **fields):
        self.apps[app_id].update(fields)


def scheduler(tmp_path):
    study = load(tmp_path, STUDY)
    rm = MemoryRM()
    jar = tmp_path / "am.jar"
    jar.write_bytes(b"jar")
    return study, YarnScheduler(study, rm=_Adapter(rm), workdir=str(tmp_path), jar=jar), rm


class _Adapter:
    """MemoryRM under the names YarnScheduler calls (its `apps` is both a dict and a method)."""

    def __init__(self, rm):
        self.rm = rm
        self.calls, self.sent, self.refused = 0, {}, {}

    def __getattr__(self, name):
        return getattr(self.rm, name)

    def apps(self, tag, application_type=None):
        return self.rm.apps_of(tag.lower())


def test_an_ended_application_is_recorded_once_seen_and_its_record_outlives_the_rm(tmp_path):
    """YARN's own way of remembering (the contract suite checks the rest of created, found
    and remembered): the record file of each ended attempt, with the RM's times in it."""
    study, sched, rm = scheduler(tmp_path)
    one, _ = expand(study)
    sched.create(sched.prepare(one, 0))
    [submitted] = rm.apps.values()
    assert submitted["applicationTags"].split(",")[:4] == [
        "stratctl",
        "stratctl-study:s",
        f"stratctl-trial:{one.name}",
        "stratctl-n:0",
    ]
    rm.set(
        submitted["id"], state="FINISHED", finalStatus="SUCCEEDED", launchTime=1000, finishedTime=4000, progress=100.0
    )
    assert sched.attempts()[one.name].state is TrialState.SUCCEEDED
    assert (sched.output / one.name / "attempt-0.yarn.json").exists()
    rm.apps.clear()  # the RM forgets it (max-completed-applications)
    again = sched.attempts()[one.name]
    assert again.state is TrialState.SUCCEEDED and again.job == submitted["id"] and again.run_seconds(0) == 3.0
    assert sched.attempts(marks=False) == {}


def test_a_refusal_for_the_queues_limits_is_pressure_not_a_failure(tmp_path):
    study, sched, rm = scheduler(tmp_path)
    one, two = expand(study)
    now = [100.0]
    sched.clock = lambda: now[0]
    sched.create(sched.prepare(one, 0))
    [refused] = rm.apps
    rm.set(
        refused,
        state="FAILED",
        finalStatus="FAILED",
        diagnostics="Queue root.research already has 3 "
        "applications, cannot accept submission of application: " + refused,
    )
    seen = sched.attempts()[one.name]
    assert seen.state is TrialState.PREEMPTED and seen.failures == 0
    assert sched.refused == {"submissions": 1}
    with pytest.raises(Throttled) as err:
        sched.create(sched.prepare(two, 0))
    assert err.value.retry_after == 10.0 and "maximum-applications" in str(err.value)
    sched.attempts()  # seen once: not counted again
    assert sched.refused == {"submissions": 1}
    now[0] += 10.5
    sched.create(sched.prepare(two, 0))
    assert len(rm.apps) == 2


def test_free_gpus_are_no_more_than_the_queue_may_still_take():
    def gpus(n):
        return {"resourceInformations": {"resourceInformation": [{"name": "yarn.io/gpu", "value": n}]}}

    answer = {
        "scheduler": {
            "schedulerInfo": {
                "queues": {
                    "queue": [
                        {
                            "queueName": "prod",
                            "queuePath": "root.prod",
                            "maxEffectiveCapacity": gpus(8),
                            "resourcesUsed": gpus(0),
                        },
                        {
                            "queueName": "team",
                            "queuePath": "root.team",
                            "queues": {
                                "queue": [
                                    {
                                        "queueName": "research",
                                        "queuePath": "root.team.research",
                                        "maxEffectiveCapacity": gpus(6),
                                        "resourcesUsed": gpus(3),
                                    }
                                ]
                            },
                        },
                    ]
                }
            }
        }
    }
    research = queue_of(answer, "research")
    assert research is queue_of(answer, "root.team.research") and headroom(research) == 3
    assert within([4, 2, 1], headroom(research)) == [3, 0, 0]
    assert within([4, 2], headroom(queue_of(answer, "prod"))) == [4, 2]
    assert within([4, 2], headroom(queue_of(answer, "missing"))) == [4, 2]  # the RM does not say: nodes alone


def test_an_accepted_application_held_back_by_a_queue_limit_waits_for_limits(tmp_path):
    study, sched, rm = scheduler(tmp_path)
    one, two = expand(study)
    for trial in (one, two):
        sched.create(sched.prepare(trial, 0))
    first, _ = rm.apps
    rm.set(first, state="RUNNING", progress=50.0, launchTime=1000)
    queue = {"queueName": "research", "numActiveApplications": 1, "maxParallelApps": 1}
    sched.rm.scheduler = lambda: {"scheduler": {"schedulerInfo": {"queues": {"queue": [queue]}}}}
    held = sched.attempts()[two.name]
    assert held.state is TrialState.PENDING and held.waits_for_limits and not held.waits_for_capacity
    assert held.reason == "the queue's maxParallelApps (1) are running"
    queue["maxParallelApps"] = 5
    free = sched.attempts()[two.name]
    assert free.waits_for_capacity and free.reason == ""
    assert queue_limit(
        {"AMResourceLimit": {"memory": 1024, "vCores": 8}, "usedAMResource": {"memory": 1024, "vCores": 2}}
    ).startswith("the queue's AM resource limit")


def test_the_am_jar_is_found_where_make_yarn_am_writes_it_or_where_it_is_named(tmp_path, monkeypatch):
    study = load(tmp_path, STUDY)
    monkeypatch.delenv("STRATCTL_YARN_AM_JAR", raising=False)
    monkeypatch.setenv("STRATCTL_YARN_CACHE", str(tmp_path / "cache"))
    built = tmp_path / "cache" / "am" / "stratctl-yarn-am.jar"  # yarn-am/build.sh's output, from any install
    built.parent.mkdir(parents=True)
    built.write_bytes(b"built")
    assert built_jar() == built and am_jar(study) == (built, "where `make yarn-am` writes it")
    assert YarnScheduler(study, rm=_Adapter(MemoryRM()), workdir=str(tmp_path)).jar.size == len(b"built")
    named = tmp_path / "named.jar"
    monkeypatch.setenv("STRATCTL_YARN_AM_JAR", str(named))
    assert am_jar(study) == (named, "STRATCTL_YARN_AM_JAR")
    shared = load(tmp_path, STUDY.replace("classpath:", "am_jar: /shared/am.jar, classpath:"))
    assert am_jar(shared) == (Path("/shared/am.jar"), "the study's yarn.am_jar")  # the study's own wins


def test_a_missing_am_jar_ends_the_submit_before_any_application_with_how_to_build_it(tmp_path, monkeypatch):
    study = load(tmp_path, STUDY)
    monkeypatch.delenv("STRATCTL_YARN_AM_JAR", raising=False)
    monkeypatch.setenv("STRATCTL_YARN_CACHE", str(tmp_path / "cache"))
    rm = MemoryRM()
    asked = []
    adapter = _Adapter(rm)
    adapter.new_application = lambda: asked.append(1) or rm.new_application()
    sched = YarnScheduler(study, rm=adapter, workdir=str(tmp_path))
    trial = expand(study)[0]
    with pytest.raises(UsageError) as missing:
        sched.check(trial)  # a client dry run says it too
    with pytest.raises(UsageError):
        sched.create(sched.prepare(trial, 0))
    assert asked == [] and rm.apps == {}
    text = str(missing.value)
    assert "\n" not in text and missing.value.exit_code == ExitCode.INVALID_INPUT
    assert text.startswith(f"s: no gang application master jar at {tmp_path / 'cache/am/stratctl-yarn-am.jar'}, where")
    assert "`make yarn-am`" in text and "STRATCTL_YARN_AM_JAR" in text and "yarn.am_jar" in text


def test_submit_with_a_missing_am_jar_exits_2_in_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from stratctl.cli.main import app

    monkeypatch.setenv("STRATCTL_YARN_AM_JAR", str(tmp_path / "nowhere.jar"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text(STUDY)
    result = CliRunner().invoke(app, ["submit", "study.yaml", "--dry-run", "client"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if "no gang application master jar at" in line
    ]
    assert f"{tmp_path / 'nowhere.jar'} (STRATCTL_YARN_AM_JAR)" in result.stderr and "Traceback" not in result.stderr


def test_the_result_comes_from_the_ended_applications_diagnostics_and_outlives_the_rm(tmp_path):
    """No shared filesystem: the gang AM's final diagnostics carry the result; the attempt's
    record keeps them once the RM forgets the application. result.json is read only when no
    record has a result (a trial that writes it itself on a shared filesystem)."""
    study, sched, rm = scheduler(tmp_path)
    one, two = expand(study)
    sched.create(sched.prepare(one, 0))
    [app_id] = rm.apps
    said = 'stratctl: 1 tasks succeeded\nstratctl: result {"loss":0.125}'
    rm.set(app_id, state="FINISHED", finalStatus="SUCCEEDED", diagnostics=said, launchTime=1, finishedTime=2)
    (sched.output / one.name / "result.json").write_text('{"loss": 9.0}')  # not the one read
    sched.attempts()
    rm.apps.clear()
    assert sched.result(one.name) == {"loss": 0.125}
    sched.create(sched.prepare(two, 0))
    [app_id] = rm.apps
    rm.set(app_id, state="FINISHED", finalStatus="SUCCEEDED", diagnostics="stratctl: 1 tasks succeeded")
    sched.attempts()
    assert sched.result(two.name) is None
    (sched.output / two.name / "result.json").write_text('{"loss": 0.5}')
    assert sched.result(two.name) == {"loss": 0.5}


def test_reports_are_read_through_the_web_proxy_and_prune_kills_the_application(tmp_path):
    from dataclasses import replace

    study, sched, rm = scheduler(tmp_path)
    one, _ = expand(study)
    sched.create(sched.prepare(one, 0))
    [app_id] = rm.apps
    rm.set(app_id, state="RUNNING", progress=50.0)
    served = {
        app_id: '{"attempt":0,"rank":0,"step":1,"values":{"loss":0.5}}\n'
        "torn line\n"
        '{"attempt":0,"rank":1,"step":2,"values":{"acc":0.1}}\n'
        '{"attempt":0,"rank":0,"step":3,"values":{"loss":0.25,"acc":0.2}}\n'
    }
    asked = []

    def proxied(app, path):
        asked.append((app, path))
        return served.get(app)

    rm.proxied = proxied
    running = sched.attempts()[one.name]
    assert running.state is TrialState.RUNNING
    assert sched.reports(running, "loss") == {1: 0.5, 3: 0.25}
    assert sched.reports(running, "acc") == {2: 0.1, 3: 0.2}
    assert asked == [(app_id, "reports"), (app_id, "reports")]
    assert sched.reports(replace(running, state=TrialState.PENDING), "loss") == {}  # no AM to ask yet
    assert len(asked) == 2
    sched.prune(running)
    assert rm.killed == [app_id]
    after = sched.attempts()[one.name]
    assert after.state is TrialState.FAILED and not (sched.output / one.name / "attempt-0.drained").exists()
