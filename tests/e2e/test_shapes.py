"""Trials of different shapes on the real testbed: replicas and GPUs rendered per trial, and
the small trials run in the holes another team leaves while the large ones wait for whole
blocks, although the study lists the large ones first."""

from __future__ import annotations

import json
import textwrap

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import NODE, POD
from stratctl.backends.kubernetes.objects.gpus import Placement, free_gpus, placeable, pod_gpus
from tests.e2e.support import finish, of_study, unique, wait_until

pytestmark = pytest.mark.e2e

OTHER_TEAM = "e2e.stratctl.io/other-team"
HOLD = 35  # seconds the other team's pods hold 7 of the 8 GPUs of every node


def other_team(api, namespace: str, prefix: str, hold: int) -> list[str]:
    """A pod holding all but one GPU on every node the study may use (bound: no scheduler
    involved), running for `hold` seconds: every such node has one GPU free, none has two.
    Nodes tainted for others (the testbed's real node) are not the study's."""
    open_nodes = placeable(api.list(NODE)[0], [Placement()])
    free = free_gpus(open_nodes, [])
    nodes = sorted(n for n, gpus in free.items() if gpus > 0)
    names = []
    for i, node in enumerate(nodes):
        gpus = free[node] - 1
        name = f"{prefix}-{i}"
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {OTHER_TEAM: prefix},
                    "annotations": {"testbed.stratctl.io/run-duration": f"{hold}s"},
                },
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox",
                            "resources": {
                                "requests": {"nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            }
        )
        names.append(name)
    return names


def test_small_trials_fill_the_holes_while_large_ones_wait_for_whole_nodes(testbed, api, cli, studies):
    name = unique("shapes")
    # listed order puts the 4-GPU trials (2 pods of 2, or 1 of 4) first; a cap in study order would
    # fill its slots with them while the holes stayed idle
    path = studies(
        name,
        textwrap.dedent(f"""\
        name: {name}
        namespace: {testbed.namespace}
        space:
          shape: {{type: choice, values: ["2x2", "1x4", "1x1"]}}
          seed: {{type: int, low: 0, high: 3}}
        strategy: {{kind: grid}}
        trial:
          image: busybox
          command: ["train"]
          annotations: {{testbed.stratctl.io/run-duration: 3s}}
          resources: {{requests: {{nvidia.com/gpu: "{{{{ params.shape.split('x')[1] }}}}", cpu: 100m}}}}
          tasks: [{{name: worker, replicas: "{{{{ params.shape.split('x')[0] }}}}"}}]
        throttle: {{qps: 50, burst: 50, order: listed, yield_to_higher_priority: false,
                    parallelism: {{min: 1, initial: 4, max: 12}}}}
        """),
    )
    pods = []
    prefix = unique("other")
    held = other_team(api, testbed.namespace, prefix, HOLD)
    try:
        wait_until(
            lambda: all(
                p["status"].get("phase") == "Running" for p in api.list(POD, label_selector=f"{OTHER_TEAM}={prefix}")[0]
            ),
            30,
            message="the other team's pods running",
        )
        # their run-duration counts from when they run
        released = min(_started(p) for p in api.list(POD, label_selector=f"{OTHER_TEAM}={prefix}")[0]) + HOLD
        proc = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
        summary = finish(proc, timeout=240)
        assert summary["succeeded"] == 12 and summary["failed"] == 0

        pods = of_study(api, POD, name)
        by_trial: dict[str, list[dict]] = {}
        for pod in pods:
            by_trial.setdefault(pod["metadata"]["labels"][labels.TRIAL], []).append(pod)
        jobs = {
            j["metadata"]["labels"][labels.TRIAL]: j
            for j in api.list(("batch.volcano.sh/v1alpha1", "Job"), label_selector=f"{labels.STUDY}={name}")[0]
        }
        started: dict[str, list[float]] = {"small": [], "large": []}
        for trial, job in jobs.items():
            shape = json.loads(job["metadata"]["annotations"][labels.PARAMS])["shape"]
            replicas, gpus = (int(x) for x in shape.split("x"))
            # each trial's gang as its parameters say: minAvailable, replicas and GPUs per pod
            assert job["spec"]["minAvailable"] == job["spec"]["tasks"][0]["replicas"] == replicas
            assert [pod_gpus(p) for p in by_trial[trial]] == [gpus] * replicas
            start = min(_started(p) for p in by_trial[trial])
            started["large" if replicas * gpus == 4 else "small"].append(start)
        # the 1-GPU trials ran in the holes while the other team held the rest ...
        assert len(started["small"]) == 4 and max(started["small"]) < released - 1
        # ... and the 4-GPU trials once whole blocks were free (timestamps are whole seconds)
        assert len(started["large"]) == 8 and min(started["large"]) >= released - 1
    finally:
        for pod in held:
            api.delete(POD, pod)


def _started(pod: dict) -> float:
    from datetime import datetime

    stamp = pod["status"].get("startTime") or pod["metadata"]["creationTimestamp"]
    for status in pod["status"].get("containerStatuses") or []:
        state = status.get("state") or {}
        running = (state.get("running") or state.get("terminated") or {}).get("startedAt")
        if running:
            stamp = running
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
