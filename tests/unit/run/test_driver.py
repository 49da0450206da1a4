"""One driver per study (run/driver.py): the mark taken, refused, taken over, handed over,
expired and let go, over a store that behaves as the API server's compare-and-swap."""

from __future__ import annotations

import pytest

from stratctl.errors import ExitCode
from stratctl.run.driver import TTL, Driver, Mark, StudyHeld, expiry
from stratctl.run.loop import Loop
from stratctl.run.outage import Outage
from stratctl.run.progress import Progress, Silent


class Store:
    """A mark with a version: a write with a stale version loses (409)."""

    where = "Lease ns/stratctl-driver-s"

    def __init__(self):
        self.mark: Mark | None = None
        self.version = 0
        self.writes: list[Mark] = []

    def read(self):
        return self.mark, str(self.version) if self.mark else ""

    def write(self, mark, version):
        if version != (str(self.version) if self.mark else ""):
            return False
        self.mark, self.version = mark, self.version + 1
        self.writes.append(mark)
        return True

    def remove(self, version):
        if version == str(self.version):
            self.mark = None


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def driver(store, clock, me, **kw):
    said = []
    sleep = kw.pop("sleep", lambda s: None)
    made = Driver(store, "s", me, ttl=30.0, wall=clock, sleep=sleep, say=said.append, dead=lambda h: False, **kw)
    made.said = said
    return made


def test_a_free_study_is_taken_and_a_second_driver_is_refused_naming_the_first():
    store, clock = Store(), Clock()
    first = driver(store, clock, "laptop pid 1")
    first.acquire()
    assert store.mark == Mark("laptop pid 1", clock.now, clock.now, 30.0)
    clock.now += 3
    with pytest.raises(StudyHeld) as refused:
        driver(store, clock, "ci pid 2").acquire()
    assert refused.value.exit_code == ExitCode.CONFLICT == 4
    text = str(refused.value)
    assert text.startswith("study s is driven by laptop pid 1 since ")
    assert "renewed 3 s ago, Lease ns/stratctl-driver-s" in text and "--take-over" in text
    assert store.mark.holder == "laptop pid 1"  # nothing written by the refused one
    again = driver(store, clock, "laptop pid 1")  # the same driver again (a rerun in place): its own
    again.acquire()
    assert store.mark.holder == "laptop pid 1"


def test_the_mark_is_renewed_every_third_of_its_life_and_read_every_cycle():
    store, clock = Store(), Clock()
    d = driver(store, clock, "a")
    d.acquire()
    for _ in range(30):  # 30 cycles of 1 s
        clock.now += 1
        assert d.renew() is None
    assert len(store.writes) == 1 + 3  # taken, then renewed at 10, 20 and 30 s
    assert store.mark.renewed == clock.now and store.mark.since == clock.now - 30


def test_a_dead_drivers_mark_is_taken_once_it_expires_and_it_ends_if_it_comes_back():
    store, clock = Store(), Clock()
    old = driver(store, clock, "laptop pid 1")
    old.acquire()
    clock.now += 29
    with pytest.raises(StudyHeld):
        driver(store, clock, "pod p").acquire()
    clock.now += 1  # 30 s after its last renewal
    new = driver(store, clock, "pod p")
    new.acquire()
    assert store.mark.holder == "pod p"
    assert new.said == ["s: its driver laptop pid 1 stopped renewing its mark 30 s ago: this loop drives it now"]
    assert old.renew() == "pod p"  # the laptop wakes up: the study is not its own any more


def test_take_over_waits_for_the_holders_next_cycle_which_hands_over_and_ends():
    store, clock = Store(), Clock()
    old = driver(store, clock, "laptop pid 1")
    old.acquire()
    cycles = []

    def the_old_loop_cycles(seconds):  # while the new one waits: the old loop's next cycle
        clock.now += seconds
        cycles.append(old.renew())

    new = driver(store, clock, "pod p", take_over=True, sleep=the_old_loop_cycles)
    new.acquire()
    assert cycles == ["pod p"] and store.mark.holder == "pod p" and not store.mark.take_over
    assert new.said == ["s: asked laptop pid 1 to hand the study over; waiting for its next cycle"]
    assert new.renew() is None  # the new one drives on
    assert old.renew() == "pod p"


def test_a_holder_that_ends_while_asked_hands_the_mark_over_else_lets_it_go():
    store, clock = Store(), Clock()
    a = driver(store, clock, "a")
    a.acquire()
    a.release()
    assert store.mark is None  # the next submit need not wait 30 s
    a.acquire()
    store.write(Mark("a", clock.now, clock.now, 30.0, take_over="b"), store.read()[1])
    a.release()
    assert store.mark.holder == "b" and not store.mark.take_over
    a.release()  # not its own any more: left alone
    assert store.mark.holder == "b"


def test_expiry_is_30_s_or_three_cycles():
    assert (expiry(2.0), expiry(10.0), expiry(20.0)) == (TTL, 30.0, 60.0)


class Body:
    def __init__(self, cycles):
        self.progress = Progress(study="s", total=1)
        self.cycles, self.ended = cycles, None

    def step(self):
        self.cycles -= 1
        return self.cycles <= 0

    def pause(self):
        pass

    def left_behind(self):
        return ""

    def stopped(self, interrupted):
        self.ended = interrupted


def test_the_loop_renews_before_each_cycle_ends_when_handed_over_and_lets_go_at_its_end():
    store, clock = Store(), Clock()
    d = driver(store, clock, "a")
    d.acquire()
    body = Body(cycles=3)
    progress = Loop(body, Outage(60), Silent(), 1.0, driver=d).run()
    assert body.cycles == 0 and body.ended is False and not progress.handed_over
    assert store.mark is None  # the study finished: its mark went with the loop

    d.acquire()
    store.write(Mark("a", clock.now, clock.now, 30.0, take_over="b"), store.read()[1])
    body = Body(cycles=3)
    progress = Loop(body, Outage(60), Silent(), 1.0, driver=d).run()
    assert body.cycles == 3  # no cycle ran: handed over at the start of the first
    assert progress.handed_over == "b" and store.mark.holder == "b"


def test_the_file_mark_of_a_batch_study_is_compared_and_swapped_under_a_lock(tmp_path):
    """Slurm's and YARN's mark: `.driver.json` in the study's directory, the same decisions."""
    from stratctl.backends.batch.driverfile import FileStore

    store, clock = FileStore(tmp_path / "sweep"), Clock()
    assert store.read() == (None, "")
    first = Driver(store, "sweep", "login1 pid 10", wall=clock)
    first.acquire()
    mark, version = store.read()
    assert mark == Mark("login1 pid 10", clock.now, clock.now, 30.0) and version == "1"
    assert not store.write(Mark("login2 pid 20", clock.now, clock.now, 30.0), "")  # a stale version loses
    with pytest.raises(StudyHeld, match=r"driven by login1 pid 10 since .*\.driver\.json"):
        Driver(store, "sweep", "login2 pid 20", wall=clock).acquire()
    clock.now += 31
    Driver(store, "sweep", "login2 pid 20", wall=clock).acquire()
    assert store.read()[0].holder == "login2 pid 20" and first.renew() == "login2 pid 20"
    store.remove("1")  # not the version there: kept
    assert store.read()[1] == "2"
    store.remove("2")
    assert store.read() == (None, "") and not (tmp_path / "sweep" / ".driver.json").exists()


def test_a_killed_submit_of_this_machine_is_taken_over_at_once_by_its_rerun():
    """`kill -9` of a submit, then the same command again: its process is gone, so its mark
    is not waited for; a live process of this machine, or any other host's, is."""
    import os
    import socket
    import subprocess
    import sys

    from stratctl.run.driver import gone

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    host = socket.gethostname()
    assert gone(f"{host} pid {child.pid}")
    assert not gone(f"{host} pid {os.getpid()}")
    assert not gone(f"elsewhere pid {child.pid}") and not gone("pod driver-abc on node-1")

    store, clock = Store(), Clock()
    Driver(store, "s", f"{host} pid {child.pid}", wall=clock).acquire()
    said = []
    Driver(store, "s", f"{host} pid {os.getpid()}", wall=clock, say=said.append).acquire()
    assert store.mark.holder == f"{host} pid {os.getpid()}"
    assert said == [f"s: its driver {host} pid {child.pid} has ended: this loop drives it now"]


def test_a_driver_pod_that_is_gone_or_ended_is_dead_a_running_one_is_not():
    from stratctl.backends.kubernetes.objects.lease import pod_gone
    from tests.unit.fake_cluster import FakeCluster

    cluster = FakeCluster()
    for name, status, meta in [
        ("running", {"phase": "Running"}, {}),
        ("failed", {"phase": "Failed"}, {}),
        ("leaving", {"phase": "Running"}, {"deletionTimestamp": "2026-12-07T03:00:00Z"}),
    ]:
        cluster.create(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": cluster.namespace, **meta}}
        )
        cluster.objects[("v1", "Pod", cluster.namespace, name)]["status"] = status
    dead = pod_gone(cluster, cluster.namespace)
    assert not dead("pod running on node-1")
    assert dead("pod failed on node-1") and dead("pod leaving on node-1") and dead("pod never-was on node-1")
    assert not dead("elsewhere pid 1")  # not a pod: the host rule
