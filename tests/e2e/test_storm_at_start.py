"""A 429 storm already going when a command starts paces it, not ends it (on the real
testbed): the restricted user's requests go to a one-seat APF priority level that rejects
past it, and another process of the same user floods the API server, ignoring Retry-After,
from 5 s before each command. Every command is run as a user runs it (a process, the
one-line messages of no --traceback)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, VOLCANO_JOB
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from tests.e2e.support import Cli, busybox_study, of_study, unique, wait_until

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FAULT = REPO / "testbed" / "fault.sh"
LEAD = 5.0  # seconds the flood runs before the command starts
TRIALS = 40
NOTICE = "the API server is throttling this user (HTTP 429"
GAVE_UP = "error: the API server has refused every request of this user (HTTP 429 Too Many Requests"


class Flood:
    """Another process of the same user hammering the API server (bench/quota_bench.py --flood)."""

    def __init__(self, testbed, seconds: float):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "bench" / "quota_bench.py"),
                "--flood",
                str(seconds),
                "--kubeconfig",
                testbed.kubeconfig,
                "--context",
                testbed.restricted_context,
                "--namespace",
                testbed.namespace,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self.started = time.monotonic()

    def lead(self) -> None:
        time.sleep(max(0.0, LEAD - (time.monotonic() - self.started)))

    def tally(self) -> dict:
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def user(testbed):
    """The CLI as the restricted user, under the one-seat APF limit."""
    testbed.apf(True)
    yield Cli(testbed, context=testbed.restricted_context, traceback=False, stdin=subprocess.DEVNULL, timeout=240)
    testbed.apf(False)


def flooded(testbed, user, seconds: float, *args: str) -> subprocess.CompletedProcess:
    """`stratctl ARGS` started LEAD seconds into a flood of `seconds`, run to its end."""
    flood = Flood(testbed, seconds)
    flood.lead()
    done = user.call(*args)
    assert flood.tally()["429"] > 50, "the flood did not saturate the one seat"
    return done


TOLD: list[str] = []  # the commands told to wait for the storm


def throttled_then_ok(done: subprocess.CompletedProcess) -> str:
    """The command's answer; it ended 0 and said nothing but, at most, that it waited for the
    throttling (one seat: a request may slip through a storm, so not every command meets it)."""
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert all(NOTICE in line for line in lines) and len(lines) <= 1, done.stderr
    if lines:
        TOLD.append(" ".join(done.args[3:5]))
    return done.stdout


def test_every_command_started_in_a_storm_waits_it_out_and_answers(testbed, api, user, studies, tmp_path):
    name = unique("storm")
    path = studies(name, busybox_study(name, testbed.namespace, TRIALS, "3s"))
    started = time.monotonic()
    done = flooded(testbed, user, 15, "submit", path, "-o", "json", "--poll-interval", "1")
    assert done.returncode == 0, done.stderr
    told = [line for line in done.stderr.splitlines() if NOTICE in line]  # among its log lines (stderr: no terminal)
    assert len(told) == 1 and told[0].endswith("waiting for it, up to 5m"), done.stderr
    summary = json.loads(done.stdout)
    assert summary["succeeded"] == TRIALS and summary["failed"] == 0 and summary["created"] == TRIALS, summary
    assert summary["throttled_429"] > 0 and summary["api_checks"] > 0
    jobs = of_study(api, VOLCANO_JOB, name)
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(t.name for t in expand(load_study(path)))
    assert time.monotonic() - started > 15 - LEAD  # it did wait for the storm

    doc = json.loads(throttled_then_ok(flooded(testbed, user, 12, "status", name, "-o", "json")))
    assert doc["studies"][0]["states"]["succeeded"] == TRIALS
    assert name in throttled_then_ok(flooded(testbed, user, 12, "status"))
    assert f"{name}: finished, {TRIALS} succeeded" in throttled_then_ok(flooded(testbed, user, 12, "wait", name))
    trial = jobs[0]["metadata"]["labels"][labels.TRIAL]
    throttled_then_ok(flooded(testbed, user, 12, "logs", name, trial))
    [drained] = json.loads(throttled_then_ok(flooded(testbed, user, 12, "drain", name, "--settle", "0", "-o", "json")))
    assert drained["study"] == name and not drained.get("skipped"), drained
    record = of_study(api, CONFIGMAP, name)[0]
    assert record["data"].get("drained") == "true"
    throttled_then_ok(flooded(testbed, user, 12, "resume", name))
    assert of_study(api, CONFIGMAP, name)[0]["data"].get("drained") != "true"
    throttled_then_ok(flooded(testbed, user, 12, "delete", name, "--yes"))
    wait_until(
        lambda: not of_study(api, VOLCANO_JOB, name) and not of_study(api, CONFIGMAP, name),
        60,
        message="the study gone",
    )
    assert len(TOLD) >= 4, f"only {TOLD} of the 8 one-shot commands met the storm"


def test_a_storm_longer_than_the_bound_ends_each_command_with_one_line_and_nothing_half_done(
    testbed, api, user, studies, tmp_path
):
    """A storm that refuses every request: the flood alone lets about one request in four of
    another process through its one seat (measured: 7-13 of 30 probes), which rightly resets
    the bound; with etcd paused, the flood's request that holds the seat hangs, and every
    other request of the user is refused for as long as the pause lasts."""
    if not testbed.local:
        pytest.skip("a storm refusing every request needs the local testbed's fault injection (testbed/fault.sh)")
    kept = unique("kept")
    path = studies(kept, busybox_study(kept, testbed.namespace, 2, "1s"))
    Cli(testbed).run("submit", path, "--poll-interval", "1", timeout=120)  # as the admin: no flood, no limit
    before = {
        kind: sorted(
            (o["metadata"]["name"], json.dumps(o.get("data"), sort_keys=True)) for o in of_study(api, kind, kept)
        )
        for kind in (VOLCANO_JOB, CONFIGMAP)
    }
    trial = of_study(api, VOLCANO_JOB, kept)[0]["metadata"]["labels"][labels.TRIAL]
    fresh = unique("never")
    never = studies(fresh, busybox_study(fresh, testbed.namespace, 4, "1s"))
    commands = {
        "submit": ("submit", never, "--outage-timeout", "10"),
        "status": ("status", kept),
        "drain": ("drain", kept, "--settle", "0"),
        "resume": ("resume", kept),
        "delete": ("delete", kept, "--yes"),
        "wait": ("wait", kept),
        "logs": ("logs", kept, trial),
    }
    flood = Flood(testbed, 50)
    time.sleep(2)
    pause = subprocess.Popen(
        ["bash", str(FAULT), "etcd-pause", "45"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(LEAD - 2)
        started = time.monotonic()
        running = {what: user.start(*args) for what, args in commands.items()}
        ended = {}
        for what, proc in running.items():
            out, err = proc.communicate(timeout=90)
            ended[what] = (proc.returncode, out, err, time.monotonic() - started)
    finally:
        pause.communicate(timeout=120)
        subprocess.run(["bash", str(FAULT), "restore"], capture_output=True, timeout=120)
    assert flood.tally()["429"] > 100
    for what, (code, _out, err, took) in ended.items():
        lines = [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in err.splitlines()]  # submit's log lines: timed
        if what == "submit":  # and among its progress lines
            lines = [line for line in lines if NOTICE in line or line.startswith("error:")]
        assert code == 3, (what, code, err)
        assert len(lines) == 2 and NOTICE in lines[0] and lines[1].startswith(GAVE_UP), (what, err)
        bound = 10 if what == "submit" else 25
        assert f"for longer than this command waits ({bound}s): gave up" in lines[1], (what, err)
        assert took < bound + 10, (what, took)
    assert ended["submit"][2].splitlines()[-1].endswith("; nothing was created")
    # nothing half-done: the study that never started left nothing, the other is as it was
    assert not of_study(api, CONFIGMAP, fresh) and not of_study(api, VOLCANO_JOB, fresh)
    after = {
        kind: sorted(
            (o["metadata"]["name"], json.dumps(o.get("data"), sort_keys=True)) for o in of_study(api, kind, kept)
        )
        for kind in (VOLCANO_JOB, CONFIGMAP)
    }
    assert [n for n, _ in after[VOLCANO_JOB]] == [n for n, _ in before[VOLCANO_JOB]]
    assert len(after[CONFIGMAP]) == 1 and json.loads(after[CONFIGMAP][0][1]).get("drained") != "true"
