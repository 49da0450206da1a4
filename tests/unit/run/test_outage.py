"""How long a command waits for an API server that does not answer, in virtual time."""

from __future__ import annotations

import pytest
from urllib3.exceptions import NewConnectionError

from stratctl.backends.kubernetes.api.cluster import CONFIGMAP
from stratctl.backends.kubernetes.api.connect import ONE_SHOT_BACKOFF, ONE_SHOT_PATIENCE
from stratctl.errors import ExitCode, Unavailable, Unreachable
from stratctl.run.outage import Change, Outage, duration
from stratctl.run.throttle import Throttle
from tests.unit.fakes import FakeClock, MaxRng
from tests.unit.http_fakes import OK, Answer, cluster, status_body

REFUSED = NewConnectionError(
    None,
    "HTTPSConnection(host='k8s.test', port=6443): Failed to establish a new connection: [Errno 111] Connection refused",
)
HANG = 3600  # seconds a request to a server over a paused etcd hangs


def test_an_outage_is_told_once_when_it_starts_and_once_when_it_ends():
    clock, heard = FakeClock(), []
    outage = Outage(patience=60.0, clock=clock)
    outage.listen(heard.append)
    outage.answered()
    clock.sleep(1)
    assert outage.failed(Unavailable("a: refused"), sent=clock()).__class__ is Unavailable
    clock.sleep(5)
    outage.failed(Unavailable("b: refused"), sent=clock())
    clock.sleep(5)
    outage.answered()
    outage.answered()
    assert [(c.down, c.error, c.lasted) for c in heard] == [(True, "a: refused", 0.0), (False, "", 10.0)]


def test_past_its_patience_a_failure_becomes_unreachable_which_is_exit_3():
    clock = FakeClock()
    outage = Outage(patience=60.0, clock=clock)
    outage.answered()
    sent = clock()
    clock.sleep(59)
    assert type(outage.failed(Unavailable("x"), sent)) is Unavailable
    clock.sleep(1)
    gave_up = outage.failed(Unavailable("get ConfigMap s: cannot reach the API server"), clock())
    assert type(gave_up) is Unreachable and not isinstance(gave_up, Unavailable)  # nothing retries it
    assert str(gave_up) == (
        "no answer from the API server for 1m, giving up (last error: get ConfigMap s: cannot reach the API server)"
    )
    assert gave_up.exit_code == ExitCode.CLUSTER


def test_an_outage_begins_no_earlier_than_the_last_answer():
    clock = FakeClock()
    outage = Outage(patience=60.0, clock=clock)
    sent = clock()  # a request goes out and hangs ...
    clock.sleep(30)
    outage.answered()  # ... while another one is answered
    clock.sleep(31)
    assert type(outage.failed(Unavailable("timed out"), sent)) is Unavailable
    assert outage.since == 1030.0


def test_before_any_answer_the_first_patience_applies_and_timeouts_are_cut_to_what_is_left():
    clock = FakeClock()
    outage = Outage(patience=300.0, first_patience=25.0, clock=clock)
    assert outage.timeout(10, 60) == (10, 25.0)
    outage.failed(Unavailable("refused"), clock())
    clock.sleep(20)
    assert outage.timeout(10, 60) == (5.0, 5.0)
    clock.sleep(10)
    assert outage.timeout(10, 60) == (1.0, 1.0)  # never below a second
    assert type(outage.failed(Unavailable("refused"), clock())) is Unreachable
    outage.answered()
    assert outage.timeout(10, 60) == (10, 60)


def one_shot(clock, *script):
    """status/drain/resume's cluster (engine.connect.one_shot) over a scripted API."""
    throttle = Throttle(qps=0, burst=1, backoff=ONE_SHOT_BACKOFF, clock=clock, sleep=clock.sleep, rng=MaxRng())
    return cluster(clock, *script, patience=ONE_SHOT_PATIENCE, gate=throttle.call)


@pytest.mark.parametrize(
    "script, how",
    [
        ((REFUSED,), "Connection refused"),
        ((HANG,), "Read timed out"),
        ((Answer(504, status_body(504, "Timeout", "etcdserver: request timed out")),), "etcdserver: request timed out"),
    ],
)
def test_a_one_shot_command_gives_up_within_30s_of_a_server_that_is_down(script, how):
    clock = FakeClock()
    c = one_shot(clock, *script)
    with pytest.raises(Unreachable) as caught:
        c.list(CONFIGMAP, "ns")
    assert ONE_SHOT_PATIENCE <= clock() - 1000.0 <= 30.0
    assert str(caught.value).startswith("no answer from the API server for 2") and how in str(caught.value)
    assert all(r["timeout"][1] <= ONE_SHOT_PATIENCE for r in c.api.requests)  # a hung server cannot stretch it
    assert "HTTPSConnection" not in str(caught.value)  # urllib3's object names are left out


def test_a_one_shot_command_rides_out_a_blip():
    clock = FakeClock()
    c = one_shot(clock, REFUSED, REFUSED, REFUSED, OK)
    assert c.get(CONFIGMAP, "a")["kind"] == "ConfigMap"
    assert clock() - 1000.0 == 0.5 + 1.0 + 2.0


def test_submit_waits_out_its_outage_timeout_once_the_server_has_answered():
    clock = FakeClock()
    throttle = Throttle(qps=0, burst=1, clock=clock, sleep=clock.sleep, rng=MaxRng())  # submit's default retries
    c = cluster(clock, OK, REFUSED, patience=300.0, first_patience=ONE_SHOT_PATIENCE, gate=throttle.call)
    c.get(CONFIGMAP, "a")
    began = clock()
    with pytest.raises(Unavailable):  # the throttle's ten attempts are spent well before the outage timeout
        c.get(CONFIGMAP, "a")
    assert clock() - began < 300.0
    while True:  # the loop's next cycles
        try:
            c.get(CONFIGMAP, "a")
        except Unreachable:
            break
        except Unavailable:
            clock.sleep(30)
    assert 300.0 <= clock() - began <= 300.0 + 30.0 + 30.0


def test_durations_read_like_a_person_would_say_them():
    assert [duration(s) for s in (0.4, 42, 60, 90, 300, 3599)] == ["0s", "42s", "1m", "1m30s", "5m", "59m59s"]


def test_a_request_hung_on_a_stalled_server_starts_the_outage_after_10s_not_at_its_timeout():
    clock, heard = FakeClock(), []
    outage = Outage(patience=300.0, clock=clock)
    outage.listen(heard.append)
    outage.answered()
    clock.sleep(1)
    token = outage.sending("get ConfigMap s")  # etcd paused: no answer comes
    clock.sleep(9.5)
    assert outage.stalled() is None and heard == []
    clock.sleep(0.5)
    change = outage.stalled()
    assert change == Change(down=True, error="get ConfigMap s: no answer for 10s") and heard == [change]
    assert outage.since == 1001.0 and outage.remaining() == 290.0  # the patience counts from its send
    clock.sleep(5)
    assert outage.stalled() is None and len(heard) == 1  # said once
    clock.sleep(36)
    outage.received(token)
    outage.answered()  # etcd continued: the request got its answer
    assert heard[-1] == Change(down=False, lasted=51.0)


def test_a_slow_request_while_others_are_answered_is_no_outage():
    clock, heard = FakeClock(), []
    outage = Outage(patience=300.0, clock=clock)
    outage.listen(heard.append)
    outage.sending("list Job (10,000 of them)")
    clock.sleep(5)
    outage.received(outage.sending("get ConfigMap s"))
    outage.answered()  # answered after the slow one went out
    clock.sleep(20)
    assert outage.stalled() is None and heard == []


def test_the_watchdog_tells_a_stall_as_it_happens():
    import threading
    import time

    told = threading.Event()
    outage = Outage(patience=300.0)
    outage.stall = 0.05
    outage.listen(lambda change: told.set())
    outage.sending("get ConfigMap s")
    outage.watch(interval=0.01)
    try:
        assert told.wait(2.0)
    finally:
        outage.stop()
    assert outage.since is not None and outage.since <= time.monotonic()
