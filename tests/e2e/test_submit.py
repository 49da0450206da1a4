"""`stratctl submit` against the real testbed: throttled by the API server, exactly once, dry runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stratctl import labels
from stratctl.cluster import VOLCANO_JOB, BATCH_JOB, CONFIGMAP, Cluster
from stratctl.controller import Connection, SubmitOptions, submit_study
from stratctl.space import expand
from stratctl.spec import load_study

pytestmark = pytest.mark.e2e


def study_yaml(name: str, namespace: str, trials: int, duration: str = "2s", extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        priority_class: stratctl-low
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
        strategy: {{kind: grid}}
        trial:
          image: busybox
          command: ["train", "--seed={{{{ params.seed }}}}"]
          annotations:
            testbed.stratctl.io/run-duration: "{duration}"
          resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}}}
          tasks: [{{name: worker, replicas: 1}}]
        throttle: {{qps: 50, burst: 20, parallelism: {{min: 1, initial: {trials}, max: {trials}}}}}
        """
    ) + textwrap.dedent(extra)


@pytest.fixture
def admin(testbed):
    cluster = Cluster.connect(testbed.kubeconfig, testbed.admin_context, testbed.namespace)
    yield cluster
    cluster.close()


@pytest.fixture
def cleanup_study(admin):
    names: list[str] = []
    yield names.append
    for name in names:
        for kind in (VOLCANO_JOB, BATCH_JOB, CONFIGMAP):
            items, _ = admin.list(kind, label_selector=f"{labels.STUDY}={name}")
            for item in items:
                admin.delete(kind, item["metadata"]["name"])


def study_jobs(admin: Cluster, name: str, kind=VOLCANO_JOB) -> list[dict]:
    items, _ = admin.list(kind, label_selector=f"{labels.STUDY}={name}")
    return items


def test_200_trials_by_a_throttled_user_are_each_created_once_and_429s_are_honoured(testbed, admin, tmp_path, cleanup_study):
    name = "burst200"
    cleanup_study(name)
    path = tmp_path / "study.yaml"
    path.write_text(study_yaml(name, testbed.namespace, 200, duration="1s"))
    testbed.apf(True)
    try:
        progress = submit_study(
            path,
            Connection(testbed.kubeconfig, testbed.restricted_context, testbed.namespace),
            SubmitOptions(detach=True, workers=48, poll_interval=0.5),
            qps=0,  # no client-side limit: the API server's 429s are the only brake
            burst=1,
        )
    finally:
        testbed.apf(False)
    jobs = study_jobs(admin, name)
    expected = {t.name for t in expand(load_study(path))}
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(expected)
    assert progress.created == 200 and not progress.errors
    assert progress.throttled_429 > 0, "the APF limit should have answered some creates with 429"


def run_cli(*args: str, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "stratctl", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.parametrize("kill_after", [0.3, 1.0, 2.5])
def test_sigkill_at_any_moment_then_rerun_creates_each_trial_exactly_once(testbed, admin, tmp_path, cleanup_study, kill_after):
    name = f"kill{int(kill_after * 10)}"
    cleanup_study(name)
    path = tmp_path / "study.yaml"
    path.write_text(study_yaml(name, testbed.namespace, 60, duration="1s"))
    common = ["--kubeconfig", testbed.kubeconfig, "--context", testbed.restricted_context, "--qps", "20", "--burst", "5"]
    first = run_cli("submit", str(path), *common, "--detach")
    time.sleep(kill_after)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = {j["metadata"]["name"]: j["metadata"]["uid"] for j in study_jobs(admin, name)}
    rerun = run_cli("submit", str(path), *common, "--detach", "-o", "json")
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    after = {j["metadata"]["name"]: j["metadata"]["uid"] for j in study_jobs(admin, name)}
    assert len(after) == 60
    assert sorted(after) == sorted(t.name for t in expand(load_study(path)))
    # what the killed run created was recognised, not deleted and recreated
    assert all(after[n] == uid for n, uid in before.items())
    import json

    summary = json.loads(out)
    assert summary["created"] + summary["existing"] == 60
    assert summary["created"] <= 60 - len(before)


def test_server_dry_run_creates_nothing_and_reports_the_servers_message(testbed, admin, tmp_path, cleanup_study):
    name = "dryrun"
    cleanup_study(name)
    good = tmp_path / "good.yaml"
    good.write_text(study_yaml(name, testbed.namespace, 5))
    common = ["--kubeconfig", testbed.kubeconfig, "--context", testbed.restricted_context]
    ok = run_cli("submit", str(good), *common, "--dry-run=server", "-o", "json")
    out, err = ok.communicate(timeout=120)
    assert ok.returncode == 0, err
    assert study_jobs(admin, name) == []
    with pytest.raises(Exception):
        admin.get(CONFIGMAP, f"stratctl-study-{name}")

    # a plain batch Job whose CPU request exceeds its limit: only the API server's validation catches it
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        study_yaml(name, testbed.namespace, 3).replace("queue: default\n", "queue: default\nworkload: batch\n")
        .replace("requests: {nvidia.com/gpu: 1, cpu: 100m}", "requests: {nvidia.com/gpu: 1, cpu: '2'}, limits: {nvidia.com/gpu: 1, cpu: '1'}")
    )
    refused = run_cli("submit", str(bad), *common, "--dry-run=server")
    out, err = refused.communicate(timeout=120)
    assert refused.returncode != 0
    assert "must be less than or equal to cpu limit" in out + err
    assert study_jobs(admin, name, BATCH_JOB) == []
