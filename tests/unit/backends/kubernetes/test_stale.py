"""No decision on a picture known to be stale: a watch broken or silent past its bound, or an
API server that does not answer, holds the target (and says so once); a mirror relists at
once when its connection was cut or the server answers again."""

from __future__ import annotations

import threading
import time

from stratctl.backends.kubernetes.api import connections
from stratctl.backends.kubernetes.api.cluster import POD
from stratctl.backends.kubernetes.watch.mirror import Mirror, staleness
from stratctl.errors import Reconnect, Unavailable
from stratctl.run.loop import Deciding
from stratctl.run.outage import Outage
from stratctl.run.policy import AdaptiveConfig, Observed, PolicyState, StaticPolicy, decide
from stratctl.run.progress import Progress
from tests.unit.backends.kubernetes.test_mirror import ScriptedCluster, run
from tests.unit.fakes import FakeClock, MaxRng

# what the dead watches said in the blackout: 8 gangs "pending" (running by then), all stuck
DEAD_WATCHES = Observed(in_flight=16, pending=8, waiting=44, stuck=8, gangs_fit=0, free_gpus=0)


def test_stuck_gangs_read_from_a_stale_picture_do_not_cut_the_target():
    config, state = AdaptiveConfig(max=32, persist=0.0), PolicyState(target=16, congested_since=0.0)
    cut, _ = decide(DEAD_WATCHES, config, state, now=100.0)
    assert cut.target == 8  # what the loop did before: 16 -> 8 -> 4 -> 2 -> 1 across the blackout
    stale = Observed(**{**DEAD_WATCHES.__dict__, "stale": "Pod watch broken for 12s"})
    held, after = decide(stale, config, state, now=100.0)
    assert (held.target, held.hold, after.target) == (16, True, 16)
    assert held.reason == "Pod watch broken for 12s: the picture may be stale, holding target 16 until it is current"
    assert held.admit(stale) == 0  # nothing new either: what is in flight is not known


def test_a_static_cap_holds_too():
    stale = Observed(in_flight=3, pending=0, waiting=10, stale="no answer from the API server for 14s")
    decision = StaticPolicy(cap=8).decide(stale, now=0.0)
    assert decision.hold and decision.target == 8 and decision.admit(stale) == 0
    assert decision.reason.startswith("no answer from the API server for 14s: the picture may be stale")


def test_the_hold_is_said_once_however_long_it_lasts_and_the_end_once():
    said: list[str] = []
    deciding, policy = Deciding(said.append, clock=lambda: 0.0), StaticPolicy(cap=8)
    for seconds in (11, 12, 13):
        deciding.decide(policy, Observed(0, 0, 10, stale=f"Pod watch silent for {seconds}s"), Progress("s", total=10))
    deciding.decide(policy, Observed(0, 0, 10), Progress("s", total=10))
    assert said == [
        "target in flight 8 (holding): Pod watch silent for 11s: the picture may be stale, holding target 8 "
        "until it is current",
        "target in flight 8: static cap 8",
    ]


def test_a_broken_watch_is_stale_until_relisted_and_a_silent_one_past_its_bound():
    clock = FakeClock()
    seen: list[tuple[tuple, str | None]] = []
    cluster = ScriptedCluster(
        lists=[([], "10"), ([], "11")],
        watches=[[Unavailable("watch Pod: the stream broke")], []],
        on_call=lambda call: seen.append((call, cluster.mirror.stale(clock()))),
    )
    mirror, waits = run(cluster, clock=clock)
    assert seen == [
        (("list",), None),  # not following yet
        (("watch", "10"), None),  # just listed
        (("list",), "Pod watch broken for 1s"),  # broken, relisting after its wait
        (("watch", "11"), None),  # whole again as of the relist, though the watch has to prove itself
        (("watch", "11"), None),  # the server ended the watch: live
    ]
    bound = connections.SILENT + mirror.watch_timeout
    mirror.heard = clock()
    clock.sleep(bound)
    assert mirror.stale(clock()) is None
    clock.sleep(1)
    assert mirror.stale(clock()) == f"Pod watch silent for {bound + 1:.0f}s"
    outage = Outage(clock=clock)
    assert staleness([mirror, None], outage) == f"Pod watch silent for {bound + 1:.0f}s"
    outage.failed(Unavailable("x"), sent=clock() - 14)  # the server out: whatever a cache holds is older
    assert staleness([mirror], outage) == "no answer from the API server for 14s"


def test_a_cut_connection_relists_at_once_without_backoff():
    cluster = ScriptedCluster(lists=[([], "10"), ([], "11")], watches=[[Reconnect("watch Pod: cut")], []])
    mirror, waits = run(cluster)
    assert waits == [] and cluster.calls == [("list",), ("watch", "10"), ("list",), ("watch", "11"), ("watch", "11")]


def test_a_mirror_waiting_to_retry_relists_as_soon_as_the_server_answers_again():
    relisted = threading.Event()
    cluster = ScriptedCluster(
        lists=[([], "10"), ([], "11")],
        watches=[[Unavailable("watch Pod: the stream broke")], []],
        on_call=lambda call: relisted.set() if call == ("list",) and cluster.mirror.relists == 1 else None,
    )
    cluster.outage = outage = Outage()
    mirror = Mirror(cluster, POD, rng=MaxRng())  # its own wait: woken by the server's return
    mirror._streak = 4  # its 5th failure in a row: a 16 s wait
    cluster.mirror = mirror
    mirror.start()
    time.sleep(0.3)
    assert not relisted.is_set()
    outage.failed(Unavailable("x"), sent=outage.clock())
    started = time.monotonic()
    outage.answered()
    assert relisted.wait(2.0) and time.monotonic() - started < 1.0
    mirror.stop()
