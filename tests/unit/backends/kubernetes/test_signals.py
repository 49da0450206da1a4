from stratctl.backends.kubernetes.objects.gpus import fragmentation, free_gpus, pod_gpus
from stratctl.run.packing import gangs_fit


def node(name, gpus, ready=True, unschedulable=False):
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "32"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(node_name, gpus, phase="Running", init_gpus=0):
    spec = {"nodeName": node_name, "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    if init_gpus:
        spec["initContainers"] = [{"resources": {"limits": {"nvidia.com/gpu": init_gpus}}}]
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def test_free_gpus_subtract_requests_of_non_terminated_pods_only():
    nodes = [node("a", 8), node("b", 8), node("c", 8, ready=False), node("d", 8, unschedulable=True)]
    pods = [
        pod("a", 3),
        pod("a", 2, phase="Pending"),
        pod("a", 4, phase="Succeeded"),
        pod("b", 1, phase="Failed"),
        pod(None, 8),
        pod("zz", 8),
    ]
    assert free_gpus(nodes, pods) == {"a": 3, "b": 8}


def test_pod_gpus_counts_the_larger_of_containers_and_init():
    assert pod_gpus(pod("a", 2)) == 2
    assert pod_gpus(pod("a", 1, init_gpus=4)) == 4
    assert pod_gpus({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}, {}]}}) == 2


def test_gangs_fit_is_fragmentation_aware():
    # 8 free GPUs, one per node: no gang of two 4-GPU pods fits, eight 1-GPU gangs do
    spread = {f"n{i}": 1 for i in range(8)}
    assert gangs_fit(spread, [4, 4]) == 0
    assert gangs_fit(spread, [1]) == 8
    assert gangs_fit(spread, [1, 1]) == 4
    assert fragmentation(spread, [4, 4]) == 1.0
    assert fragmentation(spread, [1, 1]) == 0.0
    # two nodes with 8 free hold two 2×4 gangs, pods of one gang may share a node
    assert gangs_fit({"a": 8, "b": 8}, [4, 4]) == 2
    assert gangs_fit({"a": 8, "b": 7}, [4, 4]) == 1
    assert fragmentation({"a": 8, "b": 7}, [4, 4]) == 7 / 15


def test_best_fit_keeps_big_holes_for_big_pods():
    # a 3-GPU pod should go to the 3-GPU node, leaving 8 for the next gang
    assert gangs_fit({"a": 3, "b": 8}, [3, 8]) == 1
    assert gangs_fit({"a": 3, "b": 8, "c": 3}, [3]) == 4


def test_gpu_free_gangs_are_never_blocked():
    assert gangs_fit({}, [0, 0], limit=50) == 50


def test_pods_waiting_for_a_node_take_their_gpus_first():
    from stratctl.backends.kubernetes.objects.gpus import after_demand, pending_demand

    waiting = [
        pod(None, 4, phase="Pending"),
        pod(None, 2, phase="Pending"),
        pod("a", 8, phase="Pending"),
        pod(None, 1, phase="Failed"),
        pod(None, 0, phase="Pending"),
    ]
    assert sorted(pending_demand(waiting)) == [2, 4]  # bound or terminated pods are not demand
    free = {"a": 8, "b": 4, "c": 2}
    # best fit: the 4-GPU pod takes b, the 2-GPU pod takes c; a stays whole
    assert after_demand(free, [4, 2]) == {"a": 8, "b": 0, "c": 0}
    assert gangs_fit(after_demand(free, [4, 2]), [4, 4]) == 1
    # demand larger than any hole still counts against the free GPUs
    assert sum(after_demand({"a": 2, "b": 2}, [8]).values()) == 2


def test_gangs_queued_by_other_launchers_count_before_their_pods_exist():
    from stratctl.backends.kubernetes.objects.gpus import after_demand, queued_demand

    def group(name, phase, members, gpus):
        return {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"minMember": members, "minResources": {"nvidia.com/gpu": str(gpus), "cpu": "1"}},
            "status": {"phase": phase},
        }

    def member(group_name, node_name=None):
        p = pod(node_name, 1, phase="Running" if node_name else "Pending")
        p["metadata"] = {"name": "m", "namespace": "ns", "annotations": {"scheduling.k8s.io/group-name": group_name}}
        return p

    groups = [
        group("queued", "Pending", 3, 3),  # just admitted elsewhere: no pods yet
        group("half", "Inqueue", 4, 8),  # pods being created: 1 of 4 exists
        group("running", "Running", 2, 2),  # placed: in the free GPUs already
        group("cpu-only", "Pending", 2, 0),
    ]
    pods = [member("half"), member("running", "a"), member("running", "a")]
    assert sorted(queued_demand(groups, pods)) == [1, 1, 1, 2, 2, 2]
    # 8 free GPUs on one node hold two 4-GPU gangs; with those queued gangs, none
    assert gangs_fit(after_demand({"a": 8}, queued_demand(groups, pods)), [2, 2]) == 0
    assert gangs_fit({"a": 8}, [2, 2]) == 2
