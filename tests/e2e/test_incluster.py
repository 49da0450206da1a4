"""`submit --in-cluster`: a study's loop that outlives the command that sent it. Its driver
runs as a Job of one pod on a node that runs processes (the testbed's real node), in
stratctl's image, as the ServiceAccount `stratctl rbac --driver` makes; the study's trials are
KWOK's. Everything is run as the restricted user, from the installed command.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.resources import BATCH_JOB, CONFIGMAP, LEASE, NODE, POD, SERVICE, VOLCANO_JOB
from stratctl.errors import NotFound
from tests.e2e.conftest import REAL_KEY
from tests.e2e.support import Cli, busybox_study, running_pods, unique, wait_until
from tests.e2e.test_board import query

pytestmark = pytest.mark.e2e

DRIVER_IMAGE = os.environ.get("STRATCTL_TEST_DRIVER_IMAGE", "stratctl.local/stratctl:0.1.0")


@pytest.fixture
def cli(testbed, real_node):
    """The restricted user's CLI, its drivers placed on the real node (the only one that runs
    processes) by Volcano's scheduler (the testbed has no default scheduler)."""
    if not testbed.local:
        pytest.skip("the testbed's driver image and real node; another cluster has its own")
    runner = Cli(testbed, context=testbed.restricted_context)
    runner.env.update(
        STRATCTL_DRIVER_IMAGE=DRIVER_IMAGE,
        STRATCTL_DRIVER_NODE_SELECTOR=f"{REAL_KEY}=true",
        STRATCTL_DRIVER_SCHEDULER="volcano",
    )
    return runner


@pytest.fixture
def drivers(api, studies):
    """`drivers(name)` names a study whose driver a test starts; afterwards the driver goes
    first (its Job, ConfigMap and Service), so that it creates no trial while `studies`
    deletes them."""
    names: list[str] = []
    yield names.append
    for name in names:
        for kind in (BATCH_JOB, CONFIGMAP, SERVICE, LEASE):
            api.delete(kind, f"stratctl-driver-{name}")
        wait_until(
            lambda name=name: not api.list(POD, label_selector=f"{labels.DRIVER_OF}={name}")[0],
            60,
            message=f"the driver pods of {name} gone",
        )


def holder(api, study: str) -> str:
    try:
        return api.get(LEASE, f"stratctl-driver-{study}")["spec"].get("holderIdentity") or ""
    except NotFound:
        return ""


def driver_pid(study: str) -> int | None:
    """The host pid of the study's driver process (the real node's containers are this
    machine's processes)."""
    wanted = f"submit\0/stratctl/study/{study}.yaml\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def new_holder(api, study: str, old: str, timeout: float = 120) -> str:
    return wait_until(
        lambda: (h := holder(api, study)) != old and h.startswith(f"pod stratctl-driver-{study}-") and h,
        timeout,
        message=f"a new driver pod holding {study} (was: {old})",
    )


def evict(api, namespace: str, pod: str) -> None:
    """As `kubectl drain` does: the Eviction API (the pod gets DisruptionTarget, then ends)."""
    api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction",
        body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}},
        what=f"create eviction {pod}",
    )


def test_a_study_sent_in_cluster_outlives_its_command_its_driver_killed_twice_and_its_node_drained(
    testbed, real_node, api, cli, studies, drivers
):
    node, _ = real_node
    name, trials, cap = unique("incl"), 100, 8
    drivers(name)
    path = studies(
        name,
        busybox_study(
            name,
            testbed.namespace,
            trials,
            "6s",
            throttle=f"{{qps: 50, burst: 20, parallelism: {{min: 1, initial: 2, max: {cap}}}}}",
            extra="retries: {max_retry: 1}\n",
        ),
    )
    laptop = cli.start("submit", path, "--poll-interval", "1")
    follow = None
    try:
        wait_until(lambda: len(running_pods(api, f"{labels.STUDY}={name}")) >= 3, 60, message="the laptop's trials")
        # the study goes into the cluster: the command returns once the driver holds it
        started = time.monotonic()
        sent = cli.call("submit", path, "--in-cluster", "--poll-interval", "1", timeout=200)
        took = time.monotonic() - started
        assert sent.returncode == 0, sent.stderr
        first = holder(api, name)
        pod = first.removeprefix("pod ").split(" on ")[0]
        assert first == f"pod {pod} on {node}" and pod.startswith(f"stratctl-driver-{name}-"), first
        assert f"study {name} is driven by pod {pod} on node {node}" in sent.stdout, sent.stdout
        assert "warning" not in sent.stderr, sent.stderr  # the driver's version is this one's
        # the laptop's loop handed the study over and ended 0, saying where it went
        out, err = laptop.communicate(timeout=30)
        assert laptop.returncode == 0, err[-2000:]
        assert f"handed over: study {name} is driven by pod {pod} on {node}" in err, err[-2000:]
        # a second terminal follows it: the same study sent again finds its driver and follows it
        follow = cli.start("submit", path, "--in-cluster", "--poll-interval", "1", "--follow")
        snap = json.loads(cli.run("status", name, "-o", "json"))
        assert snap["studies"][0]["driver"].startswith(f"pod {pod} on {node} since "), snap["studies"][0]
        # its metrics, scraped by the testbed's Prometheus from the pod (what the board reads)
        if testbed.prometheus_url and testbed.prometheus_targets:
            ip = api.get(POD, pod)["status"]["podIP"]
            target = testbed.prometheus_targets / f"{name}.json"
            target.write_text(json.dumps([{"targets": [f"{ip}:9090"]}]))
            try:
                wait_until(
                    lambda: query(testbed.prometheus_url, f'stratctl_target_in_flight{{study="{name}"}}')["data"][
                        "result"
                    ],
                    45,
                    message="the driver's series scraped from its pod",
                )
            finally:
                target.unlink(missing_ok=True)
        # the driver SIGKILLed, twice: the Job's next pod takes the study at once
        for _ in range(2):
            pid = wait_until(lambda: driver_pid(name), 30, message="the driver's process on the host")
            os.kill(pid, signal.SIGKILL)
            first = new_holder(api, name, first)
        # its node cordoned and drained (one real node: the replacement waits until it is
        # uncordoned, then takes the study)
        [victim, *_] = wait_until(lambda: running_pods(api, f"{labels.STUDY}={name}"), 30, message="a running trial")
        evict(api, testbed.namespace, victim["metadata"]["name"])  # a trial preempted while the driver runs
        api.patch(NODE, node, {"spec": {"unschedulable": True}})
        try:
            evicted = first.removeprefix("pod ").split(" on ")[0]
            evict(api, testbed.namespace, evicted)
            # its loop stops on the SIGTERM (its mark let go), well within the pod's 30 s grace
            wait_until(
                lambda: not api.list(POD, field_selector=f"metadata.name={evicted}")[0],
                20,
                message="the evicted driver gone",
            )

            def pending():
                pods = api.list(POD, label_selector=f"{labels.DRIVER_OF}={name}")[0]
                seen = [
                    (p["metadata"]["name"], p["status"].get("phase"), bool(p["metadata"].get("deletionTimestamp")))
                    for p in pods
                ]
                found = [
                    p
                    for p in pods
                    if p["status"].get("phase") == "Pending" and not p["metadata"].get("deletionTimestamp")
                ]
                return found or (None, seen, api.get(BATCH_JOB, f"stratctl-driver-{name}").get("status"))

            deadline = time.monotonic() + 120
            while not isinstance(waiting := pending(), list):
                assert time.monotonic() < deadline, f"no replacement driver pod pending after 120 s: {waiting}"
                time.sleep(0.5)
            time.sleep(3)
            assert (
                not waiting[0]["spec"].get("nodeName")
                and holder(api, name) != f"pod {waiting[0]['metadata']['name']} on {node}"
            )
        finally:
            api.patch(NODE, node, {"spec": {"unschedulable": None}})
        new_holder(api, name, first)
        # the study goes on to its end without any command of ours running its loop
        code = follow.wait(timeout=300)
        followed_out, followed_err = follow.communicate()
        assert code == 0, followed_err[-3000:]
        assert f"study {name} is already driven by pod " in followed_out, followed_out
        assert "the driver ended: every trial done" in followed_err, followed_err[-2000:]
    finally:
        for process in (laptop, follow):
            if process is not None and process.poll() is None:
                process.kill()
    job = api.get(BATCH_JOB, f"stratctl-driver-{name}")
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"]), job["status"]
    assert job["status"].get("failed", 0) == 2  # the two killed pods; the evicted one is not counted
    # every trial ran exactly once (a preempted one once more, as its next attempt), and succeeded
    jobs = api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={name}")[0]
    attempts = sorted(
        (j["metadata"]["labels"][labels.TRIAL], int(j["metadata"]["labels"][labels.ATTEMPT])) for j in jobs
    )
    assert len({trial for trial, _ in attempts}) == trials
    assert len(attempts) == len(set(attempts)), "a trial's attempt created twice"
    snap = json.loads(cli.run("status", name, "-o", "json"))
    [study] = snap["studies"]
    assert study["states"]["succeeded"] == trials and study["states"].get("failed", 0) == 0, study["states"]
    assert study["preemptions"] >= 1 and study["failed_attempts"] == 0, study
    assert study["driver"] == ""  # nobody drives a finished study
    logged = cli.run("logs", name, "--driver")
    assert f"stratctl-driver-{name}-" in logged  # the prefixes of its several pods
    targets = [int(t) for t in re.findall(r"target in flight (\d+)", logged)]
    assert len(set(targets)) >= 2 and min(targets) < cap, (targets, logged[-4000:])  # it moved with the cluster
    assert len(api.list(POD, label_selector=f"{labels.DRIVER_OF}={name}")[0]) == 3  # 2 killed, the last
    deleted = cli.run("delete", name, "--yes")
    assert "driver" in deleted, deleted
    for kind in (BATCH_JOB, CONFIGMAP, SERVICE):
        with pytest.raises(NotFound):
            api.get(kind, f"stratctl-driver-{name}")
    print(f"submit --in-cluster returned in {took:.1f} s")
