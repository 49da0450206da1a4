"""Network topology: the study field (validated with located problems, rendered into both
workloads), the HyperNode tree as the domains a hard-topology gang may land in, the whole
gangs that fit inside one domain, and what the loop does when free GPUs are spread."""

from __future__ import annotations

import logging

import pytest

from stratctl.backends.kubernetes.api.cluster import HYPERNODE
from stratctl.backends.kubernetes.objects.topology import TOP, domains, gangs_fit_within, node_members, spread
from stratctl.backends.kubernetes.watch.capacity import ClusterSignals
from stratctl.backends.kubernetes.watch.mirror import Mirror
from stratctl.core.space import expand
from stratctl.errors import Invalid
from stratctl.run.policy import AdaptiveConfig, Observed, PolicyState, StaticPolicy, decide
from tests.unit.rendering import Renderer
from tests.unit.studies import load, problems

STUDY = """\
name: topo
namespace: ns
workload: {workload}
space:
  lr: {{type: choice, values: [0.1, 0.2]}}
strategy: {{kind: grid}}
trial:
  image: busybox
  resources: {{requests: {{nvidia.com/gpu: 4}}}}
  tasks: [{{name: worker, replicas: 2}}]
  network_topology: {topology}
"""


def study_text(topology: str = "{mode: hard, highest_tier: 1}", workload: str = "volcano") -> str:
    return STUDY.format(workload=workload, topology=topology)


# ---------------------------------------------------------------- the study field


@pytest.mark.parametrize(
    ("topology", "problem"),
    [
        (
            "{mode: strict, highest_tier: 1}",
            "study.yaml:11:28: trial.network_topology.mode: must be one of 'hard' or 'soft'",
        ),
        ("{mode: hard, highest_tier: -1}", "study.yaml:11:48: trial.network_topology.highest_tier: must be at least 0"),
        (
            "{mode: hard, highest_tier: 1, highestTierAllowed: 1}",
            "study.yaml:11:51: unknown key 'highestTierAllowed' in trial.network_topology (did you mean "
            "'highest_tier'?)",
        ),
        (
            "{mode: hard}",
            "study.yaml:11:21: trial.network_topology: mode 'hard' needs highest_tier: the highest "
            "HyperNode tier a gang may span (1: the nodes under one leaf switch)",
        ),
        (
            "{highest_tier: one}",
            "study.yaml:11:36: trial.network_topology.highest_tier: must be a whole number, got 'one'",
        ),
    ],
)
def test_a_bad_network_topology_is_located_at_its_field(tmp_path, topology, problem):
    assert problems(tmp_path, study_text(topology)) == [problem]


def test_hard_is_the_default_mode_and_soft_needs_no_tier(tmp_path):
    assert load(tmp_path, study_text("{highest_tier: 2}")).trial.network_topology.hard
    soft = load(tmp_path, study_text("{mode: soft}")).trial.network_topology
    assert (soft.hard, soft.manifest()) == (False, {"mode": "soft"})


def _docs(tmp_path, topology: str, workload: str) -> tuple[Renderer, list[dict]]:
    study = load(tmp_path, study_text(topology, workload))
    renderer = Renderer(study)
    return renderer, renderer.render(expand(study)[1])


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_the_topology_is_rendered_where_volcano_reads_it(tmp_path, workload):
    renderer, docs = _docs(tmp_path, "{mode: hard, highest_tier: 1}", workload)
    assert renderer._compiled is not None  # still the once-per-study skeleton
    # the Volcano Job (whose controller copies it to its PodGroup), or the batch Job's PodGroup
    [holder] = [d for d in docs if d["kind"] == ("Job" if workload == "volcano" else "PodGroup")]
    assert holder["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert all("networkTopology" not in d["spec"] for d in docs if d is not holder)


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_no_topology_renders_none(tmp_path, workload):
    text = study_text(workload=workload)
    study = load(tmp_path, text[: text.index("  network_topology:")])
    assert all("networkTopology" not in d["spec"] for d in Renderer(study).render(expand(study)[0]))


# ---------------------------------------------------------------- the HyperNode tree


def node(name, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}}


def hypernode(name, tier, nodes=(), children=(), **selector):
    members = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in nodes]
    members += [{"type": "HyperNode", "selector": {"exactMatch": {"name": c}}} for c in children]
    members += [{"type": "Node", "selector": {k: v}} for k, v in selector.items()]
    return {"metadata": {"name": name}, "spec": {"tier": tier, "members": members}}


NODES = [node(f"n{i}") for i in range(8)]
# the testbed's: four leaves of two nodes, two spines of two leaves
TREE = [hypernode(f"leaf-{k}", 1, nodes=(f"n{2 * k}", f"n{2 * k + 1}")) for k in range(4)] + [
    hypernode("spine-0", 2, children=("leaf-0", "leaf-1")),
    hypernode("spine-1", 2, children=("leaf-2", "leaf-3")),
]


def named(found):
    return {d.name: sorted(d.nodes) for d in found}


def test_the_domains_are_the_largest_hypernodes_of_the_allowed_tiers():
    assert named(domains(TREE, NODES, 1)) == {f"leaf-{k}": [f"n{2 * k}", f"n{2 * k + 1}"] for k in range(4)}
    assert named(domains(TREE, NODES, 2)) == {"spine-0": ["n0", "n1", "n2", "n3"], "spine-1": ["n4", "n5", "n6", "n7"]}
    # above the highest tier Volcano's own HyperNode holds every node
    assert named(domains(TREE, NODES, 3)) == {TOP: [f"n{i}" for i in range(8)]}
    assert domains(TREE, NODES, 0) == []
    # no HyperNodes at all: Volcano's own one is tier 1, so tier 1 spans the cluster
    assert named(domains([], NODES, 1)) == {TOP: [f"n{i}" for i in range(8)]}


def test_a_leaf_outside_every_spine_is_a_domain_of_its_own_at_tier_two():
    tree = TREE[:4] + [hypernode("spine-0", 2, children=("leaf-0", "leaf-1"))]
    assert named(domains(tree, NODES, 2)) == {
        "spine-0": ["n0", "n1", "n2", "n3"],
        "leaf-2": ["n4", "n5"],
        "leaf-3": ["n6", "n7"],
    }


def test_members_are_picked_by_name_pattern_or_labels_as_volcano_does():
    nodes = [node("gpu-a1", {"rack": "r1"}), node("gpu-a2", {"rack": "r1"}), node("gpu-b1", {"rack": "r2"})]
    assert node_members({"regexMatch": {"pattern": "a[0-9]$"}}, nodes) == {"gpu-a1", "gpu-a2"}
    assert node_members({"regexMatch": {"pattern": "b"}}, nodes) == {"gpu-b1"}  # found anywhere in the name
    assert node_members({"regexMatch": {"pattern": "("}}, nodes) == set()  # not a pattern: none
    assert node_members({"labelMatch": {"matchLabels": {"rack": "r1"}}}, nodes) == {"gpu-a1", "gpu-a2"}
    assert node_members(
        {"labelMatch": {"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["r1"]}]}}, nodes
    ) == {"gpu-b1"}
    assert node_members({"labelMatch": {}}, nodes) == set()  # an empty selector picks none
    tree = [
        hypernode("rack-1", 1, labelMatch={"matchLabels": {"rack": "r1"}}),
        hypernode("rack-2", 1, regexMatch={"pattern": "^gpu-b"}),
    ]
    assert named(domains(tree, nodes, 1)) == {"rack-1": ["gpu-a1", "gpu-a2"], "rack-2": ["gpu-b1"]}


def test_a_cycle_in_the_tree_ends_and_offers_no_domain():
    # Volcano schedules no topology-bound job while its HyperNode tree has a cycle
    tree = [hypernode("x", 2, nodes=("n0",), children=("y",)), hypernode("y", 1, nodes=("n1",), children=("x",))]
    assert domains(tree, NODES, 2) == []


# ---------------------------------------------------------------- whole gangs inside one domain

PAIR = [1, 1]  # a gang of two one-GPU pods


def free(*gpus):
    return {f"n{i}": g for i, g in enumerate(gpus)}


def test_free_gpus_spread_one_per_leaf_hold_no_gang_and_say_why():
    scattered = free(1, 0, 1, 0, 1, 0, 1, 0)  # four free GPUs, one under each leaf
    leaves = domains(TREE, NODES, 1)
    assert gangs_fit_within(scattered, PAIR, leaves) == 0
    assert spread(scattered, PAIR, 0, 1) == (
        "4 free GPUs are spread over HyperNodes: no tier-1 HyperNode holds a whole gang (2 GPUs on 2 pods)"
    )
    # ignoring the topology, the same GPUs hold two gangs
    assert gangs_fit_within(scattered, PAIR, domains([], NODES, 1)) == 2


def test_a_leaf_with_room_counts_and_the_rest_does_not():
    gpus = free(1, 1, 1, 0, 0, 0, 1, 0)  # leaf-0 holds a gang; leaf-1 and leaf-3 one GPU each
    assert gangs_fit_within(gpus, PAIR, domains(TREE, NODES, 1)) == 1
    assert spread(gpus, PAIR, 1, 1) is None
    # gangs of two 4-GPU pods: leaf-0 holds one on n0 alone, leaf-1 one on 4 + 4, leaf-2's 4 + 0 none
    assert gangs_fit_within(free(8, 0, 4, 4, 4, 0, 0, 0), [4, 4], domains(TREE, NODES, 1)) == 2


def test_tier_two_counts_gangs_that_span_two_leaves_of_one_spine():
    gpus = free(1, 0, 1, 0, 1, 0, 0, 0)  # leaf-0 and leaf-1 (spine-0) one each; leaf-2 (spine-1) one
    assert gangs_fit_within(gpus, PAIR, domains(TREE, NODES, 1)) == 0
    assert gangs_fit_within(gpus, PAIR, domains(TREE, NODES, 2)) == 1  # n0 + n2 under spine-0
    assert spread(free(1, 0, 0, 0, 1, 0, 0, 0), PAIR, 0, 2) == (
        "2 free GPUs are spread over HyperNodes: no HyperNode of tier 2 or below holds a whole gang (2 GPUs on 2 pods)"
    )


def test_no_spread_without_free_gpus_for_a_gang_anywhere():
    assert spread(free(1, 0, 0, 0, 0, 0, 0, 0), PAIR, 0, 1) is None  # one GPU: no gang fits anyway
    assert gangs_fit_within(free(0, 0), [0], domains(TREE, NODES, 1)) == 10_000  # no GPU: never blocked


# ---------------------------------------------------------------- the signals and the policy


class _Items:
    def __init__(self, items):
        self._items = items

    def items(self):
        return self._items


def gpu_node(name, gpus=8):
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def held(node_name, gpus):
    return {
        "metadata": {"name": f"load-{node_name}", "namespace": "ns"},
        "status": {"phase": "Running"},
        "spec": {"nodeName": node_name, "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def signals_of(tmp_path, topology: str, hypernodes=TREE):
    study = load(tmp_path, study_text(topology))
    signals = ClusterSignals(None, [1, 1], "ns", topology=study.trial.network_topology)
    nodes = [gpu_node(f"n{i}") for i in range(8)]
    # every node full but one GPU on the first node of each leaf
    pods = [held(f"n{i}", 7 if i % 2 == 0 else 8) for i in range(8)]
    signals.nodes, signals.pods = _Items(nodes), _Items(pods)
    if signals.hypernodes is not None:
        signals.hypernodes = _Items(hypernodes)
    return signals


def test_a_hard_topology_study_sees_no_room_in_gpus_spread_over_leaves(tmp_path):
    capacity = signals_of(tmp_path, "{mode: hard, highest_tier: 1}").capacity()
    assert (capacity.free_gpus, capacity.gangs_fit, capacity.fragmentation) == (4, 0, 1.0)
    assert capacity.spread.startswith("4 free GPUs are spread over HyperNodes: no tier-1 HyperNode")
    # a soft topology (a preference) and a tier spanning the cluster count them as before
    for topology in ("{mode: soft}", "{mode: hard, highest_tier: 3}"):
        capacity = signals_of(tmp_path, topology).capacity()
        assert (capacity.gangs_fit, capacity.spread) == (2, None)


class _Forbidden:
    def list(self, kind, *args, **kwargs):
        raise Invalid("list HyperNode: hypernodes.topology.volcano.sh is forbidden", status=403, reason="Forbidden")


def test_without_the_right_to_list_hypernodes_room_is_counted_without_topology(tmp_path, caplog):
    signals = signals_of(tmp_path, "{mode: hard, highest_tier: 1}")
    signals.hypernodes = Mirror(_Forbidden(), HYPERNODE)  # as start() finds it
    with caplog.at_level(logging.WARNING):
        signals.hypernodes = signals._watch_hypernodes()
    assert signals.hypernodes is None
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("cannot list HyperNodes (list HyperNode: hypernodes.topology.volcano.sh is forbidden)")
    assert "\n" not in warning
    assert (signals.capacity().gangs_fit, signals.capacity().spread) == (2, None)


SPREAD = "4 free GPUs are spread over HyperNodes: no tier-1 HyperNode holds a whole gang (2 GPUs on 2 pods)"


def test_the_policy_admits_nothing_while_gpus_are_spread_and_says_why():
    config = AdaptiveConfig(initial=4, queue_ahead=2)
    observed = Observed(in_flight=0, pending=0, waiting=10, gangs_fit=0, free_gpus=4, spread=SPREAD)
    decision, _ = decide(observed, config, PolicyState(target=4), now=100.0)
    assert (decision.room, decision.admit(observed)) == (0, 0)
    assert decision.reason == f"{SPREAD}: keeping target 4"
    # a full cluster (no spread) still queues two gangs for the next GPUs freed
    full, _ = decide(
        Observed(in_flight=0, pending=0, waiting=10, gangs_fit=0, free_gpus=0), config, PolicyState(target=4), now=100.0
    )
    assert (full.room, full.reason) == (2, "no free GPUs for another gang: keeping target 4")
    static = StaticPolicy(8).decide(observed, 100.0)
    assert (static.admit(observed), static.reason) == (0, f"static cap 8, {SPREAD}")
