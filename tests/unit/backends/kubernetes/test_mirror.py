"""The mirror's watch thread against a scripted cluster, in virtual time: whatever breaks a
watch, the thread relists and watches again with backoff, and the outage is visible (counters,
one warning when it breaks and one when it recovers, the submit loop's panel, log and metrics)."""

from __future__ import annotations

import io
import logging
import random
import time
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from urllib3.exceptions import ProtocolError

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import POD, VOLCANO_JOB
from stratctl.backends.kubernetes.watch.mirror import Mirror, watch_health
from stratctl.errors import Invalid, Unavailable
from stratctl.view.display import LogDisplay, progress_table
from stratctl.view.metrics import MetricsReporter
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock, MaxRng, text
from tests.unit.loop import make


def pod(name: str, version: str) -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}}


def since(clock_time: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(clock_time))


class ScriptedCluster:
    """`list` and `watch` answer from scripts. A list answer is (items, resourceVersion) or an
    exception; a watch answer is a list of events, then a normal end, unless an exception
    comes first. When a script runs out, the mirror is stopped (the test is over)."""

    def __init__(self, lists: list, watches: list, on_call=None):
        self.lists, self.watches = list(lists), list(watches)
        self.calls: list[tuple] = []
        self.on_call = on_call or (lambda call: None)
        self.mirror: Mirror | None = None

    def _over(self):
        self.mirror.stop()
        return Unavailable("the script is over")

    def list(self, kind, namespace=None, label_selector=None, all_namespaces=False, transform=None):
        self.calls.append(("list",))
        self.on_call(self.calls[-1])
        if not self.lists:
            raise self._over()
        answer = self.lists.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        items, version = answer
        return ([transform(o) for o in items] if transform else items), version

    def watch(
        self, kind, resource_version, namespace=None, label_selector=None, timeout_seconds=30, all_namespaces=False
    ):
        self.calls.append(("watch", resource_version))
        self.on_call(self.calls[-1])
        if not self.watches:
            raise self._over()
        for event in self.watches.pop(0):
            if isinstance(event, BaseException):
                raise event
            yield event


def run(cluster: ScriptedCluster, clock=None, rng=None) -> tuple[Mirror, list[float]]:
    """Start a mirror on the scripted cluster, in its real thread, and wait until the script
    is over; the waits it asked for are recorded, never slept."""
    clock = clock or FakeClock()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.sleep(seconds)

    mirror = Mirror(cluster, POD, clock=clock, sleep=sleep, rng=rng or MaxRng())
    cluster.mirror = mirror
    mirror.start()
    mirror._thread.join(timeout=10)
    assert not mirror._thread.is_alive(), "the script never ended: the thread is stuck"
    return mirror, waits


def shown(p) -> str:
    """The live panel as one line of words."""
    return " ".join(text(progress_table(p)).split())


def names(mirror: Mirror) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in mirror.items()}


@pytest.mark.parametrize(
    "error",
    [ValueError("boom"), KeyError("metadata"), RuntimeError("bug"), ProtocolError("Connection broken")],
    ids=lambda e: type(e).__name__,
)
def test_any_exception_is_survived_by_relisting_and_watching_again_from_the_new_version(error):
    cluster = ScriptedCluster(
        lists=[([pod("a", "1")], "10"), ([pod("a", "1"), pod("b", "12")], "12")],
        watches=[[("ADDED", pod("c", "11")), error], [("MODIFIED", pod("b", "13"))]],
    )
    mirror, waits = run(cluster)
    assert cluster.calls == [("list",), ("watch", "10"), ("list",), ("watch", "12"), ("watch", "13")]
    assert names(mirror) == {"a": "1", "b": "13"}  # c, missed by the relist, is gone
    assert waits == [1.0]
    assert mirror.relists == 2 and mirror.failures == 1 and mirror.healthy


def test_backoff_waits_double_up_to_the_cap_with_seeded_jitter_and_start_over_after_a_healthy_watch():
    down = Unavailable("list Pod: cannot reach the API server")
    cluster = ScriptedCluster(
        lists=[([], "10")] + [down] * 6 + [([], "20"), ([], "30")],
        watches=[[KeyError("type")], [], [ConnectionResetError(104, "Connection reset by peer")]],
    )
    mirror, waits = run(cluster, rng=random.Random(7))
    expected = random.Random(7)
    steps = [1, 2, 4, 8, 16, 30, 30] + [1]  # 7 failures in a row, a watch the server ended, then one more
    assert waits == [expected.uniform(step / 2, step) for step in steps]
    assert cluster.calls == (
        [("list",), ("watch", "10")] + [("list",)] * 7 + [("watch", "20"), ("watch", "20"), ("list",), ("watch", "30")]
    )
    assert mirror.failures == 8


def test_a_410_relists_at_once_without_a_wait_or_a_failure():
    gone = Invalid("watch Pod: too old resource version: 11 (42)", status=410, reason="Expired")
    cluster = ScriptedCluster(
        lists=[([pod("a", "1")], "10"), ([pod("b", "42")], "42")],
        watches=[[("ADDED", pod("c", "11")), gone], [("ADDED", pod("d", "43"))]],
    )
    mirror, waits = run(cluster)
    assert cluster.calls == [("list",), ("watch", "10"), ("list",), ("watch", "42"), ("watch", "43")]
    assert waits == [] and mirror.failures == 0 and mirror.healthy
    assert names(mirror) == {"b": "42", "d": "43"}


def test_a_410_on_the_version_just_listed_backs_off_instead_of_relisting_in_a_tight_loop():
    gone = Invalid("watch Pod: too old resource version: 10 (42)", status=410, reason="Expired")
    cluster = ScriptedCluster(lists=[([], "10"), ([], "10"), ([], "42")], watches=[[gone], [gone], []])
    mirror, waits = run(cluster)
    assert waits == [1.0, 2.0] and mirror.failures == 2
    assert cluster.calls == [
        ("list",),
        ("watch", "10"),
        ("list",),
        ("watch", "10"),
        ("list",),
        ("watch", "42"),
        ("watch", "42"),
    ]


def test_health_flips_when_the_watch_breaks_and_back_when_events_flow_with_one_warning_each(caplog):
    clock = FakeClock(1000.0)
    seen = {}

    def on_call(call):  # what the loop would read from the mirror at that moment
        mirror = cluster.mirror
        seen.setdefault(len(cluster.calls), (mirror.healthy, mirror.failures, mirror.problem()))

    reset = ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')")
    cluster = ScriptedCluster(
        lists=[([], "10"), Unavailable("list Pod: cannot reach the API server"), ([], "20"), ([], "30")],
        watches=[[reset], [("ADDED", pod("a", "21")), ValueError("bad line")], [("ADDED", pod("b", "31"))]],
        on_call=on_call,
    )
    with caplog.at_level(logging.DEBUG, logger="stratctl.backends.kubernetes.watch.mirror"):
        mirror, waits = run(cluster, clock=clock)
    assert waits == [1.0, 2.0, 1.0]
    broken = f"Pod watch broken since {since(1000.0)}: ProtocolError: Connection broken: ConnectionResetError"
    assert seen[3] == (False, 1, broken + "(104, 'Connection reset by peer')")  # the relist after the reset
    assert seen[4] == (False, 2, f"Pod watch broken since {since(1000.0)}: list Pod: cannot reach the API server")
    assert seen[5] == seen[4]  # a relist alone does not end the outage: the watch has to work again
    assert seen[6] == (False, 3, f"Pod watch broken since {since(1003.0)}: ValueError: bad line")  # a new outage
    assert seen[8] == (True, 3, None)
    assert mirror.healthy and mirror.failures == 3 and mirror.last_error == "ValueError: bad line"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "watch of Pod broke: ProtocolError: Connection broken: ConnectionResetError(104, 'Connection reset by peer')"
        "; relisting and watching again, retrying with backoff (up to 30s)",
        "watch of Pod recovered after 3s and 2 failure(s)",
        "watch of Pod broke: ValueError: bad line; relisting and watching again, retrying with backoff (up to 30s)",
        "watch of Pod recovered after 1s and 1 failure(s)",
    ]


def test_a_broken_watch_shows_in_the_loops_progress_panel_log_lines_and_metrics(study_file):
    clock = FakeClock(1000.0)
    broken = ScriptedCluster(lists=[([], "10")], watches=[[ConnectionResetError(104, "Connection reset by peer")]])
    mirror, _ = run(broken, clock=clock)
    submitter, _ = make(study_file(), FakeCluster(), clock)
    submitter.jobs = Mirror(None, VOLCANO_JOB)  # healthy
    submitter.signals = SimpleNamespace(nodes=None, pods=mirror, groups=None)  # the pods' watch is down
    submitter.tally({})
    p = submitter.progress
    problem = f"Pod watch broken since {since(1000.0)}: ConnectionResetError: [Errno 104] Connection reset by peer"
    assert (p.watch_errors, p.watch_problem) == (1, problem)
    assert f"watches {problem} (1 failures so far)" in shown(p)
    stream = io.StringIO()
    log = LogDisplay(stream=stream, clock=clock)
    log.update(p)
    assert stream.getvalue().endswith(f"0 x 429; {problem}\n")
    metrics = MetricsReporter()
    metrics.update(p)
    exported = generate_latest(metrics.registry).decode()
    assert 'stratctl_watch_broken{study="loop"} 1.0' in exported
    assert 'stratctl_watch_failures_total{study="loop"} 1.0' in exported

    mirror._recovered()  # as the next event would
    submitter.tally({})
    assert (p.watch_errors, p.watch_problem) == (1, None)
    assert "watches healthy again (1 failures so far)" in shown(p)
    log.update(p)
    assert stream.getvalue().splitlines()[-1].endswith("0 x 429")  # a line says nothing is broken now
    metrics.update(p)
    assert 'stratctl_watch_broken{study="loop"} 0.0' in generate_latest(metrics.registry).decode()


def test_watch_health_sums_every_mirror_and_names_only_the_broken_ones():
    healthy = Mirror(None, POD)
    healthy.failures = 2  # two outages, both over
    broken = ScriptedCluster(lists=[([], "10"), ([], "11")], watches=[[ValueError("x")]])
    mirror, _ = run(broken, clock=FakeClock(1000.0))  # broke, relisted, then the script ended its watch
    assert watch_health([healthy, None, object(), mirror]) == (
        3,
        f"Pod watch broken since {since(1000.0)}: ValueError: x",
    )
    assert watch_health([healthy, None]) == (2, None)


def test_the_mirror_tells_the_last_state_of_deleted_objects_and_of_those_a_relist_no_longer_finds():
    gone = []
    a, b = pod("a", "1"), pod("b", "2")
    cluster = ScriptedCluster(
        lists=[([a, b], "10"), ([], "20")],
        watches=[[("MODIFIED", pod("a", "11")), ("DELETED", pod("a", "12")), RuntimeError("gap")]],
    )
    clock = FakeClock()
    mirror = Mirror(cluster, POD, clock=clock, sleep=clock.sleep, on_delete=gone.append)
    cluster.mirror = mirror
    mirror.start()
    mirror._thread.join(timeout=10)
    assert [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in gone] == [("a", "12"), ("b", "2")]
    assert mirror.listed_at == clock.now  # the last list: complete from then on


def test_a_trimmed_job_keeps_what_the_loop_reads_in_a_fraction_of_the_bytes(tmp_path):
    import json

    from stratctl.backends.kubernetes.objects.gpus import job_gpus
    from stratctl.backends.kubernetes.objects.state import attempt_of, classify, podgroup_name
    from stratctl.backends.kubernetes.watch.mirror import trimmed_job
    from stratctl.core.space import expand
    from stratctl.run.queues import queue_of_job
    from tests.unit.rendering import Renderer
    from tests.unit.studies import MINIMAL, load

    text = MINIMAL.replace(
        'args: ["--lr={{ params.lr }}"]',
        'args: ["--lr={{ params.lr }}"]\n  env: {DATA: /data/' + "x" * 400 + '}\n  command: ["python", "-m", "train"]',
    )
    study = load(tmp_path, text)
    job = Renderer(study).render(expand(study)[0], attempt=1)[0]
    job["metadata"].update(uid="u-1", managedFields=[{"manager": "stratctl", "fieldsV1": {"f:spec": {}}}])
    job["status"] = {"state": {"phase": "Running"}, "running": 2, "retryCount": 1}
    before = json.loads(json.dumps(job))
    after = trimmed_job(json.loads(json.dumps(job)))
    assert len(json.dumps(after)) < 0.6 * len(json.dumps(before))
    for read in (job_gpus, queue_of_job, classify, attempt_of, podgroup_name):
        assert read(after) == read(before), read.__name__
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert after["metadata"]["labels"] == before["metadata"]["labels"] and "managedFields" not in after["metadata"]
    assert after["status"] == before["status"]
    assert {k: v for k, v in after["spec"].items() if k != "tasks"} == {
        k: v for k, v in before["spec"].items() if k != "tasks"
    }
    # another trial of the same shape: its trimmed pod spec is the very same object
    other = Renderer(study).render(expand(study)[1], attempt=0)[0]
    assert other["metadata"]["name"] != job["metadata"]["name"]
    other["status"] = {"state": {"phase": "Running"}, "running": 2, "retryCount": 0}
    again = trimmed_job(json.loads(json.dumps(other)))
    assert again["spec"] is after["spec"]  # the whole trimmed spec: one object per shape
    # each answer was parsed apart, yet the two jobs share their keys and short values
    for a, b in ((again["metadata"], after["metadata"]), (again["status"], after["status"])):
        keys = {k: k for k in b}
        assert all(keys[k] is k for k in a)
    assert again["metadata"]["labels"][labels.STUDY] is after["metadata"]["labels"][labels.STUDY]
    assert again["status"]["state"]["phase"] is after["status"]["state"]["phase"]


def test_a_thousand_mirrored_jobs_hold_a_fraction_of_their_parsed_bytes(tmp_path):
    """The memory of 1,000 jobs parsed one answer at a time, as a watch brings them, and
    trimmed: under 2.5 KB a job (6.2 KB when each kept its own spec and strings)."""
    import json
    import tracemalloc

    from stratctl.backends.kubernetes.watch.mirror import trimmed_job
    from stratctl.core.space import expand
    from tests.unit.rendering import Renderer
    from tests.unit.studies import MINIMAL, load

    study = load(tmp_path, MINIMAL)
    job = Renderer(study).render(expand(study)[0], attempt=0)[0]
    job["status"] = {
        "state": {"phase": "Pending", "lastTransitionTime": "2026-12-05T15:17:35Z"},
        "conditions": [{"status": "Pending", "lastTransitionTime": "2026-12-05T15:17:35Z"}],
        "minAvailable": 2,
    }
    answers = []
    for i in range(1000):
        job["metadata"].update(
            name=f"mirror-{i:010x}",
            uid=f"623b6fb2-e9e4-4f21-ad4c-{i:012x}",
            resourceVersion=str(100000 + i),
            creationTimestamp="2026-12-05T15:16:12Z",
        )
        job["metadata"]["labels"][labels.TRIAL] = job["metadata"]["name"]
        answers.append(json.dumps(job).encode())
    tracemalloc.start()
    try:
        kept = [trimmed_job(json.loads(answer)) for answer in answers]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == 1000 and held / 1000 < 2500, f"{held / 1000:.0f} bytes a job"
