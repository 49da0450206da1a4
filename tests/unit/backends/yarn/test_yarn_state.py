"""What state each trial is in on YARN, from the RM's applications (the fields as the RM's
REST API writes them) and the records of ended attempts; free GPUs from /nodes."""

from __future__ import annotations

from stratctl.backends.batch.trials import trial_state
from stratctl.backends.yarn.scheduler import free_gpus
from stratctl.backends.yarn.state import latest, of_app, read_records, write_record
from stratctl.run.recovery import Limits
from stratctl.trialstate import TrialState


def app(
    trial="t0",
    n=0,
    state="RUNNING",
    final="UNDEFINED",
    progress=50.0,
    diagnostics="",
    app_id=None,
    launch=1_000_000,
    finished=0,
    am_preempted=0,
    study="s",
):
    return {
        "id": app_id or f"application_1_{n:04d}{trial}",
        "state": state,
        "finalStatus": final,
        "progress": progress,
        "diagnostics": diagnostics,
        "launchTime": launch,
        "finishedTime": finished,
        "numAMContainerPreempted": am_preempted,
        "applicationTags": f"stratctl,stratctl-study:{study},stratctl-trial:{trial},stratctl-n:{n},"
        f"stratctl-spec:abc,stratctl-attempt:{trial}{n}",
    }


def test_application_states_map_to_trial_states():
    accepted = of_app(
        app(
            state="ACCEPTED",
            launch=0,
            diagnostics="[Sat Dec 05 12:00:00 +0000 2026] Application is "
            "Activated, waiting for resources to be assigned for AM.",
        ),
        "s",
    )
    assert accepted.state is TrialState.PENDING and accepted.waits_for_capacity and not accepted.waits_for_limits
    assert accepted.reason.startswith("Application is Activated")
    limited = of_app(
        app(
            state="ACCEPTED",
            launch=0,
            diagnostics="[x] Application is added to the scheduler and is "
            "not yet activated. Queue's AM resource limit exceeded.",
        ),
        "s",
    )
    assert limited.waits_for_limits and not limited.waits_for_capacity
    gang = of_app(app(progress=0.0), "s")  # the AM runs, its gang is not whole: pending, started nothing
    assert gang.state is TrialState.PENDING and gang.waits_for_capacity and gang.started is None
    running = of_app(app(), "s")
    assert running.state is TrialState.RUNNING and running.started == 1000.0
    done = of_app(app(state="FINISHED", final="SUCCEEDED", finished=1_060_000), "s")
    assert done.state is TrialState.SUCCEEDED and done.run_seconds(0) == 60.0
    preempted = of_app(
        app(
            state="FINISHED",
            final="FAILED",
            finished=1_010_000,
            diagnostics="stratctl: preempted: task 1 (container_1_0001_01_000003)",
        ),
        "s",
    )
    assert preempted.state is TrialState.PREEMPTED and preempted.preemptions == 1
    failed = of_app(app(state="FINISHED", final="FAILED", diagnostics="stratctl: task 0 exited with code 3"), "s")
    assert failed.state is TrialState.FAILED and failed.exit_code == 3
    killed = of_app(app(state="KILLED", final="KILLED"), "s")
    assert killed.state is TrialState.FAILED  # killed by someone else: a failure
    drained = of_app(app(state="KILLED", final="KILLED"), "s", {0: "drained"})
    assert drained.state is TrialState.SUSPENDED
    restarted = of_app(app(am_preempted=1), "s")  # the RM restarted the AM: a preemption, not a failure
    assert restarted.restarts == 1 and restarted.preemptions == 1
    assert of_app(app(study="other"), "s") is None and of_app({"applicationTags": "spark"}, "s") is None


def test_preemptions_and_drains_are_not_failures_across_attempts():
    apps = [
        app(n=0, state="FINISHED", final="FAILED", diagnostics="stratctl: preempted: task 0", finished=1_005_000),
        app(n=1, state="KILLED", final="KILLED", finished=1_006_000),
        app(
            n=2, state="FINISHED", final="FAILED", diagnostics="stratctl: task 0 exited with code 1", finished=1_007_000
        ),
        app(n=3, progress=0.0),
    ]
    found = latest(apps, "s", {}, {"t0": {1: "resumed"}})["t0"]
    assert found.attempt == 3 and found.failures == 1 and found.preemptions == 1
    assert found.earlier_seconds == 5.0 + 6.0 + 7.0
    failed = latest(apps[:3], "s", {}, {"t0": {1: "resumed"}})["t0"]
    # its first failure: the preempted and the drained attempts before it count as none
    assert trial_state(failed, Limits(max_failures=1)) is TrialState.RETRYING
    assert trial_state(failed, Limits(max_failures=0)) is TrialState.FAILED
    many = [app(n=i, state="FINISHED", final="FAILED", diagnostics="stratctl: preempted: task 0") for i in range(5)]
    assert trial_state(latest(many, "s", {}, {})["t0"], Limits(max_failures=0)) is TrialState.RETRYING
    # five preemptions: more than retries.max_preemptions=4, the trial is given up
    assert trial_state(latest(many, "s", {}, {})["t0"], Limits(max_preemptions=4)) is TrialState.FAILED


def test_of_two_applications_of_one_attempt_the_first_counts():
    first = app(state="FINISHED", final="SUCCEEDED", app_id="application_1_0001")
    second = app(state="RUNNING", app_id="application_1_0002")
    assert latest([second, first], "s", {}, {})["t0"].job == "application_1_0001"


def test_attempts_the_rm_forgot_come_from_their_records(tmp_path):
    ended = app(
        n=0, state="FINISHED", final="FAILED", diagnostics="stratctl: task 0 exited with code 2", finished=1_002_000
    )
    write_record(tmp_path, "t0", 0, ended)
    write_record(tmp_path, "t0", 0, app(n=0, state="RUNNING"))  # written once: the first record stays
    (tmp_path / "t0" / "attempt-1.drained").write_text("x")
    records, marks = read_records(tmp_path)
    assert marks == {"t0": {1: "drained"}}
    found = latest([], "s", records, marks)["t0"]
    assert found.state is TrialState.FAILED and found.exit_code == 2 and found.job == ended["id"]
    both = latest([app(n=1, state="KILLED", final="KILLED")], "s", records, marks)["t0"]
    assert both.attempt == 1 and both.state is TrialState.SUSPENDED and both.failures == 1


def test_free_gpus_of_running_nodes_of_the_label():
    def node(state, gpus, labels=None):
        return {
            "state": state,
            "nodeLabels": labels or [],
            "availableResource": {
                "memory": 1,
                "resourceInformations": {
                    "resourceInformation": [{"name": "memory-mb", "value": 9}, {"name": "yarn.io/gpu", "value": gpus}]
                },
            },
        }

    nodes = [node("RUNNING", 4), node("RUNNING", 1, ["gpu"]), node("UNHEALTHY", 4), node("LOST", 4)]
    assert free_gpus(nodes, None) == [4, 1]
    assert free_gpus(nodes, "gpu") == [1]


def test_a_drain_mark_on_an_attempt_that_ended_before_the_kill_keeps_its_ending():
    done = of_app(app(state="FINISHED", final="SUCCEEDED", finished=1_001_000), "s", {0: "drained"})
    assert done.state is TrialState.SUCCEEDED


def test_an_attempt_is_in_its_applications_queue_by_its_own_name():
    """The RM names a queue `research` at submission and `root.research` once the
    application was moved there (queue fallback): `status` shows `research` either way."""
    assert of_app({**app(state="ACCEPTED"), "queue": "prod"}, "s").queue == "prod"
    assert of_app({**app(), "queue": "root.research"}, "s").queue == "research"


def test_the_result_is_the_gang_ams_last_diagnostics_line_and_never_reads_as_an_ending():
    from stratctl.backends.yarn.state import outcome, result_of

    said = 'stratctl: 2 tasks succeeded\nstratctl: result {"loss":0.25,"note":"stratctl: preempted: no"}'
    assert result_of(said) == {"loss": 0.25, "note": "stratctl: preempted: no"}
    ended = app(state="FINISHED", final="SUCCEEDED", diagnostics=said, finished=2_000_000)
    assert outcome(ended) == "succeeded"
    failed = app(
        state="FINISHED",
        final="FAILED",
        finished=2_000_000,
        diagnostics=said.replace("2 tasks succeeded", "task worker 1 (rank 1) exited with code 3"),
    )
    assert outcome(failed) == "failed"  # its result's words are not a preemption
    attempt = of_app(failed, "s")
    assert attempt.state is TrialState.FAILED and attempt.exit_code == 3
    assert attempt.reason == "stratctl: task worker 1 (rank 1) exited with code 3"
    for nothing in ("stratctl: 1 tasks succeeded", "stratctl: result {torn", "stratctl: result [1]", None):
        assert result_of(nothing) is None
    killed = app(state="KILLED", final="KILLED", diagnostics="Application application_1_0001t0 was killed by user root")
    assert outcome(killed) == "failed"  # a pruned attempt: neither drained nor preempted
