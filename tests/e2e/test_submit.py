"""`stratctl submit` against the real testbed: throttled by the API server, exactly once, dry runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, VOLCANO_JOB, Cluster
from stratctl.backends.launch import Connection, submit_study
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import NotFound, Throttled
from stratctl.run.options import SubmitOptions
from tests.e2e.support import busybox_study as study_yaml
from tests.e2e.support import unique

pytestmark = pytest.mark.e2e


@pytest.fixture
def admin(api):
    return api


def study_jobs(admin: Cluster, name: str, kind=VOLCANO_JOB) -> list[dict]:
    items, _ = admin.list(kind, label_selector=f"{labels.STUDY}={name}")
    return items


class RequestLog:
    """Records, around the real adapter, when each request was sent and how it ended."""

    def __init__(self, monkeypatch):
        self.entries: list[tuple[str, float, float, float | None]] = []  # what, sent, answered, retry_after
        self._lock = threading.Lock()
        original = Cluster._send

        def send(cluster, method, path, query, body, what, content_type, **kw):
            sent = time.monotonic()
            retry_after = None
            try:
                return original(cluster, method, path, query, body, what, content_type, **kw)
            except Throttled as exc:
                retry_after = exc.retry_after
                raise
            finally:
                with self._lock:
                    self.entries.append((f"{method} {what}", sent, time.monotonic(), retry_after))

        monkeypatch.setattr(Cluster, "_send", send)


def test_200_trials_by_a_throttled_user_are_each_created_once_and_429s_are_honoured(
    testbed, admin, tmp_path, studies, monkeypatch
):
    name = unique("burst200")
    studies(name)
    path = tmp_path / "study.yaml"
    path.write_text(study_yaml(name, testbed.namespace, 200, duration="1s"))
    log = RequestLog(monkeypatch)
    testbed.apf(True)
    try:
        progress = submit_study(
            path,
            Connection(testbed.kubeconfig, testbed.restricted_context, testbed.namespace),
            SubmitOptions(detach=True, workers=48, poll_interval=0.5),
            qps=0,  # no client-side rate limit: the API server's 429s are the only brake
            burst=1,
        )
    finally:
        testbed.apf(False)
    jobs = study_jobs(admin, name)
    expected = {t.name for t in expand(load_study(path))}
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(expected)
    assert progress.created == 200 and not progress.errors
    throttled = [e for e in log.entries if e[3] is not None]
    assert progress.throttled_429 == len(throttled) > 0, "the APF limit should have answered some requests with 429"
    # honoured: after the first 429 nothing was sent for its Retry-After, up to the 1 s first pause
    first = min(throttled, key=lambda e: e[2])
    pause = min(first[3], 1.0)
    assert not [e for e in log.entries if first[2] + 0.05 < e[1] < first[2] + pause - 0.05], "sent during the pause"
    # every refused request was sent again
    for what, _, answered, _ in throttled:
        assert [sent for w, sent, _, _ in log.entries if w == what and sent > answered], f"{what} was never retried"
    # fitting in the one seat: within 30 s of a 429, creates went one at a time (the pause over)
    late = sorted(
        (e for e in log.entries if e[0].startswith("POST create Job") and e[1] > first[2] + pause + 0.1),
        key=lambda e: e[1],
    )
    refused_at = sorted(e[2] for e in throttled)
    for before, after in zip(late, late[1:]):
        if any(0 <= after[1] - t < 30 for t in refused_at):
            assert after[1] >= before[2] - 0.01, f"{before[0]} and {after[0]} overlapped while throttled"
    creates = [e for e in log.entries if e[0].startswith("POST create Job") and e[3] is None]
    assert len(creates) == 200  # one successful create per trial, no more


def run_cli(*args: str, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "stratctl", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.parametrize("kill_at", [0, 1, 25, 59])
def test_sigkill_at_any_moment_then_rerun_creates_each_trial_exactly_once(testbed, admin, tmp_path, studies, kill_at):
    """Kill -9 once `kill_at` trials exist (0: before the first create), then rerun."""
    name = unique(f"kill{kill_at}")
    studies(name)
    path = tmp_path / "study.yaml"
    path.write_text(study_yaml(name, testbed.namespace, 60, duration="1s"))
    common = [
        "--kubeconfig",
        testbed.kubeconfig,
        "--context",
        testbed.restricted_context,
        "--qps",
        "20",
        "--burst",
        "5",
    ]
    first = run_cli("submit", str(path), *common, "--detach")
    deadline = time.monotonic() + 60
    while len(study_jobs(admin, name)) < kill_at and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = {j["metadata"]["name"]: j["metadata"]["uid"] for j in study_jobs(admin, name)}
    assert len(before) >= kill_at
    rerun = run_cli("submit", str(path), *common, "--detach", "-o", "json")
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    # a detached submit says what it does without: the GPU signal and yielding
    assert "--detach: returns once every trial is created, not watching nodes and pods until then (no GPU signal" in err
    after = {j["metadata"]["name"]: j["metadata"]["uid"] for j in study_jobs(admin, name)}
    assert sorted(after) == sorted(t.name for t in expand(load_study(path)))
    # what the killed run created was recognised, not deleted and recreated
    assert all(after[n] == uid for n, uid in before.items())
    summary = json.loads(out)
    # the rerun created only what was missing (a create the killed run had in flight may land late)
    assert summary["created"] <= 60 - len(before)
    assert summary["errors"] == {}


def test_server_dry_run_creates_nothing_and_reports_the_servers_message(testbed, admin, tmp_path, studies):
    name = unique("dryrun")
    studies(name)
    good = tmp_path / "good.yaml"
    good.write_text(study_yaml(name, testbed.namespace, 5))
    common = ["--kubeconfig", testbed.kubeconfig, "--context", testbed.restricted_context]
    ok = run_cli("submit", str(good), *common, "--dry-run=server", "-o", "json")
    out, err = ok.communicate(timeout=120)
    assert ok.returncode == 0, err
    assert study_jobs(admin, name) == []
    with pytest.raises(NotFound):
        admin.get(CONFIGMAP, f"stratctl-study-{name}")

    # a plain batch Job whose CPU request exceeds its limit: only the API server's validation catches it
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        study_yaml(name, testbed.namespace, 3)
        .replace("queue: default\n", "queue: default\nworkload: batch\n")
        .replace(
            "requests: {nvidia.com/gpu: 1, cpu: 100m}",
            "requests: {nvidia.com/gpu: 1, cpu: '2'}, limits: {nvidia.com/gpu: 1, cpu: '1'}",
        )
    )
    refused = run_cli("submit", str(bad), *common, "--dry-run=server")
    out, err = refused.communicate(timeout=120)
    assert refused.returncode != 0
    assert "must be less than or equal to cpu limit" in out + err
    assert study_jobs(admin, name, BATCH_JOB) == []
