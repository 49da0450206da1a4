"""GPUs on nodes the study's pods cannot go to are not the study's: a node whose NoSchedule
or NoExecute taint its trials do not tolerate (the testbed's real node, a pool tainted for
another team, GPU nodes tainted `nvidia.com/gpu` on managed clusters), or whose labels its
node selector does not match, adds nothing to the free GPUs the loop sizes its target by."""

from __future__ import annotations

from stratctl.backends.kubernetes.objects.gpus import Placement, placeable, placements, tolerates
from stratctl.backends.kubernetes.watch.capacity import ClusterSignals
from tests.unit.studies import MINIMAL, load

REAL = {"key": "testbed.stratctl.io/real", "value": "true", "effect": "NoSchedule"}


def node(name, gpus, taints=(), labels=None):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


class _Items:
    def __init__(self, items):
        self._items = items

    def items(self):
        return self._items


def test_tolerations_follow_the_kubernetes_rule():
    assert tolerates([{"key": "testbed.stratctl.io/real", "operator": "Exists"}], REAL)
    assert tolerates([{"key": "testbed.stratctl.io/real", "value": "true"}], REAL)  # Equal by default
    assert not tolerates([{"key": "testbed.stratctl.io/real", "value": "false"}], REAL)
    assert not tolerates([{"key": "testbed.stratctl.io/real", "operator": "Exists", "effect": "NoExecute"}], REAL)
    assert tolerates([{"operator": "Exists"}], REAL)  # no key: every taint
    assert not tolerates([{"key": "other", "operator": "Exists"}], REAL)
    assert not tolerates([], REAL)


def test_a_node_tainted_for_others_or_of_another_pool_is_not_placeable():
    plain, real = node("gpu-node-0", 8), node("stratctl-real-0", 4, [REAL])
    soft = node("soft", 8, [{"key": "k", "effect": "PreferNoSchedule"}])  # a preference keeps no pod out
    a100 = node("a100", 8, labels={"pool": "a100"})
    nodes = [plain, real, soft, a100]
    assert placeable(nodes, None) == nodes
    assert [n["metadata"]["name"] for n in placeable(nodes, [Placement()])] == ["gpu-node-0", "soft", "a100"]
    tolerant = Placement(({"key": "testbed.stratctl.io/real", "operator": "Exists"},), {})
    assert len(placeable(nodes, [tolerant])) == 4
    assert [n["metadata"]["name"] for n in placeable(nodes, [Placement((), {"pool": "a100"})])] == ["a100"]
    # a node any task's pods may go to counts
    assert len(placeable(nodes, [Placement((), {"pool": "a100"}), tolerant])) == 4


def test_the_loop_counts_no_free_gpu_of_a_node_its_trials_cannot_use():
    nodes = [node("gpu-node-0", 8), node("stratctl-real-0", 4, [REAL])]

    def free(where):
        signals = ClusterSignals(None, [1], "ns", yield_to_higher=False, placements=where)
        signals.nodes, signals.pods, signals.groups = _Items(nodes), _Items([]), _Items([])
        signals._priorities = None
        capacity = signals.capacity()
        return capacity.free_gpus, capacity.nodes

    assert free([Placement()]) == (8, 1)
    assert free([Placement(({"key": "testbed.stratctl.io/real", "operator": "Exists"},), {})]) == (12, 2)
    assert free(None) == (12, 2)


def test_a_study_places_each_task_by_its_tolerations_and_selector(tmp_path):
    study = load(
        tmp_path,
        MINIMAL.replace(
            "  image: busybox\n",
            "  image: busybox\n"
            "  node_selector: {pool: a100}\n"
            "  tolerations: [{key: testbed.stratctl.io/real, operator: Exists, effect: NoSchedule}]\n",
        ).replace(
            "      replicas: 2\n",
            "      replicas: 2\n      node_selector: {zone: a}\n    - name: ps\n      tolerations: []\n",
        ),
    )
    worker, ps = placements(study.trial)
    assert worker == Placement(
        ({"key": "testbed.stratctl.io/real", "operator": "Exists", "effect": "NoSchedule"},),
        {"pool": "a100", "zone": "a"},
    )
    assert ps == Placement((), {"pool": "a100"})  # `tolerations: []` asks for none


def test_a_templated_selector_places_anywhere(tmp_path):
    study = load(
        tmp_path, MINIMAL.replace("  image: busybox\n", '  image: busybox\n  node_selector: {bs: "{{ params.bs }}"}\n')
    )
    assert placements(study.trial) is None
