"""A closed-loop search in the submit loop (backends/kubernetes/search/closedloop.py), on an in-memory cluster
in virtual time: asks as many as the policy admits, tells results as trials end, and a
loop killed mid-run is continued by the next without a duplicate and within the budget."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.objects.record import parse_record
from tests.unit.fake_cluster import FakeCluster
from tests.unit.fakes import FakeClock
from tests.unit.loop import make as make_loop

SEARCH = """\
name: tpe
namespace: stratctl-e2e
space:
  x: {type: uniform, low: -5, high: 5}
strategy: {kind: tpe, trials: 9, seed: 2}
objective: {metric: loss, direction: minimize}
trial:
  image: busybox
  resources: {requests: {nvidia.com/gpu: 1}}
  tasks: [{name: worker, replicas: 1}]
throttle: {qps: 100, burst: 10, parallelism: {min: 1, initial: 3, max: 3}}
"""


def make(path, cluster, clock, **options):
    """The loop of `submit FILE`: its record keeps the study's text (what `resume` renders from)."""
    submitter, first = make_loop(path, cluster, clock, **options)
    text = open(path).read()
    submitter.source = text
    submitter.record = replace(submitter.record, source=text)
    return submitter, first


def loss(params: dict) -> float:
    return (params["x"] - 2.0) ** 2


class SearchCluster(FakeCluster):
    """Jobs run one step and end; each that completes leaves a pod whose result is the
    trial's loss (as a trial's container writes to /dev/termination-log), unless the test
    says its trial writes none."""

    def __init__(self):
        super().__init__()
        self.silent: set[str] = set()  # trials that succeed without a result
        self.asked_in_flight: list[int] = []

    def advance(self, finish: str = "Completed") -> None:
        for job in self.jobs():
            phase = self.phase(job)
            if phase == "Running":
                self.set_phase(job, finish)
                self._pod(job)
            elif phase == "Pending":
                self.set_phase(job, "Running")

    def _pod(self, job: dict) -> None:
        meta = job["metadata"]
        params = json.loads(meta["annotations"][labels.PARAMS])
        trial = meta["labels"][labels.TRIAL]
        message = "" if trial in self.silent else json.dumps({"loss": loss(params)})
        self.objects[("v1", "Pod", self.namespace, f"{meta['name']}-worker-0")] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-worker-0",
                "namespace": self.namespace,
                "labels": {
                    "volcano.sh/job-name": meta["name"],
                    labels.STUDY: meta["labels"][labels.STUDY],
                    labels.TRIAL: trial,
                },
            },
            "status": {
                "phase": "Succeeded",
                "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 0, "message": message}}}],
            },
        }


@pytest.fixture
def search_file(tmp_path):
    def write(text: str = SEARCH) -> str:
        path = tmp_path / "study.yaml"
        path.write_text(text)
        return str(path)

    return write


def told(cluster) -> dict:
    return parse_record(cluster.record("tpe")).told


def test_the_loop_asks_what_it_admits_and_tells_every_result(search_file):
    cluster, clock = SearchCluster(), FakeClock()
    submitter, first = make(search_file(), cluster, clock)
    progress = submitter.run()
    assert progress.total == 9 and progress.succeeded == 9 and progress.created == 9
    assert len(set(cluster.creates)) == 9 == len(cluster.creates)  # nine distinct trials, each created once
    assert cluster.max_in_flight_seen == 3  # never more asked than admitted
    # the first three are the ones `plan` shows (same seed, no history)
    assert cluster.creates[:3] == [t.name for t in first]
    entries = told(cluster)
    assert set(entries) == set(cluster.creates)
    for _name, entry in entries.items():
        assert entry["state"] == "complete" and entry["values"] == [pytest.approx(loss(entry["params"]))]
    assert sorted(e["index"] for e in entries.values()) == list(range(9))
    assert cluster.record("tpe")["data"]["trials"] == "9"


class Killed(BaseException):
    """The launcher dying mid-run (SIGKILL): nothing after it runs."""


def kill_after(submitter, cluster, clock, cycles: int) -> None:
    """Run the loop until it has slept `cycles` times (the cluster moving on between), then kill it."""
    slept = []

    def die(seconds):
        slept.append(seconds)
        if len(slept) == cycles:
            raise Killed()
        clock.sleep(seconds)
        cluster.advance()

    submitter.sleep = die
    with pytest.raises(Killed):
        submitter.run()


def test_a_killed_loop_is_continued_without_a_duplicate_and_within_the_budget(search_file):
    cluster, clock = SearchCluster(), FakeClock()
    first, _ = make(search_file(), cluster, clock)
    kill_after(first, cluster, clock, 3)
    before = list(cluster.creates)
    assert 3 < len(before) < 9
    second, _ = make(search_file(), cluster, clock)
    progress = second.run()
    assert cluster.creates[: len(before)] == before
    assert len(cluster.creates) == 9 == len(set(cluster.creates))
    assert progress.succeeded == 9 and progress.total == 9
    assert progress.created == 9 - len(before)
    # the second loop learnt from what the first one's trials reported
    history = second.search.searcher.optuna_study.trials
    assert [t.state.name for t in history].count("COMPLETE") == 9


def test_the_history_outlives_cleaned_up_jobs(search_file):
    cluster, clock = SearchCluster(), FakeClock()
    text = SEARCH + "cleanup: delete\n"
    submitter, _ = make(search_file(text), cluster, clock)
    assert submitter.run().succeeded == 9
    assert not cluster.jobs()  # every job deleted as it ended
    assert len(told(cluster)) == 9
    # a rerun finds the search done from the record alone: nothing asked, nothing created
    again, _ = make(search_file(text), cluster, clock)
    progress = again.run()
    assert progress.created == 0 and len(cluster.creates) == 9 and progress.succeeded == 9


def test_a_trial_without_the_objective_in_its_result_is_told_as_failed(search_file):
    cluster, clock = SearchCluster(), FakeClock()
    submitter, first = make(search_file(), cluster, clock)
    cluster.silent.add(first[0].name)
    events = []
    submitter.reporter.event = events.append
    progress = submitter.run()
    assert progress.succeeded == 9  # the trial did succeed; the search learnt nothing from it
    assert told(cluster)[first[0].name]["state"] == "failed" and "values" not in told(cluster)[first[0].name]
    assert f"trial {first[0].name}: succeeded without loss in its result: told as failed" in events


def test_a_spent_discrete_space_ends_the_search_early(search_file):
    cluster, clock = SearchCluster(), FakeClock()
    text = SEARCH.replace("x: {type: uniform, low: -5, high: 5}", "x: {type: int, low: 0, high: 3}")
    submitter, _ = make(search_file(text), cluster, clock)
    events = []
    submitter.reporter.event = events.append
    progress = submitter.run()
    assert sorted(json.loads(j["metadata"]["annotations"][labels.PARAMS])["x"] for j in cluster.jobs()) == [0, 1, 2, 3]
    assert progress.total == 4 and progress.succeeded == 4 and progress.done
    assert "search: the space has no new point left after 4 trials" in events


def test_drained_trials_come_back_and_count_once(search_file):
    from stratctl.backends.kubernetes.verbs.drain import drain, resume

    cluster, clock = SearchCluster(), FakeClock()
    first, _ = make(search_file(), cluster, clock)
    kill_after(first, cluster, clock, 2)
    running = {j["metadata"]["labels"][labels.TRIAL] for j in cluster.jobs(lambda p: p in ("Pending", "Running"))}
    assert running
    [outcome] = drain(cluster, cluster.namespace, "tpe", settle=0)
    assert set(outcome.suspended) == running and not cluster.jobs(lambda p: p in ("Pending", "Running"))
    # a loop started while the study is drained knows the drained trials: it asks no one in their place
    held, _ = make(search_file(), cluster, clock)
    held.sleep = lambda seconds: (_ for _ in ()).throw(Killed())
    with pytest.raises(Killed):
        held.run()
    assert held.search.searcher.size == len(set(cluster.creates))
    assert running <= set(held.trials)
    # `stratctl resume` brings them back as their next attempt, from the marks alone (no job left)
    assert set(resume(cluster, cluster.namespace, "tpe").resumed) == running
    attempts = {
        j["metadata"]["labels"][labels.TRIAL]: j["metadata"]["labels"][labels.ATTEMPT]
        for j in cluster.jobs()
        if j["metadata"]["labels"][labels.TRIAL] in running
    }
    assert set(attempts.values()) == {"1"}
    progress = make(search_file(), cluster, clock)[0].run()
    trials = {j["metadata"]["labels"][labels.TRIAL] for j in cluster.jobs()}
    assert len(trials) == 9 and progress.succeeded == 9 and len(told(cluster)) == 9


def test_status_ranks_by_the_declared_objective(search_file):
    from stratctl.backends.kubernetes.verbs.status import declared_ranking

    cluster, clock = SearchCluster(), FakeClock()
    text = SEARCH.replace(
        "objective: {metric: loss, direction: minimize}",
        "objective: [{metric: score, direction: maximize}, {metric: loss}]",
    )
    submitter, _ = make(search_file(text), cluster, clock)
    submitter.run()
    assert declared_ranking(cluster, cluster.namespace, "tpe") == "-score"
    cluster.record("tpe")["data"]["spec"] = ""  # too large to keep: the study's text says it too
    assert declared_ranking(cluster, cluster.namespace, "tpe") == "-score"
    assert declared_ranking(cluster, cluster.namespace, "nope") is None


def test_the_best_trial_is_the_objectives_best(search_file):
    from stratctl.backends.kubernetes.verbs.status import best_trial

    cluster, clock = SearchCluster(), FakeClock()
    submitter, _ = make(search_file(), cluster, clock)
    submitter.run()
    row, ranking = best_trial(cluster, cluster.namespace, "tpe")
    assert ranking == "loss"
    assert row.result["loss"] == min(e["values"][0] for e in told(cluster).values())


def test_trials_that_ended_while_no_loop_followed_are_told_and_recorded(search_file):
    cluster, clock = SearchCluster(), FakeClock()
    first, _ = make(search_file(), cluster, clock)
    kill_after(first, cluster, clock, 2)
    recorded = set(told(cluster))
    cluster.advance()
    cluster.advance()  # the trials in flight end while no loop runs
    ended = {j["metadata"]["labels"][labels.TRIAL] for j in cluster.jobs(lambda p: p == "Completed")}
    assert ended - recorded
    make(search_file(), cluster, clock)[0].run()
    assert ended <= set(told(cluster)) and len(told(cluster)) == 9
    assert all(e["state"] == "complete" for e in told(cluster).values())


PRUNED = SEARCH.replace(
    "objective: {metric: loss, direction: minimize}\n",
    "objective: {metric: loss, direction: minimize}\npruner: {kind: median, startup_trials: 3}\n",
)
STEPS = 4  # steps a trial runs (one per cycle) before it ends


class LearningCluster(SearchCluster):
    """Running trials report one step per cycle along a curve set by their parameters
    (`loss + 1 / (step + 1)`): as `stratctl.trial.report()` prints them, lines of their
    container's log (`channel="log"`, step s at second s), or as `stratctl report` from
    outside writes them to their pod (`channel="annotation"`); a trial ends after STEPS
    steps with its final loss."""

    def __init__(self, channel: str = "log"):
        super().__init__()
        self.channel = channel
        self.log_reads: list[tuple[str, str | None]] = []  # (pod, sinceTime) of each read

    def pod_log(self, name, namespace=None, container=None, timestamps=False, since_time=None, limit_bytes=None, **_):
        from stratctl.trial.metrics import report_line

        assert timestamps and limit_bytes
        self.log_reads.append((name, since_time))
        pod = self.objects[("v1", "Pod", self.namespace, name)]
        lines = [b"2026-01-01T00:00:00.000000001Z starting\n"]
        for step, values in sorted((int(k), v) for k, v in pod.get("log-steps", {}).items()):
            lines.append(f"2026-01-01T00:00:{step + 1:02d}.5Z {report_line(step, values)}".encode())
        since = since_time or ""
        return iter([line for line in lines if line.decode()[:19] >= since[:19]])

    def advance(self, finish: str = "Completed") -> None:
        for job in self.jobs():
            phase, status = self.phase(job), job.setdefault("status", {})
            if phase == "Pending":
                self.set_phase(job, "Running")
                status["state"]["lastTransitionTime"] = "2026-01-01T00:00:00Z"
                status["steps"] = 0
            elif phase == "Running":
                status["steps"] += 1
                if status["steps"] >= STEPS:
                    self.set_phase(job, finish)
                self._pod(job)

    def _pod(self, job: dict) -> None:
        super()._pod(job)
        meta = job["metadata"]
        pod = self.objects[("v1", "Pod", self.namespace, f"{meta['name']}-worker-0")]
        final = loss(json.loads(meta["annotations"][labels.PARAMS]))
        steps = {str(s): {"loss": final + 1 / (s + 1)} for s in range(job["status"]["steps"])}
        if self.channel == "annotation":
            pod["metadata"]["annotations"] = {labels.REPORT: json.dumps(steps)}
        else:
            pod["log-steps"] = steps
        pod["metadata"]["uid"] = f"uid-{meta['name']}"
        pod["spec"] = {"containers": [{"name": "worker"}]}
        if self.phase(job) == "Running":
            pod["status"] = {"phase": "Running"}


class PodsWatch:
    """The loop's watch of pods, as ClusterSignals keeps it: here, the fake cluster's pods."""

    def __init__(self, cluster):
        self.cluster = cluster

    def items(self):
        return [o for (av, kind, _, _), o in self.cluster.objects.items() if kind == "Pod"]


def with_pods(submitter, cluster):
    submitter.mirrored = lambda: (PodsWatch(cluster).items(), [])
    return submitter


@pytest.mark.parametrize("channel", ["log", "annotation"])
def test_the_pruner_stops_losing_trials_and_their_gpus_go_to_the_next(search_file, channel):
    cluster, clock = LearningCluster(channel), FakeClock()
    submitter, _ = make(search_file(PRUNED), cluster, clock)
    events = []
    submitter.reporter.event = events.append
    progress = with_pods(submitter, cluster).run()
    entries = told(cluster)
    pruned = {n for n, e in entries.items() if e["state"] == "pruned"}
    assert pruned and progress.pruned == len(pruned) and progress.succeeded == 9 - len(pruned)
    assert progress.done and len(cluster.creates) == 9 == len(entries)  # the budget counts pruned trials
    complete = [e for e in entries.values() if e["state"] == "complete"]
    for name in pruned:
        entry = entries[name]
        assert entry["step"] < STEPS - 1 and entry["value"] == pytest.approx(
            loss(entry["params"]) + 1 / (entry["step"] + 1)
        )
        # worse than the median of the trials that ended, at the step it was stopped
        at_step = sorted(dict(e["steps"])[entry["step"]] for e in complete if entry["step"] in dict(e["steps"]))
        assert entry["value"] > at_step[len(at_step) // 2 - (len(at_step) % 2 == 0)]
        assert not [j for j in cluster.jobs() if j["metadata"]["labels"][labels.TRIAL] == name]  # its job deleted
        assert any(line.startswith(f"trial {name} pruned at step {entry['step']}: loss ") for line in events)
    assert parse_record(cluster.record("tpe")).finished == {name: "pruned" for name in pruned}
    # status shows them, with their parameters and last value
    from stratctl.backends.kubernetes.verbs.status import collect

    snap = collect(cluster, cluster.namespace, "tpe")
    rows = {r.trial: r for r in snap.trials}
    assert {n for n, r in rows.items() if r.state == "pruned"} == pruned
    assert all(rows[n].params == entries[n]["params"] and rows[n].result["loss"] == entries[n]["value"] for n in pruned)
    assert snap.studies[0].states["pruned"] == len(pruned)
    assert all(rows[n].finished is not None for n in pruned)  # when it was stopped: the study can end
    if channel == "log":  # each pod's log read for what is new since the whole second of the last line read
        for pod, since in cluster.log_reads:
            earlier = [s for p, s in cluster.log_reads if p == pod]
            assert since is None or since.endswith("Z") and "." not in since
            assert earlier == sorted(earlier, key=lambda s: s or "")


def test_a_rebuilt_search_keeps_pruned_trials_and_their_curves(search_file):
    cluster, clock = LearningCluster(), FakeClock()
    with_pods(make(search_file(PRUNED), cluster, clock)[0], cluster).run()
    again = with_pods(make(search_file(PRUNED), cluster, clock)[0], cluster)
    progress = again.run()
    assert progress.created == 0 and progress.done
    trials = again.search.searcher.optuna_study.trials
    states = {t.state.name for t in trials}
    assert "PRUNED" in states and all(t.intermediate_values for t in trials)


def test_no_record_write_takes_back_a_told_trial(search_file):
    """A pruned trial is written to the record at once (before its job goes); a write of
    the told trials queued earlier in the cycle must not land after it with the older copy."""
    cluster, clock = LearningCluster(), FakeClock()
    written: dict[str, str] = {}
    lost: list[set] = []
    patch = cluster.patch

    def watch(kind, name, body, namespace=None):
        key = "told"
        if key in body.get("data", {}):
            now = set(json.loads(body["data"][key]))
            if set(written) - now:
                lost.append(set(written) - now)
            written.update(dict.fromkeys(now, ""))
        return patch(kind, name, body, namespace)

    cluster.patch = watch
    # cycles closer than the record's write interval: told trials wait for the next write
    submitter, _ = make(search_file(PRUNED), cluster, clock, poll_interval=0.5)
    progress = with_pods(submitter, cluster).run()
    assert progress.pruned and not lost, lost
    assert progress.pruned == sum(e["state"] == "pruned" for e in told(cluster).values())
