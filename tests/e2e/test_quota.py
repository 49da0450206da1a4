"""A small API quota must not starve the GPUs (issue 22), on the real testbed: the user's
requests go to a one-seat APF priority level that rejects past it, and a second process of
the same user floods the API server for a while."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, NODE, POD, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.gpus import free_gpus
from stratctl.backends.kubernetes.objects.state import TrialState, classify
from stratctl.backends.launch import Connection, submit_study
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.run.options import SubmitOptions
from tests.e2e.support import busybox_study

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TRIALS, SECONDS, FLOOD_AT, FLOOD_FOR = 48, 15, 2.0, 20.0


def study_yaml(name: str, namespace: str) -> str:
    return busybox_study(
        name, namespace, TRIALS, f"{SECONDS}s", replicas=2, throttle="{parallelism: {min: 1, initial: 4, max: 32}}"
    )


def test_a_flood_by_the_same_user_neither_duplicates_nor_starves_the_trials(testbed, api, tmp_path):
    name = f"quota-{int(time.time() * 1000) % 100000:05d}"
    path = tmp_path / "study.yaml"
    path.write_text(study_yaml(name, testbed.namespace))
    nodes, _ = api.list(NODE)
    pods, _ = api.list(POD, all_namespaces=True)
    bound = min(32, sum(free_gpus(nodes, pods).values()) // 2)  # the GPU-bound target: gangs of 2 that fit
    assert bound >= 16, f"the testbed has only {bound * 2} free GPUs: something else is running"
    timeline: list[tuple[float, int]] = []  # (seconds since start, trials in flight), seen by the admin
    done = threading.Event()

    def sample(started: float) -> None:
        while not done.wait(0.5):
            jobs, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
            timeline.append(
                (
                    time.monotonic() - started,
                    sum(1 for j in jobs if classify(j) in (TrialState.PENDING, TrialState.RUNNING)),
                )
            )

    outcome: dict = {}

    def submit() -> None:
        try:
            outcome["progress"] = submit_study(
                path,
                Connection(testbed.kubeconfig, testbed.restricted_context, testbed.namespace),
                SubmitOptions(poll_interval=1.0),
            )
        except BaseException as exc:  # reported by the test below
            outcome["error"] = exc

    testbed.apf(True)
    try:
        started = time.monotonic()
        threads = [
            threading.Thread(target=submit, daemon=True),
            threading.Thread(target=sample, args=(started,), daemon=True),
        ]
        for t in threads:
            t.start()
        time.sleep(FLOOD_AT)
        flood = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "quota_bench.py"),
                "--flood",
                str(FLOOD_FOR),
                "--kubeconfig",
                testbed.kubeconfig,
                "--context",
                testbed.restricted_context,
                "--namespace",
                testbed.namespace,
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        flood_end = time.monotonic() - started
        threads[0].join(300)
        jobs, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    finally:
        testbed.apf(False)
        done.set()
        try:
            for kind in (VOLCANO_JOB, CONFIGMAP):
                items, _ = api.list(kind, label_selector=f"{labels.STUDY}={name}")
                for item in items:
                    api.delete(kind, item["metadata"]["name"])
        except Exception:  # cleanup is best effort; the assertions below say what broke
            pass
    assert "error" not in outcome, outcome.get("error")
    progress = outcome["progress"]
    tally = json.loads(flood.stdout.strip().splitlines()[-1])
    assert tally["429"] > 100, f"the flood did not saturate the one seat: {tally}"
    # every trial exactly once, all succeeded
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(t.name for t in expand(load_study(path)))
    assert progress.succeeded == TRIALS and progress.failed == 0 and not progress.errors, progress
    assert progress.created == TRIALS
    assert progress.throttled_429 > 0  # the quota did push back
    # after the flood the trials in flight reach the GPU-bound target, within 30 s
    after = [(t, n) for t, n in timeline if flood_end <= t <= flood_end + 30]
    assert after and max(n for _, n in after) >= bound, (flood_end, bound, timeline)
    # and the request pace was back at the configured rate by the end
    assert progress.api.qps == progress.api.configured_qps, progress.api
