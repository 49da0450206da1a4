"""Least privilege, shipped and tested: the testbed's restricted user is bound to exactly
what `stratctl rbac --cluster-wide-reads` prints (testbed/rbac.yaml), and every command
the documentation (docs/commands.md) describes works for it; the API server's audit log must show no request of
that user it forbade. A user bound without the cluster-wide reads (testbed/rbac-no-nodes.yaml)
still submits a study to completion, told once what the loop goes without.

The audit log is the API server's own (testbed/audit-policy.yaml: every request of the
restricted users at Metadata level), so a forbidden request cannot hide in a retry or a
degraded path. A control request the role does not allow (listing secrets) must show up
as 403, or the check proves nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stratctl import labels
from tests.e2e.support import Cli, fake_study, finish, running_pods, unique, wait_until

pytestmark = pytest.mark.e2e


def audit_log(testbed) -> Path:
    if not testbed.local:
        pytest.skip("the audit log is the local testbed's (testbed/audit-policy.yaml)")
    return Path(testbed.kubeconfig).parent / "logs" / "audit.log"


def requests_since(log: Path, offset: int, user: str) -> list[dict]:
    events = []
    with log.open() as f:
        f.seek(offset)
        for line in f:
            event = json.loads(line)
            if event.get("user", {}).get("username") == user:
                events.append(event)
    return events


def forbidden(events: list[dict]) -> list[str]:
    return sorted(
        {
            f"{e['verb']} {e.get('objectRef', {}).get('resource', '')}"
            f"{'/' + e['objectRef']['subresource'] if e.get('objectRef', {}).get('subresource') else ''} "
            f"{e.get('requestURI', '')}"
            for e in events
            if (e.get("responseStatus") or {}).get("code") == 403
        }
    )


def test_every_documented_command_works_for_the_user_bound_to_stratctl_rbac(testbed, api, studies, tmp_path):
    log = audit_log(testbed)
    start = log.stat().st_size
    cli = Cli(testbed, context=testbed.restricted_context)
    name = unique("rbac")
    path = studies(
        name, fake_study(name, testbed.namespace, 4, "20s", parallelism=2, extra="queue: [default, overflow]\n")
    )
    stratctl = [sys.executable, "-m", "stratctl"]
    for offline in (["validate", str(path)], ["plan", str(path)], ["render", str(path), "-o", str(tmp_path / "out")]):
        assert subprocess.run(stratctl + offline, capture_output=True).returncode == 0, offline
    cli.run("submit", str(path), "--dry-run=server")
    run = cli.start("submit", str(path), "-o", "json", "--poll-interval", "1")
    try:
        wait_until(lambda: len(running_pods(api, f"{labels.STUDY}={name}")) == 2, 90, message="two trials running")
        for args in (
            ("status",),
            ("status", name),
            ("status", name, "-o", "json"),
            ("status", name, "-o", "wide"),
            ("logs", name),
            ("logs", name, "--best", "--sort", "loss"),
        ):
            done = cli.call(*args)
            assert done.returncode in (0, 1), (args, done.stderr)  # logs --best: 1 while no trial has a result
        watch = cli.start("status", name, "--watch")
        time.sleep(3)
        watch.terminate()
        watch.wait(10)
        cli.run("drain", name)
        cli.run("resume", name)
        progress = finish(run, timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert progress["succeeded"] == 4
    cli.run("wait", name, "--timeout", "60s")
    cli.run("delete", name, "--yes")
    events = requests_since(log, start, "trial-runner")
    assert len(events) > 50, "the audit log saw the restricted user's requests"
    assert forbidden(events) == [], "requests the RBAC of `stratctl rbac` forbids"
    # the control: a request outside the role is forbidden, and the audit log says so
    before = log.stat().st_size
    control = subprocess.run(
        [
            testbed.kubectl,
            "--kubeconfig",
            testbed.kubeconfig,
            "--context",
            testbed.restricted_context,
            "get",
            "secrets",
        ],
        capture_output=True,
        text=True,
    )
    assert control.returncode != 0 and "forbidden" in control.stderr
    wait_until(lambda: forbidden(requests_since(log, before, "trial-runner")), 10, message="the control's 403 logged")


def test_a_user_without_cluster_wide_reads_still_submits(testbed, api, studies):
    log = audit_log(testbed)
    start = log.stat().st_size
    cli = Cli(testbed, context="restricted-no-nodes")
    name = unique("blind")
    path = studies(name, fake_study(name, testbed.namespace, 3, "2s", parallelism=2))
    run = cli.start("submit", str(path), "--poll-interval", "1")
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    warnings = [line for line in err.splitlines() if "not permitted" in line]
    assert len(warnings) == 1, err
    assert warnings[0].endswith(
        "not permitted to list, watch nodes, pods across the cluster: no GPU signal and no "
        "yielding to higher-priority gangs, the target follows pending gangs and the API's "
        "answers only (an admin grants the reads with `stratctl rbac --cluster-wide-reads`)"
    )
    assert "3 succeeded, 0 failed" in err + out
    # what it was refused is exactly what the role leaves out: reads of nodes (preflight's GPU fit check)
    refused = forbidden(requests_since(log, start, "no-node-reader"))
    assert refused and all(
        r.startswith(("list nodes", "get nodes", "watch nodes", "list pods /api/v1/pods")) for r in refused
    ), refused
