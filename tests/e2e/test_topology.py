"""Network topology on the real testbed (testbed/hypernodes.yaml: 4 leaf HyperNodes of two
nodes under 2 spines, and Volcano's network-topology-aware plugin).

A study with `network_topology: {mode: hard, highest_tier: 1}` has every pod of each trial
on the two nodes of one leaf, for both workloads; and while the free GPUs are spread one per
leaf it creates nothing (they hold no whole gang inside one leaf), says so, and starts the
moment one leaf has room."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import HYPERNODE, NODE, POD, VOLCANO_JOB
from tests.e2e.support import GPU, Cli, finish, of_study, unique, wait_until

pytestmark = pytest.mark.e2e


def leaves(api) -> dict[str, str]:
    """Node name → the tier-1 HyperNode holding it (members by exactMatch, as the testbed's)."""
    found = {}
    for hn in api.list(HYPERNODE)[0]:
        if hn["spec"]["tier"] == 1:
            for member in hn["spec"]["members"]:
                found[member["selector"]["exactMatch"]["name"]] = hn["metadata"]["name"]
    return found


def topology_study(name: str, namespace: str, trials: int, gpus: int, workload: str, duration: str) -> str:
    """`trials` trials, each a gang of two pods of `gpus` GPUs that must share a leaf switch."""
    return textwrap.dedent(f"""\
        name: {name}
        namespace: {namespace}
        priority_class: stratctl-low
        workload: {workload}
        space:
          seed: {{type: int, low: 0, high: {trials - 1}}}
        strategy: {{kind: grid}}
        trial:
          image: stratctl.invalid/fake-trial:0
          annotations: {{testbed.stratctl.io/run-duration: {duration}}}
          resources: {{requests: {{{GPU}: {gpus}, cpu: 100m}}, limits: {{{GPU}: {gpus}}}}}
          tasks: [{{name: worker, replicas: 2}}]
          network_topology: {{mode: hard, highest_tier: 1}}
        throttle: {{qps: 50, burst: 20, parallelism: {{min: 1, initial: {trials}, max: {trials}}}}}
        """)


@pytest.fixture
def leaf_of(api):
    found = leaves(api)
    nodes = {n["metadata"]["name"] for n in api.list(NODE)[0] if n["metadata"]["labels"].get("type") == "kwok"}
    assert nodes and nodes <= found.keys(), f"testbed nodes outside every leaf HyperNode: {nodes - found.keys()}"
    assert len(set(found.values())) == 4
    return found


@pytest.fixture
def load(api):
    """`load(node, gpus)`: a bare pod bound to `node` holding `gpus` GPUs until deleted (the
    testbed runs pods without a run-duration for ever); returns its name. All deleted afterwards."""
    made: list[str] = []

    def make(node: str, gpus: int) -> str:
        pod = unique(f"load-{node}")
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": api.namespace},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "hold",
                            "image": "stratctl.invalid/load:0",
                            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
                        }
                    ],
                },
            }
        )
        made.append(pod)
        return pod

    yield make
    for pod in made:
        try:
            api.delete(POD, pod)
        except Exception:  # deleted by the test already
            pass
    wait_until(
        lambda: not [p for p in api.list(POD)[0] if p["metadata"]["name"] in made], 60, message="the load pods gone"
    )


def by_leaf(leaf_of: dict[str, str]) -> list[list[str]]:
    """The testbed's nodes leaf by leaf, in order of names."""
    groups: dict[str, list[str]] = {}
    for node in sorted(leaf_of):
        groups.setdefault(leaf_of[node], []).append(node)
    return [groups[leaf] for leaf in sorted(groups)]


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_every_pod_of_a_trial_lands_under_one_leaf_switch(api, cli, studies, leaf_of, load, workload):
    # Gangs of two 5-GPU pods (never on one 8-GPU node). 5 GPUs free on the first node of
    # leaves 0 and 1 (their second nodes full), leaf 2 empty, leaf 3 full: bin packing alone
    # puts a gang on those two fuller nodes, across two leaves; the topology puts it on leaf 2.
    (a0, b0), (a1, b1), (a2, b2), (a3, b3) = by_leaf(leaf_of)
    for node, gpus in ((a0, 3), (b0, 8), (a1, 3), (b1, 8), (a3, 8), (b3, 8)):
        load(node, gpus)
    name, trials = unique("topo"), 3
    path = studies(name, topology_study(name, api.namespace, trials, 5, workload, "3s"))
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        progress = finish(submit, timeout=150)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert (progress["succeeded"], progress["failed"]) == (trials, 0), progress

    gangs: dict[str, list[str]] = {}
    for pod in of_study(api, POD, name):
        job = pod["metadata"]["labels"][labels.TRIAL] + "/" + pod["metadata"]["labels"][labels.ATTEMPT]
        gangs.setdefault(job, []).append(pod["spec"]["nodeName"])
    assert len(gangs) >= trials
    for job, nodes in gangs.items():
        assert sorted(nodes) == sorted([a2, b2]), f"{job}: pods on {nodes}, under {[leaf_of[n] for n in nodes]}"


def decision_of(cli, name: str) -> str | None:
    """The reason of the study's target as `status -o json` shows it; None before it has one."""
    done = cli.call("status", name, "-o", "json")
    if done.returncode != 0:
        return None
    return json.loads(done.stdout)["studies"][0].get("decision") or None


def test_free_gpus_spread_one_per_leaf_admit_nothing_and_say_why(api, testbed, studies, leaf_of, load):
    # every GPU held but one on the first node of each leaf: 4 free GPUs, no two under one leaf
    leaves_ = by_leaf(leaf_of)
    held = {node: load(node, 7 if i == 0 else 8) for nodes in leaves_ for i, node in enumerate(nodes)}
    name = unique("spread")
    path = studies(name, topology_study(name, api.namespace, 4, 1, "volcano", "2s"))
    # as the restricted user, whose role lets it watch HyperNodes
    cli = Cli(testbed, context=testbed.restricted_context)
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        decision = wait_until(lambda: decision_of(cli, name), 60, message="the study's first decision")
        assert decision == (
            "4 free GPUs are spread over HyperNodes: no tier-1 HyperNode holds a whole gang "
            "(2 GPUs on 2 pods): keeping target 4"
        ), decision
        for _ in range(5):  # five more cycles: still nothing created
            time.sleep(1)
            assert submit.poll() is None
            assert of_study(api, VOLCANO_JOB, name) == []
        # the second node of leaf 0 frees: the study starts there and runs to the end
        api.delete(POD, held[leaves_[0][1]])
        progress = finish(submit, timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert (progress["succeeded"], progress["failed"]) == (4, 0), progress
    nodes = {p["spec"]["nodeName"] for p in of_study(api, POD, name)}
    assert nodes <= set(leaves_[0]), nodes
