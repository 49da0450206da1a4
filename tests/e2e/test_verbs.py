"""`delete` and `logs` against the real testbed, as separate processes.

`delete` leaves nothing of a finished study with its label (jobs, PodGroups, pods,
record) and refuses while a `submit` loop follows the study. `logs` reads a trial's
containers through the API server (the testbed's KWOK serves one known log for every
container of the namespace): one pod plain, a gang's pods prefixed, `--task`, `--best`.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, CONFIGMAP, POD
from stratctl.backends.kubernetes.objects.record import loop_following, record_name
from tests.e2e.support import STUDY_KINDS, Cli, fake_study, recorded, unique, wait_until

pytestmark = pytest.mark.e2e

KNOWN_LOG = [
    "testbed trial: started",
    "testbed trial: epoch 1 loss 0.90",
    "testbed trial: fake GPU, nothing computed",
    "testbed trial: epoch 2 loss 0.50",
]


def study_yaml(name, namespace, trials, duration, tasks=None, message=None):
    notes = {"testbed.stratctl.io/termination-message": message} if message else None
    return fake_study(name, namespace, trials, duration, tasks=tasks, annotations=notes, checkpoint=False)


@pytest.fixture
def cli(testbed):
    """The CLI as a script runs it: no terminal on stdin (so no confirmation prompt), and
    the exit codes and one-line messages users see (no tracebacks)."""
    return Cli(testbed, traceback=False, columns=200, stdin=subprocess.DEVNULL)


def left_of(api, name):
    return {
        kind[1] + ("" if kind != BATCH_JOB else " (batch)"): len(items)
        for kind in STUDY_KINDS
        if (items := api.list(kind, label_selector=f"{labels.STUDY}={name}")[0])
    }


@pytest.mark.parametrize("who", ["admin", "restricted"])
def test_delete_removes_every_object_of_a_finished_study(testbed, api, who, studies):
    """As the admin and as the restricted user, who may delete jobs but not pods: the
    garbage collector takes the pods the jobs own."""
    context = testbed.admin_context if who == "admin" else testbed.restricted_context
    cli = Cli(testbed, context=context, traceback=False, columns=200, stdin=subprocess.DEVNULL)
    name = unique("del")
    path = studies(name, study_yaml(name, testbed.namespace, 3, "1s", tasks="[{name: worker, replicas: 2}]"))
    progress = json.loads(cli.run("submit", path, "-o", "json", "--poll-interval", "1", timeout=120))
    assert progress["succeeded"] == 3
    before = left_of(api, name)
    assert before["Job"] == 3 and before["Pod"] == 6 and before["ConfigMap"] == 1, before
    # no terminal and no --yes: refused, nothing touched
    refused = cli.run("delete", name, code=2)
    assert refused == "" and left_of(api, name) == before
    started = time.monotonic()
    outcome = json.loads(cli.run("delete", name, "--yes", "-o", "json", timeout=90))
    assert outcome["deleted"]["jobs"] == 3 and outcome["deleted"]["pods"] == 6 and outcome["deleted"]["record"] == 1
    assert outcome["left"] == {}
    assert left_of(api, name) == {}, f"left after delete ({time.monotonic() - started:.1f} s)"


def test_delete_refuses_while_a_submit_loop_follows_the_study(testbed, api, cli, studies):
    name = unique("dfl")
    path = studies(name, study_yaml(name, testbed.namespace, 2, "120s"))
    submit = cli.start("submit", path, "--poll-interval", "1")
    try:
        recorded(api, name)
        wait_until(
            lambda: loop_following(api.get(CONFIGMAP, record_name(name)), time.time()),
            60,
            message="the submit loop's heartbeat in the record",
        )
        done = cli.start("delete", name, "--yes")
        out, err = done.communicate(timeout=60)
        assert done.returncode == 2, err
        assert "submit loop" in err and "--force" in err and len(err.strip().splitlines()) == 1
        assert left_of(api, name).get("ConfigMap") == 1
    finally:
        cli.interrupt(submit)
    # the loop said it stopped: no --force needed now
    assert loop_following(api.get(CONFIGMAP, record_name(name)), time.time()) is None
    json.loads(cli.run("delete", name, "--yes", "-o", "json", timeout=90))
    assert left_of(api, name) == {}


def test_logs_of_a_trial_a_gang_a_task_and_the_best_trial(testbed, api, cli, studies):
    name = unique("log")
    message = '{"loss": {{ (params.seed - 1) * (params.seed - 1) + params.seed / 10 }}}'  # best: seed 1
    path = studies(
        name,
        study_yaml(
            name,
            testbed.namespace,
            3,
            "1s",
            message=message,
            tasks="[{name: worker, replicas: 2}, {name: ps, replicas: 1}]",
        ),
    )
    progress = json.loads(cli.run("submit", path, "-o", "json", "--poll-interval", "1", timeout=120))
    assert progress["succeeded"] == 3
    snap = cli.status(name)
    by_seed = {t["params"]["seed"]: t["trial"] for t in snap["trials"]}
    pods = {p["metadata"]["name"] for p in api.list(POD, label_selector=f"{labels.TRIAL}={by_seed[0]}")[0]}
    assert len(pods) == 3

    # a gang: every pod's lines, each prefixed with its pod
    out = cli.run("logs", name, by_seed[0]).splitlines()
    assert len(out) == 3 * len(KNOWN_LOG)
    assert {line.split(" ", 1)[0] for line in out} == pods
    for pod in pods:
        assert [line.split(" ", 1)[1] for line in out if line.startswith(pod + " ")] == KNOWN_LOG

    # one task of one pod: the plain log
    ps = cli.run("logs", name, by_seed[0], "--task", "ps")
    assert ps.splitlines() == KNOWN_LOG
    assert cli.run("logs", name, by_seed[0], "--task", "ps", "--tail", "1").splitlines() == KNOWN_LOG[-1:]

    # --best: the trial status ranks first by loss
    done = cli.start("logs", name, "--best", "--task", "ps")
    out, err = done.communicate(timeout=60)
    assert done.returncode == 0 and out.splitlines() == KNOWN_LOG
    assert err.strip() == f"trial {by_seed[1]}"


def test_logs_follow_streams_and_keeps_going(testbed, api, cli, studies):
    name = unique("lgf")
    path = studies(name, study_yaml(name, testbed.namespace, 1, "300s"))
    submit = cli.start("submit", path, "--poll-interval", "1", "--detach")
    submit.communicate(timeout=60)
    trial = wait_until(
        lambda: [
            p
            for p in api.list(POD, label_selector=f"{labels.STUDY}={name}")[0]
            if p["status"].get("phase") == "Running"
        ],
        60,
        message="a running pod",
    )
    follow = cli.start("logs", name, trial[0]["metadata"]["labels"][labels.TRIAL], "-f")
    try:
        lines = [follow.stdout.readline().rstrip("\n") for _ in KNOWN_LOG]
        assert lines == KNOWN_LOG
        time.sleep(2)
        assert follow.poll() is None  # still following
    finally:
        follow.kill()
        follow.communicate(timeout=30)
