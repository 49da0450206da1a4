"""Preemption, failure retries, drain/resume and status against the real testbed
(Volcano + KWOK GPU nodes).

Every wait is on a condition with a deadline; the stratctl commands run as separate
processes, as a user (or a CI job) runs them.
"""

from __future__ import annotations

import json
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import VOLCANO_JOB
from stratctl.backends.kubernetes.objects.state import TrialState, classify, latest_attempts
from tests.e2e.support import env_of, fake_study, finish, high_priority_gang, running_pods, unique, wait_until

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"


def study_yaml(name, namespace, trials, duration, *, critical=False, **kw):
    return fake_study(name, namespace, trials, duration, fields={"critical": str(critical).lower()}, **kw)


def jobs_of(api, study):
    items, _ = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={study}")
    return items


def test_preempted_trials_resume_from_checkpoints_and_all_complete(testbed, api, cli, studies):
    """(a) a high-priority gang reclaims GPUs from a study filling the cluster; the victims'
    next attempts run with STRATCTL_RESUME=1; every trial completes; preemptions are not failures."""
    name = unique("pre")
    nodes, _ = api.list(("v1", "Node"), label_selector="type=kwok")
    gpus = sum(int(n["status"]["allocatable"].get(GPU, "0")) for n in nodes)
    trials = gpus // 8
    # 8-pod trials whose last 4 pods are elastic (what lets Volcano preempt for a queued gang);
    # maxRetry 1: the first eviction ends the attempt, so the trial resumes as its next one.
    path = studies(
        name,
        study_yaml(
            name, testbed.namespace, trials, "30s", replicas=8, min_available=4, extra="retries: {max_retry: 1}\n"
        ),
    )
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    high = unique("prod")
    try:
        wait_until(
            lambda: len(running_pods(api, f"{labels.STUDY}={name}")) == gpus,
            90,
            message=f"the study holding all {gpus} GPUs",
        )
        high_priority_gang(api, testbed.namespace, high)
        wait_until(
            lambda: len(running_pods(api, f"volcano.sh/job-name={high}")) == 8,
            60,
            message="the high-priority gang running on reclaimed GPUs",
        )
        progress = finish(submit, timeout=150)
    finally:
        if submit.poll() is None:
            submit.kill()
        api.delete(VOLCANO_JOB, high)
    assert progress["succeeded"] == trials and progress["failed"] == 0, progress
    jobs = jobs_of(api, name)
    latest = latest_attempts(jobs)
    assert all(classify(j) is TrialState.SUCCEEDED for j in latest.values())
    resumed = [j for j in jobs if int(j["metadata"]["labels"][labels.ATTEMPT]) > 0]
    assert resumed, "no trial was preempted and resumed"
    for job in resumed:
        env = env_of(job)
        assert env["STRATCTL_RESUME"] == "1"
        first = next(j for j in jobs if j["metadata"]["name"] == job["metadata"]["labels"][labels.TRIAL])
        assert env["STRATCTL_CHECKPOINT_DIR"] == env_of(first)["STRATCTL_CHECKPOINT_DIR"]
        assert env_of(first)["STRATCTL_RESUME"] == "0"
        assert classify(first) is TrialState.PREEMPTED
    snap = json.loads(cli.run("status", name, "-o", "json"))
    [study] = snap["studies"]
    assert study["states"]["succeeded"] == trials and study["states"]["failed"] == 0
    assert study["preemptions"] >= len(resumed)
    assert study["gpu_hours_lost"] > 0


def test_drain_suspends_noncritical_trials_and_resume_brings_them_back(testbed, api, cli, studies):
    """(b) `drain --all-noncritical` from another process while `submit` runs."""
    sweep, prod = unique("sweep"), unique("crit")
    sweep_path = studies(sweep, study_yaml(sweep, testbed.namespace, 6, "15s", parallelism=3))
    prod_path = studies(prod, study_yaml(prod, testbed.namespace, 2, "25s", critical=True))
    sweep_run = cli.start("submit", sweep_path, "-o", "json", "--poll-interval", "1")
    prod_run = cli.start("submit", prod_path, "-o", "json", "--poll-interval", "1")
    try:
        wait_until(
            lambda: (
                len(running_pods(api, f"{labels.STUDY}={sweep}")) == 3
                and len(running_pods(api, f"{labels.STUDY}={prod}")) == 2
            ),
            60,
            message="both studies running",
        )
        prod_jobs = {j["metadata"]["uid"] for j in jobs_of(api, prod)}
        started = time.monotonic()
        drained = json.loads(cli.run("drain", "--all-noncritical", "--settle", "2", "--json"))
        by = {o["study"]: o for o in drained}
        assert by[prod]["skipped"] == "critical"
        assert len(by[sweep]["suspended"]) == 3
        wait_until(lambda: not running_pods(api, f"{labels.STUDY}={sweep}"), 20, message="sweep pods gone")
        assert time.monotonic() - started < 20
        # the critical study is untouched: same jobs, still running
        assert {j["metadata"]["uid"] for j in jobs_of(api, prod)} == prod_jobs
        assert len(running_pods(api, f"{labels.STUDY}={prod}")) == 2
        # the submit loop holds: nothing new for several of its cycles
        time.sleep(4)
        assert not jobs_of(api, sweep), [j["metadata"]["name"] for j in jobs_of(api, sweep)]
        resumed = json.loads(cli.run("resume", sweep, "--json"))
        assert sorted(resumed["resumed"]) == sorted(by[sweep]["suspended"]) and resumed["left"] == []
        back = jobs_of(api, sweep)
        assert {j["metadata"]["labels"][labels.ATTEMPT] for j in back} == {"1"}
        assert all(env_of(j)["STRATCTL_RESUME"] == "1" for j in back)
        sweep_progress = finish(sweep_run, timeout=120)
        prod_progress = finish(prod_run, timeout=60)
    finally:
        for proc in (sweep_run, prod_run):
            if proc.poll() is None:
                proc.kill()
    assert sweep_progress["succeeded"] == 6 and sweep_progress["failed"] == 0
    assert prod_progress["succeeded"] == 2 and prod_progress["failed"] == 0
    assert all(j["metadata"]["labels"][labels.ATTEMPT] == "0" for j in jobs_of(api, prod))


def test_status_json_agrees_with_the_cluster(testbed, api, cli, studies):
    """(c) trials, states, attempts and parameters in `status -o json` match the jobs."""
    name = unique("stat")
    path = studies(name, study_yaml(name, testbed.namespace, 5, "6s", parallelism=5))
    cli.run("submit", path, "--detach", "-o", "json", timeout=90)

    def states(jobs):
        return {trial: (classify(job).value, job["metadata"]["name"]) for trial, job in jobs.items()}

    def compare():
        """Status against the jobs listed just before and just after it; while trials are
        moving, a snapshot taken between two different listings proves nothing: try again."""
        before = latest_attempts(jobs_of(api, name))
        snap = json.loads(cli.run("status", name, "-o", "json"))
        jobs = latest_attempts(jobs_of(api, name))
        if states(before) != states(jobs):
            return None
        rows = {t["trial"]: t for t in snap["trials"]}
        assert set(rows) == set(jobs)
        for trial, job in jobs.items():
            row = rows[trial]
            assert row["state"] == classify(job).value
            assert row["attempt"] == int(job["metadata"]["labels"][labels.ATTEMPT])
            assert row["job"] == job["metadata"]["name"]
            assert row["params"] == json.loads(job["metadata"]["annotations"][labels.PARAMS])
        [study] = snap["studies"]
        assert study["trials"] == 5
        assert sum(study["states"].values()) == 5
        return snap

    wait_until(compare, 60, interval=0.2, message="a status snapshot between two equal listings")
    wait_until(
        lambda: all(classify(j) is TrialState.SUCCEEDED for j in jobs_of(api, name)),
        90,
        message="every trial completed",
    )
    snap = compare()
    assert snap is not None
    assert snap["studies"][0]["states"]["succeeded"] == 5 and snap["studies"][0]["gpu_hours"] > 0


def test_failing_trials_are_retried_max_failures_times_then_given_up(testbed, api, cli, studies):
    """Every attempt exits 3: with max_failures 1 each trial fails twice (attempt 0 and its
    retry, resuming from the checkpoint), is given up, and submit exits 1; nothing follows."""
    name = unique("fail")
    path = studies(
        name,
        study_yaml(
            name,
            testbed.namespace,
            3,
            "2s",
            annotations={"testbed.stratctl.io/exit-code": "3"},
            extra="retries: {max_failures: 1}\n",
        ),
    )
    progress = json.loads(cli.run("submit", path, "-o", "json", "--poll-interval", "1", timeout=120, code=1))
    assert (progress["succeeded"], progress["failed"], progress["created"], progress["errors"]) == (0, 3, 3, {})
    jobs = jobs_of(api, name)
    trials = sorted({j["metadata"]["labels"][labels.TRIAL] for j in jobs})
    assert len(trials) == 3
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(t + suffix for t in trials for suffix in ("", "-a1"))
    by_name = {j["metadata"]["name"]: j for j in jobs}
    for trial in trials:
        first, retry = by_name[trial], by_name[f"{trial}-a1"]
        assert classify(first) is TrialState.FAILED and classify(retry) is TrialState.FAILED
        assert (env_of(first)["STRATCTL_RESUME"], env_of(retry)["STRATCTL_RESUME"]) == ("0", "1")
        assert env_of(retry)["STRATCTL_ATTEMPT"] == "1"
        assert (
            env_of(retry)["STRATCTL_CHECKPOINT_DIR"]
            == env_of(first)["STRATCTL_CHECKPOINT_DIR"]
            == f"/ckpt/{name}/{trial}"
        )
        notes = retry["metadata"]["annotations"]
        assert (notes[labels.FAILURES], notes[labels.PREEMPTIONS]) == ("1", "0")
        assert notes[labels.GIVEN_UP] == "failed 2 times, more than retries.max_failures=1"
        assert labels.GIVEN_UP not in first["metadata"]["annotations"]
    # No more attempts: neither from the loop that gave up (it has exited) nor from a rerun.
    again = json.loads(cli.run("submit", path, "-o", "json", "--poll-interval", "1", timeout=60, code=1))
    assert (again["failed"], again["created"], again["existing"]) == (3, 0, 0)
    assert sorted(j["metadata"]["uid"] for j in jobs_of(api, name)) == sorted(j["metadata"]["uid"] for j in jobs)
    snap = json.loads(cli.run("status", name, "-o", "json"))
    [study] = snap["studies"]
    assert (study["states"]["failed"], study["attempts"], study["failed_attempts"], study["preemptions"]) == (
        3,
        6,
        6,
        0,
    )
    assert sorted((t["trial"], t["state"], t["attempt"], t["failed_attempts"]) for t in snap["trials"]) == [
        (t, "failed", 1, 2) for t in trials
    ]
    assert {(t["exit_code"], t["reason"]) for t in snap["trials"]} == {
        (3, "Error; failed 2 times, more than retries.max_failures=1")
    }


def test_status_shows_the_result_each_trial_reported_and_sorts_by_it(testbed, api, cli, studies):
    """Each trial writes {"loss": ..., "seed": ...} as its termination message (on the testbed:
    the pod annotation KWOK copies there); status keeps it as the result and ranks by it."""
    name = unique("res")
    message = '{"loss": {{ (params.seed - 2) * (params.seed - 2) + params.seed / 10 }}, "seed": {{ params.seed }}}'
    path = studies(
        name,
        study_yaml(name, testbed.namespace, 4, "2s", annotations={"testbed.stratctl.io/termination-message": message}),
    )
    progress = json.loads(cli.run("submit", path, "-o", "json", "--poll-interval", "1", timeout=120))
    assert (progress["succeeded"], progress["failed"]) == (4, 0)
    losses = {seed: (seed - 2) * (seed - 2) + seed / 10 for seed in range(4)}  # 4.0, 1.1, 0.2, 1.3
    snap = json.loads(cli.run("status", name, "-o", "json"))
    assert {t["params"]["seed"]: t["result"] for t in snap["trials"]} == {
        seed: {"loss": loss, "seed": seed} for seed, loss in losses.items()
    }
    ranked = json.loads(cli.run("status", name, "--sort", "loss", "-o", "json"))
    assert [(t["params"]["seed"], t["result"]["loss"]) for t in ranked["trials"]] == [
        (2, 0.2),
        (1, 1.1),
        (3, 1.3),
        (0, 4.0),
    ]
    highest_first = json.loads(cli.run("status", name, "--sort", "-loss", "-o", "json"))
    assert [t["params"]["seed"] for t in highest_first["trials"]] == [0, 3, 1, 2]


def test_the_table_reads_the_loops_summary_and_the_first_page_of_jobs(testbed, api, cli, studies):
    """status for a table: the summary the finished loop left in the record, and the first
    trials by name from the API server's first page, agree with a full listing."""
    from stratctl.backends.kubernetes.verbs.status import collect

    name = unique("tab")
    path = studies(name, study_yaml(name, testbed.namespace, 6, "2s", parallelism=6))
    progress = json.loads(cli.run("submit", path, "-o", "json", timeout=120))
    assert progress["succeeded"] == 6
    full = collect(api, testbed.namespace, name)
    fast = collect(api, testbed.namespace, name, shown=3)
    assert fast.studies[0].as_of is not None  # from the record, not from listing
    [from_record], [listed] = fast.studies, full.studies
    assert {**from_record.__dict__, "as_of": None} == {**listed.__dict__, "as_of": None}
    assert [(t.trial, t.state, t.attempt, t.params) for t in fast.trials] == [
        (t.trial, t.state, t.attempt, t.params) for t in full.trials
    ][:3]
    assert fast.total_trials == 6
    done = cli.call("status", name, "--limit", "3", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "finished: 6 succeeded, 0 failed in " in done.stdout  # the outcome the loop's final summary gives
    assert done.stderr == "3 more trials not shown (--limit)\n"
    assert len(done.stdout.split("\n\n")[1].splitlines()) == 1 + 3  # header and the first three trials
