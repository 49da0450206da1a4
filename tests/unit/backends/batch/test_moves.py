"""Queue fallback by moves (YARN): which waiting attempts move to which queue, decided from
how long each waited where it is; the loop's capability makes the moves, once per bound."""

from __future__ import annotations

from stratctl.attempt import Attempt
from stratctl.backends.batch.moves import Move, QueueMoves, due
from stratctl.errors import Invalid
from stratctl.run.policy import Decision
from stratctl.trialstate import TrialState

QUEUES = ("a", "b", "c")
DECISION = Decision(target=1, hold=False, reason="")


def test_an_attempt_past_the_bound_moves_to_the_next_queue_of_the_list():
    waiting = {"t0": ("a", 6.0), "t1": ("b", 9.0), "t2": ("a", 5.0), "t3": ("c", 60.0), "t4": ("x", 60.0)}
    assert due(waiting, QUEUES, bound=5.0) == [Move("t0", "a", "b", 6.0), Move("t1", "b", "c", 9.0)]
    # t2 waited exactly the bound; t3 is in the last queue; t4 in a queue the study does not list


def test_the_rm_may_name_a_queue_by_its_path():
    assert due({"t0": ("root.a", 6.0)}, QUEUES, bound=5.0) == [Move("t0", "a", "b", 6.0)]


class Scheduler:
    queues = QUEUES

    def __init__(self, refuse=False, rooms=None):
        self.moved: list[tuple[str, str]] = []
        self.refuse = refuse
        self.rooms = rooms or {}  # queue -> GPUs it may still take (absent: not said)
        self.asked: list[str] = []

    def room(self, queue):
        self.asked.append(queue)
        return self.rooms.get(queue)

    def move(self, attempt, queue):
        if self.refuse:
            raise Invalid("the target queue is full")
        self.moved.append((attempt.job, queue))


def pending(trial, queue, job, native="ACCEPTED", **kw):
    return Attempt(trial, 0, TrialState.PENDING, job=job, native_state=native, queue=queue, **kw)


def test_the_capability_moves_each_waiting_application_once_per_bound_and_says_so():
    now = [100.0]
    seen = {
        "t0": pending("t0", "a", "app_1"),
        "t1": pending("t1", "b", "app_2", native="RUNNING"),  # its AM runs, its gang waits: it moves too
        "t2": pending("t2", "a", "app_3", queued=True),  # held back by its block
        "t3": Attempt("t3", 0, TrialState.RUNNING, job="app_4", native_state="RUNNING", queue="a"),
    }
    since = {"t0": 90.0, "t1": 90.0, "t2": 90.0}
    events: list[str] = []
    scheduler = Scheduler()
    moves = QueueMoves(scheduler, lambda: seen, lambda: since, 5.0, lambda: now[0], events.append)
    moves.decided(DECISION)
    assert scheduler.moved == [("app_1", "b"), ("app_2", "c")]
    assert events[0] == "trial t0 moved: queue a → b, it had waited 10s without starting"
    seen["t0"] = pending("t0", "b", "app_1")  # as the RM lists them now
    seen["t1"] = pending("t1", "c", "app_2", native="RUNNING")  # in the last queue: it stays
    scheduler.moved.clear()
    now[0] = 104.0
    moves.decided(DECISION)
    assert scheduler.moved == []  # 4 s in b: within the bound
    now[0] = 106.0
    moves.decided(DECISION)
    assert scheduler.moved == [("app_1", "c")]


def test_a_move_the_rm_refuses_is_said_and_asked_again_only_after_another_bound():
    now = [100.0]
    seen = {"t0": pending("t0", "a", "app_1")}
    events: list[str] = []
    moves = QueueMoves(Scheduler(refuse=True), lambda: seen, lambda: {"t0": 90.0}, 5.0, lambda: now[0], events.append)
    moves.decided(DECISION)
    moves.decided(DECISION)
    assert events == ["trial t0: not moved to queue b (the target queue is full)"]


def test_an_application_moves_only_while_the_next_queue_has_room_for_its_gpus():
    now = [100.0]
    seen = {t: pending(t, "a", f"app_{i}") for i, t in enumerate(("t0", "t1", "t2"))}
    since = dict.fromkeys(seen, 90.0)
    gpus = {"t0": 2, "t1": 2, "t2": 1}
    events: list[str] = []
    scheduler = Scheduler(rooms={"b": 3})
    moves = QueueMoves(scheduler, lambda: seen, lambda: since, 5.0, lambda: now[0], events.append, gpus.__getitem__)
    moves.decided(DECISION)
    assert scheduler.moved == [("app_0", "b"), ("app_2", "b")]  # 2 GPUs, then 1: t1's 2 no longer fit
    assert scheduler.asked == ["b"]  # the room read once a cycle
    assert events[1] == "trial t1: waits in queue a: queue b has room for 1 GPU, it needs 2"
    now[0] = 101.0
    moves.decided(DECISION)  # still no room: kept, and not said again
    assert sum("waits in queue a" in e for e in events) == 1
    scheduler.rooms["b"] = 2  # room again: it moves at once, no second bound to wait out
    seen.update(t0=pending("t0", "b", "app_0"), t2=pending("t2", "b", "app_2"))
    now[0] = 102.0
    moves.decided(DECISION)
    assert scheduler.moved[-1] == ("app_1", "b")
