"""The etcd breaker's drain in the submit loop (`throttle.on_breaker`), on an in-memory
cluster in virtual time, fed scripted etcd latency traces: what is suspended, when it comes
back, and what is left alone (a critical study, a user's drain, `hold`)."""

from __future__ import annotations

import time

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP
from stratctl.backends.kubernetes.objects.record import (
    BREAKER_KEY,
    breaker_value,
    parse_record,
    suspended_of,
    suspended_patch,
)
from stratctl.backends.kubernetes.verbs.drain import drain, resume
from stratctl.backends.kubernetes.verbs.status import collect
from stratctl.backends.kubernetes.watch.prometheus import ControlPlane
from stratctl.run.breaker import BreakerConfig
from stratctl.view.tables import studies_table
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import Events, FakeClock, text
from tests.unit.loop import STUDY, make

# small numbers, so a trace fits in a few dozen one-second cycles
FAST = BreakerConfig(high=0.25, low_ratio=0.8, persist=3, clear=5, min_drained=10)
START = 1000.0  # FakeClock's


def slow_etcd(since: float, until: float):
    """etcd p99 of 600 ms from `since` to `until` seconds into the run, 50 ms otherwise."""
    return lambda t: 0.6 if since <= t < until else 0.05


class Etcd:
    """The background Prometheus reader's latest reading, from a trace over the loop's clock."""

    def __init__(self, clock, trace):
        self.clock, self.trace = clock, trace

    def latest(self):
        return ControlPlane(self.trace(self.clock() - START), None, at=self.clock())


def loop(tmp_path, cluster, clock, trace, on_breaker="drain", critical=False, every=6, name="loop"):
    """A submit loop of the 10-trial study (3 in flight) whose jobs take `every` virtual
    seconds to start and as long again to finish."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        STUDY.replace("name: loop", f"name: {name}").replace("max: 3}}", f"max: 3}}, on_breaker: {on_breaker}}}")
        + f"critical: {str(critical).lower()}\n"
    )
    submitter, trials = make(path, cluster, clock)

    def sleep(seconds):
        clock.sleep(seconds)
        if round(clock.now - START) % every == 0:
            cluster.advance()

    submitter.sleep = sleep
    submitter.source = path.read_text()
    submitter.record = submitter.record.__class__(**{**submitter.record.__dict__, "source": submitter.source})
    submitter.shedding.config = FAST
    submitter.prometheus = Etcd(clock, trace)
    submitter.reporter = Events(clock)
    return submitter, trials


def deletes_of(cluster):
    """Record the names of the jobs deleted."""
    deleted, original = [], cluster.delete

    def delete(kind, name, namespace=None, **given):
        if kind[1] == "Job":
            deleted.append(name)
        original(kind, name, namespace, **given)

    cluster.delete = delete
    return deleted


def succeeded_once(cluster, trials) -> bool:
    """Every trial has exactly one completed attempt."""
    done = [j["metadata"]["labels"][labels.TRIAL] for j in cluster.jobs(lambda p: p == "Completed")]
    return sorted(done) == sorted(t.name for t in trials)


def test_a_sustained_trip_drains_the_running_trials_and_they_resume_when_it_clears(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = loop(tmp_path, cluster, clock, slow_etcd(5, 20))
    deleted = deletes_of(cluster)
    seen = {}
    original = submitter.shedding.step

    def spy(observed, record):
        out = original(observed, record)
        t = round(clock() - START)
        seen.setdefault(t, (len(cluster.creates), sorted(deleted), dict(cluster.record("loop")["data"])))
        if t == 12:  # what the live panel and `status` say while the breaker holds the study
            seen["panel"] = submitter.shedding.panel()
            seen["reason"] = submitter.progress.reason  # the last cycle's decision
            seen["status"] = text(studies_table(collect(cluster, cluster.namespace, "loop").studies, now=time.time()))
        return out

    submitter.shedding.step = spy
    progress = submitter.run()
    events = submitter.reporter
    [tripped] = events.about("etcd breaker tripped")
    [cleared] = events.about("etcd breaker cleared")
    assert events.at[tripped] - START == 8  # above from 5, for persist (3 s)
    assert events.at[cleared] - START == 25  # below 200 ms from 20, for clear (5 s); drained 17 s >= 10
    first = [t.name for t in trials[:3]]
    assert "suspended 3 trial(s)" in tripped and sorted(deleted) == sorted(first)  # the three running
    creates, _, data = seen[12]  # while drained: the flag and the marks, nothing new
    record = parse_record({"metadata": {"labels": {}}, "data": data})
    assert record.breaker.startswith("etcd p99 600ms above 250ms") and not record.drained
    assert {t: (m["attempt"], m["by"]) for t, m in suspended_of({"data": data}).items()} == {
        t: (0, "breaker") for t in first
    }
    assert creates == 3 and seen[24][0] == 3  # nothing created from the trip until it cleared
    assert seen["panel"] == ("tripped 4s ago (etcd p99 600ms); resumes after 5s below 200ms and 6s more drained")
    assert "loop [breaker-drained]:" in seen["status"] and "suspended" in seen["status"]
    assert "loop: etcd breaker: etcd p99 600ms above 250ms for 3s" in seen["status"]
    assert seen["reason"].startswith("etcd breaker: etcd p99 600ms above 250ms")
    assert progress.succeeded == 10 and progress.failed == 0
    # the suspended trials came back once, as attempt 1 resuming from their checkpoints
    again = [j for j in cluster.jobs() if j["metadata"]["labels"][labels.ATTEMPT] == "1"]
    assert sorted(j["metadata"]["labels"][labels.TRIAL] for j in again) == sorted(first)
    for job in again:
        env = {e["name"]: e.get("value") for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}
        assert env["STRATCTL_RESUME"] == "1" and job["metadata"]["annotations"][labels.SUSPENSIONS] == "1"
    assert succeeded_once(cluster, trials) and len(cluster.creates) == 13
    assert cluster.record("loop")["data"][BREAKER_KEY] == ""


def test_spikes_shorter_than_persist_drain_nothing(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    spikes = lambda t: 0.9 if int(t) % 4 in (1, 2) else 0.05  # noqa: E731 - two seconds high in every four
    submitter, trials = loop(tmp_path, cluster, clock, spikes)
    deleted = deletes_of(cluster)
    progress = submitter.run()
    assert deleted == [] and submitter.reporter.about("etcd breaker") == []
    assert progress.succeeded == 10 and len(cluster.creates) == 10


def test_a_critical_study_is_never_drained(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = loop(tmp_path, cluster, clock, slow_etcd(5, 40), critical=True)
    deleted = deletes_of(cluster)
    held = []
    original = submitter.policy.decide
    submitter.policy.decide = lambda observed, now: held.append(original(observed, now).hold) or original(observed, now)
    progress = submitter.run()
    [said] = submitter.reporter.about("etcd breaker tripped")
    assert "is critical, not drained" in said
    assert deleted == [] and cluster.record("loop")["data"][BREAKER_KEY] == ""
    assert all(held[6:35])  # while etcd was slow the loop held new trials, as with hold
    assert progress.succeeded == 10 and len(cluster.creates) == 10


def run_with(tmp_path, on_breaker, shedding=True):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = loop(tmp_path, cluster, clock, slow_etcd(5, 20), on_breaker=on_breaker)
    if not shedding:
        submitter.shedding.step = lambda observed, record: observed
    deleted = deletes_of(cluster)
    progress = submitter.run()
    return cluster, submitter, deleted, progress, clock


def test_hold_keeps_the_loop_as_it_was(tmp_path):
    cluster, submitter, deleted, progress, clock = run_with(tmp_path, "hold")
    assert deleted == [] and cluster.record("loop")["data"][BREAKER_KEY] == ""
    assert submitter.reporter.about("etcd breaker") == []
    assert any("etcd p99 600ms above 250ms" in line and "(holding)" in line for line in submitter.reporter.lines)
    # the same run without the breaker drain in the loop at all: the same creates, events, schedule
    base_cluster, base, _, base_progress, base_clock = run_with(tmp_path, "hold", shedding=False)
    assert cluster.creates == base_cluster.creates and submitter.reporter.lines == base.reporter.lines
    assert clock.sleeps == base_clock.sleeps and progress.succeeded == base_progress.succeeded == 10


def test_a_users_drain_is_not_lifted_when_the_breaker_clears(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = loop(tmp_path, cluster, clock, slow_etcd(5, 20))
    original = submitter.shedding.step
    resumed = {}

    def step(observed, record):
        t = round(clock() - START)
        if t == 12:  # while the breaker holds it, a user drains the study
            drain(cluster, cluster.namespace, "loop", settle=0)
        if t == 40:  # long after the breaker cleared: nothing came back; the user resumes
            resumed["in_flight"] = len(cluster.jobs(lambda p: p in ("Pending", "Running")))
            resumed["creates"] = len(cluster.creates)
            resumed["drained"] = cluster.record("loop")["data"]["drained"]
            resumed["outcome"] = resume(cluster, cluster.namespace, "loop")
        return original(observed, record)

    submitter.shedding.step = step
    progress = submitter.run()
    [cleared] = submitter.reporter.about("etcd breaker cleared")
    assert cleared.endswith("the study stays drained by `stratctl drain` until `stratctl resume loop`")
    # the breaker cleared at 25; the user's drain still held the study at 40: nothing new, nothing back
    assert (resumed["in_flight"], resumed["creates"], resumed["drained"]) == (0, 3, "true")
    assert sorted(resumed["outcome"].resumed) == sorted(t.name for t in trials[:3])
    assert progress.succeeded == 10 and succeeded_once(cluster, trials)


def test_a_users_resume_leaves_the_breakers_trials_to_the_loop(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = loop(tmp_path, cluster, clock, slow_etcd(5, 20))
    submitter.wall = clock  # the heartbeat's time, which resume compares with its own
    original = submitter.shedding.step
    seen = {}

    def step(observed, record):
        t = round(clock() - START)
        if t == 12:
            seen["outcome"] = resume(cluster, cluster.namespace, "loop", clock=clock)
            seen["jobs"] = len(cluster.jobs(lambda p: p in ("Pending", "Running")))
        return original(observed, record)

    submitter.shedding.step = step
    submitter.save_summary = _heartbeat_now(submitter)
    progress = submitter.run()
    outcome = seen["outcome"]
    assert outcome.resumed == [] and sorted(outcome.left) == sorted(t.name for t in trials[:3])
    assert "stay suspended until it clears" in outcome.note and seen["jobs"] == 0
    assert progress.succeeded == 10 and succeeded_once(cluster, trials)


def _heartbeat_now(submitter):
    """save_summary, forced every cycle: the heartbeat `resume` looks for is always fresh."""
    original = submitter.save_summary
    return lambda force=False: original(force=True)


def test_a_breaker_flag_left_by_a_stopped_loop_is_lowered_and_its_trials_resume(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = loop(tmp_path, cluster, clock, lambda t: 0.05)
    submitter.ensure_record()  # as an earlier run left it: two trials suspended by its breaker, then it died
    marks = {t.name: {"attempt": 0, "by": "breaker", "suspensions": 1} for t in trials[:2]}
    patch = suspended_patch(marks)
    patch["data"][BREAKER_KEY] = breaker_value("etcd p99 600ms above 250ms", time.time())
    cluster.patch(CONFIGMAP, "stratctl-study-loop", patch)
    progress = submitter.run()
    assert submitter.reporter.about("flag left by an earlier run lowered")
    assert progress.succeeded == 10 and succeeded_once(cluster, trials)
    assert sorted(
        j["metadata"]["name"] for j in cluster.jobs() if j["metadata"]["labels"][labels.ATTEMPT] == "1"
    ) == sorted(f"{t.name}-a1" for t in trials[:2])


def test_resume_lifts_a_breaker_flag_no_submit_loop_follows(tmp_path):
    cluster, clock = FakeCluster(), FakeClock()
    submitter, trials = loop(tmp_path, cluster, clock, lambda t: 0.05)
    submitter.ensure_record()  # no heartbeat: no loop would ever lower the flag
    marks = {t.name: {"attempt": 0, "by": "breaker", "suspensions": 1} for t in trials[:2]}
    patch = suspended_patch(marks)
    patch["data"][BREAKER_KEY] = breaker_value("etcd p99 600ms above 250ms", time.time())
    cluster.patch(CONFIGMAP, "stratctl-study-loop", patch)
    outcome = resume(cluster, cluster.namespace, "loop")
    assert sorted(outcome.resumed) == sorted(t.name for t in trials[:2]) and outcome.left == []
    assert cluster.record("loop")["data"][BREAKER_KEY] == "" and parse_record(cluster.record("loop")).held is False
    assert sorted(j["metadata"]["name"] for j in cluster.jobs()) == sorted(f"{t.name}-a1" for t in trials[:2])
