"""A 429 storm already going when a command starts paces it, not ends it: every command's
first request answered 429 then 200, through the real kubeconfig, transport and throttle
(a FakeCluster served over HTTP); and a storm longer than the command's bound ends it with
one line that names the throttling, exit 3."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from stratctl import labels
from stratctl.backends.kubernetes.api.connect import ONE_SHOT_BACKOFF, preflight_gated, tell_throttling
from stratctl.cli.main import app
from stratctl.errors import StillThrottled, Throttled
from stratctl.run.throttle import Throttle
from tests.unit.api_server import ApiServer
from tests.unit.backends.kubernetes.test_drain import submitted
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock, MaxRng
from tests.unit.http_fakes import OK, Answer, cluster, status_body

NOTICE = "the API server is throttling this user (HTTP 429, Retry-After 1s); waiting for it, up to 25s"
REFUSED = Answer(
    429, status_body(429, "TooManyRequests", "Too many requests, please try again later."), {"Retry-After": "32"}
)


@pytest.fixture
def server(tmp_path):
    fake = FakeCluster()
    submitted(tmp_path, fake, "sweep", inflight=10)  # every trial submitted, so `wait` can see them end
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "sweep-pod-0",
            "labels": {
                labels.STUDY: "sweep",
                labels.TRIAL: fake.jobs()[0]["metadata"]["labels"][labels.TRIAL],
                labels.ATTEMPT: "0",
            },
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
    }
    fake.create(pod)
    served = ApiServer(fake)
    served.config = served.kubeconfig(tmp_path, fake.namespace)
    yield served
    served.close()


def run(server, *args):
    return CliRunner().invoke(app, [*args, "--kubeconfig", str(server.config)])


def finished(server):
    for job in server.cluster.jobs():
        server.cluster.set_phase(job, "Completed")


COMMANDS = {
    "status": (["status"], None),
    "status STUDY": (["status", "sweep", "-o", "json"], None),
    "drain": (["drain", "sweep", "--settle", "0"], None),
    "resume": (["resume", "sweep"], None),
    "delete": (["delete", "sweep", "--yes", "--timeout", "5"], None),
    "wait": (["wait", "sweep", "--interval", "0.2", "--timeout", "20s"], finished),
    "logs": (["logs", "sweep", "{trial}"], None),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_first_request_of_a_command_answered_429_then_200_is_paced_not_fatal(server, name):
    args, prepare = COMMANDS[name]
    if prepare:
        prepare(server)
    trial = server.cluster.jobs()[0]["metadata"]["labels"][labels.TRIAL]
    args = [a.format(trial=trial) for a in args]
    server.refuse(1, retry_after=1)
    started = time.monotonic()
    result = run(server, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stderr.splitlines()[0] == NOTICE
    (first_method, first_path, refused), (again_method, again_path, status) = server.seen[:2]
    assert refused == 429 and status < 400 and (again_method, again_path) == (first_method, first_path)
    assert 0.9 <= time.monotonic() - started < 10  # waited out the pause (1 s), then went on


def test_each_command_answers_as_it_would_without_the_storm(server):
    server.refuse(1)
    assert "sweep" in run(server, "status").stdout
    server.refuse(1)
    result = run(server, "delete", "sweep", "--yes", "--timeout", "5")
    assert result.exit_code == 0 and "sweep: deleted 10 job(s)" in result.stdout and "and its record" in result.stdout
    assert not server.cluster.jobs() and not [k for k in server.cluster.objects if k[1] == "ConfigMap"]


@pytest.mark.parametrize("args", [["status"], ["delete", "sweep", "--yes"], ["drain", "sweep", "--settle", "0"]])
def test_a_storm_longer_than_the_bound_ends_the_command_with_one_line_exit_3_and_nothing_half_done(
    server, monkeypatch, args
):
    from stratctl.backends.kubernetes.api import connect

    monkeypatch.setattr(connect, "ONE_SHOT_PATIENCE", 2.0)  # 25 s in real life; the bound is what is tested
    before = {k: dict(v) for k, v in server.cluster.objects.items()}
    server.refuse(10_000, retry_after=32)
    started = time.monotonic()
    result = run(server, *args)
    assert result.exit_code == 3
    notice, line = result.stderr.splitlines()
    assert notice == "the API server is throttling this user (HTTP 429, Retry-After 32s); waiting for it, up to 2s"
    assert line.startswith(
        "error: the API server has refused every request of this user (HTTP 429 Too Many "
        "Requests, Retry-After 32s: API Priority and Fairness is throttling it) for longer than "
        "this command waits (2s): gave up"
    ), line
    assert 1.0 <= time.monotonic() - started < 2.0 + 1.5  # gave up within the bound (no try left in it)
    assert server.cluster.objects == before and result.stdout == ""


# -- the throttle's bound, in virtual time --------------------------------------------


def test_a_throttled_request_is_retried_for_the_bound_then_gives_up_naming_the_throttling():
    clock, told = FakeClock(), []
    throttle = tell_throttling(
        Throttle(qps=0, burst=1, backoff=ONE_SHOT_BACKOFF, patience=25.0, clock=clock, sleep=clock.sleep, rng=MaxRng()),
        told.append,
    )
    calls = []

    def refused():
        calls.append(clock())
        raise Throttled("get /version: Too many requests, please try again later.", retry_after=32)

    with pytest.raises(StillThrottled) as caught:
        throttle.call(refused)
    # probes after 1, 2, 4, 4, ... seconds (the pace); the next would come after the bound: given up at 23 s
    assert [t - calls[0] for t in calls] == [0, 1, 3, 7, 11, 15, 19, 23]
    assert clock() - calls[0] == 23
    assert told == ["the API server is throttling this user (HTTP 429, Retry-After 32s); waiting for it, up to 25s"]
    assert "Too many requests" not in str(caught.value) and "throttling" in str(caught.value)
    assert caught.value.exit_code == 3


def test_a_storm_that_ends_within_the_bound_is_told_once_and_the_request_goes_through():
    clock, told = FakeClock(), []
    throttle = tell_throttling(
        Throttle(qps=5, burst=5, patience=300.0, clock=clock, sleep=clock.sleep, rng=MaxRng()), told.append
    )
    answers = iter([Throttled("x", retry_after=32)] * 20 + ["created"])

    def create():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert throttle.call(create, mutating=True) == "created"
    assert len(told) == 1 and clock() - 1000.0 < 300


def test_submits_first_request_version_answered_429_then_200_reaches_the_server_through_the_pace():
    """`submit`'s first contact (`Cluster.reach`, before its preflight) goes through the
    preflight's gate when refused: waited out, told once, and counted with the loop's."""
    clock, told = FakeClock(), []
    loop = tell_throttling(Throttle(qps=5, burst=5, patience=300.0), told.append)
    c = cluster(clock, REFUSED, REFUSED, OK)
    gated = preflight_gated(c, loop)
    checker = gated.gate.__self__
    checker._clock, checker._sleep, checker.bucket._clock, checker.bucket._sleep = (
        clock,
        clock.sleep,
        clock,
        clock.sleep,
    )
    gated.reach()
    assert [r["url"].rsplit("/", 1)[-1] for r in c.api.requests] == ["version"] * 3
    assert told == ["the API server is throttling this user (HTTP 429, Retry-After 32s); waiting for it, up to 5m"]
    assert loop.stats.throttled == 2 and clock() - 1000.0 == 1 + 2  # the pace's pauses, not the Retry-After


@pytest.mark.parametrize("command", ["status", "drain", "resume", "delete", "wait", "logs"])
def test_each_one_shot_commands_help_states_its_bound(command):
    from stratctl.backends.kubernetes.api.connect import ONE_SHOT_PATIENCE

    text = " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert f"is waited for up to {ONE_SHOT_PATIENCE:g} s, with one line saying so; then exit 3" in text
