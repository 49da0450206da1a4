"""The operator's day on the testbed: an edited study is refused (exit 4) until `--rerun-changed`;
`stratctl wait` blocks until a study finishes; `submit --timeout` stops following and a rerun
completes the study without duplicates."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.record import record_name
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from tests.e2e.support import Cli, unique
from tests.e2e.support import busybox_study as study_yaml

pytestmark = pytest.mark.e2e


@pytest.fixture
def cli(testbed):
    """As a user runs it (no traceback: exit codes as shipped); the exit code is the test's to check."""
    return Cli(testbed, traceback=False, timeout=180)


def jobs_of(api, name: str) -> dict[str, dict]:
    items, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")
    return {j["metadata"]["name"]: j for j in items}


def container(job: dict) -> dict:
    return job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]


def test_an_edited_study_is_refused_until_rerun_changed_then_changed_trials_run_the_new_spec(
    testbed, api, cli, studies
):
    name = unique("edited")
    path = Path(studies(name, study_yaml(name, testbed.namespace, trials=3, cap=3, duration="2s")))
    first = cli.call("submit", str(path), "-o", "json")
    assert first.returncode == 0, first.stderr[-2000:]
    before = {n: j["metadata"]["uid"] for n, j in jobs_of(api, name).items()}
    record = api.get(CONFIGMAP, record_name(name), testbed.namespace)["data"]
    assert len(before) == 3 and json.loads(record["spec"])["trial"]["image"] == "busybox"

    path.write_text(
        study_yaml(name, testbed.namespace, trials=3, cap=3, duration="2s", image="busybox:1.36", flag="--random-seed")
    )
    refused = cli.call("submit", str(path))
    assert refused.returncode == 4, refused.stderr[-2000:]
    assert (
        f"study {name} changed since it was submitted (trial.command.1, trial.image): 3 of 3 trial(s) in the "
        "cluster would run with a different spec"
    ) in refused.stderr
    assert "--rerun-changed" in refused.stderr and "Traceback" not in refused.stderr
    assert {n: j["metadata"]["uid"] for n, j in jobs_of(api, name).items()} == before  # nothing created
    assert api.get(CONFIGMAP, record_name(name), testbed.namespace)["data"]["spec-hash"] == record["spec-hash"]

    rerun = cli.call("submit", str(path), "--rerun-changed", "-o", "json")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert json.loads(rerun.stdout)["succeeded"] == 3
    jobs = jobs_of(api, name)
    trials = [t.name for t in expand(load_study(path))]
    assert sorted(jobs) == sorted(trials + [f"{t}-a1" for t in trials])  # old attempts kept (finished), one new each
    for trial in trials:
        new = jobs[f"{trial}-a1"]
        assert container(new)["image"] == "busybox:1.36" and container(new)["command"][1].startswith("--random-seed=")
        assert new["status"]["state"]["phase"] == "Completed"
        assert new["metadata"]["annotations"][labels.REQUEUED_BECAUSE] == "study changed (trial.command.1, trial.image)"
    again = cli.call("submit", str(path), "--rerun-changed")  # the same command again: nothing more
    assert again.returncode == 0 and sorted(jobs_of(api, name)) == sorted(jobs)


def test_submit_timeout_then_wait_and_a_rerun_completes_the_study_without_duplicates(testbed, api, cli, studies):
    name = unique("timeout")
    path = Path(studies(name, study_yaml(name, testbed.namespace, trials=4, cap=2, duration="6s")))
    started = time.monotonic()
    stopped = cli.call("submit", str(path), "--timeout", "2s", "--parallelism", "static", "--max-inflight", "2")
    took = time.monotonic() - started
    assert stopped.returncode == 124, stopped.stderr[-2000:]
    assert "timed out after 2s" in stopped.stderr and took < 20
    assert len(jobs_of(api, name)) == 2  # the first two trials keep running; the record stays

    short = cli.call("wait", name, "--timeout", "1s")
    assert short.returncode == 124, short.stderr
    assert short.stdout.splitlines()[-1].startswith(f"{name}: timed out after 1s, not finished (2 waiting")
    # the loop stopped (its record says so): nothing will admit the 2 waiting, said at once with what would
    assert f"{name}: no submit loop follows this study, and 2 trials wait to be admitted" in short.stdout
    assert "nothing will admit them until `stratctl submit STUDY_FILE` runs" in short.stdout

    waiter = cli.start("wait", name, "--timeout", "3m", "--interval", "1")
    resumed = cli.call("submit", str(path), "--parallelism", "static", "--max-inflight", "2", "-o", "json")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert summary["succeeded"] == 4 and summary["created"] == 2 and summary["existing"] == 0
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    lines = out.splitlines()
    assert lines[-1] == f"{name}: finished, 4 succeeded"
    assert len(lines) == len(set(lines))  # one line per change, never a repeated table
    expected = sorted(t.name for t in expand(load_study(path)))
    assert sorted(jobs_of(api, name)) == expected  # each trial exactly once


def test_rerun_changed_replaces_running_attempts_and_a_rerun_after_it_never_runs_a_trial_twice(
    testbed, api, cli, studies
):
    name = unique("running")
    path = Path(studies(name, study_yaml(name, testbed.namespace, trials=3, cap=3, duration="8s")))
    detached = cli.call("submit", str(path), "--detach")
    assert detached.returncode == 0, detached.stderr[-2000:]
    old = jobs_of(api, name)
    assert len(old) == 3

    path.write_text(study_yaml(name, testbed.namespace, trials=3, cap=3, duration="8s", image="busybox:1.36"))
    refused = cli.call("submit", str(path), "--detach")
    assert refused.returncode == 4 and "(trial.image): 3 of 3 trial(s)" in refused.stderr
    rerun = cli.start("submit", str(path), "--rerun-changed", "-o", "json")
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err[-2000:]
    assert json.loads(out)["succeeded"] == 3
    assert err.count("runs the new spec") == 3 and err.count(" deleted") >= 3  # the old attempts were still running
    jobs = jobs_of(api, name)
    assert sorted(jobs) == sorted(f"{n}-a1" for n in old)  # the running old attempts are gone, not finished
    assert all(container(j)["image"] == "busybox:1.36" for j in jobs.values())
    again = cli.call("submit", str(path))
    assert again.returncode == 0 and sorted(jobs_of(api, name)) == sorted(jobs)
