"""Intermediate values (backends/kubernetes/search/intermediate.py): what `stratctl report` writes to the
trial's pod, how often, and what the loop reads back."""

from __future__ import annotations

import json

import pytest

import stratctl
from stratctl import labels
from stratctl.backends.kubernetes.search import intermediate
from stratctl.backends.kubernetes.search.intermediate import KEPT, parse_values, report, steps_of
from stratctl.errors import UsageError


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_values_are_metric_equals_number():
    assert parse_values(["loss=0.41", "acc=9e-1"]) == {"loss": 0.41, "acc": 0.9}
    for bad, message in (
        (["loss"], "'loss': give values as METRIC=NUMBER (e.g. loss=0.41)"),
        (["loss=x"], "'loss=x': 'x' is not a number"),
        (["loss=nan"], "'loss=nan': the value must be a finite number"),
        ([], "nothing to report: give at least one METRIC=NUMBER"),
    ):
        with pytest.raises(UsageError) as e:
            parse_values(bad)
        assert str(e.value) == message


def test_reports_are_written_at_most_every_interval_and_none_is_lost(tmp_path):
    clock, writes = Clock(), []
    kw = dict(
        pod="t-0-worker-0",
        path=str(tmp_path / "h.json"),
        clock=clock,
        patch=lambda pod, ns, body: writes.append((pod, json.loads(body["metadata"]["annotations"][labels.REPORT]))),
    )
    assert report(0, {"loss": 1.0}, **kw)  # the first goes out at once
    clock.now += 2
    assert not report(1, {"loss": 0.8}, **kw)  # within 5 s: kept for the next write
    clock.now += 4
    assert report(2, {"loss": 0.6, "acc": 0.5}, **kw)
    assert writes == [
        ("t-0-worker-0", {"0": {"loss": 1.0}}),
        ("t-0-worker-0", {"0": {"loss": 1.0}, "1": {"loss": 0.8}, "2": {"loss": 0.6, "acc": 0.5}}),
    ]
    clock.now += 1
    assert report(2, {"acc": 0.55}, flush=True, **kw)  # --flush: now; the same step merges
    assert writes[-1][1]["2"] == {"loss": 0.6, "acc": 0.55}


def test_the_annotation_keeps_the_latest_steps(tmp_path):
    writes = []
    kw = dict(
        pod="p",
        path=str(tmp_path / "h.json"),
        interval=0,
        patch=lambda pod, ns, body: writes.append(json.loads(body["metadata"]["annotations"][labels.REPORT])),
    )
    for step in range(KEPT + 30):
        report(step, {"loss": 1 / (step + 1)}, **kw)
    assert sorted(map(int, writes[-1])) == list(range(30, KEPT + 30))


def test_a_report_needs_a_whole_step_and_a_pod(tmp_path, monkeypatch):
    monkeypatch.delenv(labels.ENV_POD, raising=False)
    monkeypatch.delenv("HOSTNAME", raising=False)
    with pytest.raises(UsageError, match="which pod"):
        report(1, {"loss": 1.0}, path=str(tmp_path / "h"), patch=lambda *a: None)
    for step in (-1, 1.5, True):
        with pytest.raises(UsageError, match="step must be a whole number"):
            report(step, {"loss": 1.0}, pod="p", path=str(tmp_path / "h"), patch=lambda *a: None)


def test_the_python_function_reports_to_the_pod_it_runs_in(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setenv(labels.ENV_POD, "tpe-abc-worker-0")
    monkeypatch.setenv("STRATCTL_REPORT_FILE", str(tmp_path / "h.json"))
    monkeypatch.setattr(
        intermediate,
        "_patch",
        lambda kubeconfig, context: (
            lambda pod, ns, body: seen.append((pod, ns, body["metadata"]["annotations"][labels.REPORT]))
        ),
    )
    assert stratctl.report(3, loss=0.41) is True
    assert seen == [("tpe-abc-worker-0", None, '{"3":{"loss":0.41}}')]


def pod(job: str, steps: dict | str | None) -> dict:
    notes = {} if steps is None else {labels.REPORT: steps if isinstance(steps, str) else json.dumps(steps)}
    return {"metadata": {"labels": {"volcano.sh/job-name": job}, "annotations": notes}}


def test_the_loop_reads_each_jobs_steps_of_one_metric():
    pods = [
        pod("a", {"0": {"loss": 1.0, "acc": 0.1}, "1": {"loss": 0.5}}),
        pod("a", {"1": {"loss": 0.7}, "2": {"loss": 0.4}}),  # a second worker of the gang: its first word wins
        pod("b", {"0": {"acc": 0.3}, "x": {"loss": 1}, "1": {"loss": "nan"}, "2": {"loss": True}}),
        pod("c", "not json"),
        pod("d", None),
        {"metadata": {"annotations": {labels.REPORT: "{}"}}},
    ]
    assert steps_of(pods, "loss") == {"a": {0: 1.0, 1: 0.5, 2: 0.4}, "b": {}}


def test_the_python_function_never_stops_the_training(tmp_path, monkeypatch, capsys):
    from stratctl.errors import ClusterError

    monkeypatch.setenv(labels.ENV_POD, "p")
    monkeypatch.setenv("STRATCTL_REPORT_FILE", str(tmp_path / "h.json"))
    monkeypatch.setattr(stratctl, "_said", set())

    def refused(kubeconfig, context):
        def patch(pod, ns, body):
            raise ClusterError("patch Pod p: forbidden: User cannot patch resource pods")

        return patch

    monkeypatch.setattr(intermediate, "_patch", refused)
    assert stratctl.report(0, loss=1.0) is False
    assert stratctl.report(1, loss=0.9, flush=True) is False
    assert capsys.readouterr().err == (
        "stratctl.report: not written (patch Pod p: forbidden: User cannot patch resource pods); training goes on\n"
    )  # said once


def test_reports_for_two_pods_from_one_machine_keep_a_history_each(tmp_path, monkeypatch):
    """`stratctl report --pod NAME` from outside, for several pods and studies: each pod's
    annotation holds its own steps alone (one shared file mixed them)."""
    monkeypatch.delenv("STRATCTL_REPORT_FILE", raising=False)
    monkeypatch.setattr(intermediate.tempfile, "gettempdir", lambda: str(tmp_path))
    sent: dict[tuple, str] = {}

    def patch(pod, ns, body):
        sent[(ns, pod)] = body["metadata"]["annotations"][labels.REPORT]

    for step in range(2):
        for ns, name, value in [("a", "p-0", 1.0), ("a", "q-0", 2.0), ("b", "p-0", 3.0)]:
            report(step, {"loss": value + step}, pod=name, namespace=ns, flush=True, patch=patch)
    assert sent == {
        ("a", "p-0"): '{"0":{"loss":1.0},"1":{"loss":2.0}}',
        ("a", "q-0"): '{"0":{"loss":2.0},"1":{"loss":3.0}}',
        ("b", "p-0"): '{"0":{"loss":3.0},"1":{"loss":4.0}}',
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "stratctl-report-a-p-0.json",
        "stratctl-report-a-q-0.json",
        "stratctl-report-b-p-0.json",
    ]
