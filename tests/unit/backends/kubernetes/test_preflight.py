"""Preflight: facts about a cluster in, every reason a study cannot run there out, each
line exact and located at the study's field (stratctl.backends.kubernetes.verbs.preflight)."""

from __future__ import annotations

import pytest

from stratctl.backends.kubernetes.verbs.facts import Access, Facts
from stratctl.backends.kubernetes.verbs.preflight import PreflightError, accesses, check, exit_code, pods_of, preflight
from stratctl.backends.launch import prepare
from stratctl.errors import ExitCode, NotFound, Unavailable
from tests.unit.studies import write

STUDY = """\
name: pf
namespace: team-a
queue: research
priority_class: low
space:
  x: {type: choice, values: [1, 2]}
strategy: {kind: grid}
trial:
  image: busybox
  tasks:
    - name: worker
      replicas: 3
      resources:
        requests: {cpu: "4", memory: 16Gi, nvidia.com/gpu: 8}
    - name: ps
      replicas: 1
      resources:
        requests: {cpu: "2"}
"""


def node(
    name: str, gpus: int = 8, cpu: str = "64", memory: str = "512Gi", labels: dict | None = None, ready: bool = True
) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def queue(name: str, state: str | None = "Open", capability: dict | None = None) -> dict:
    q = {"metadata": {"name": name}, "spec": {"weight": 1}, "status": {}}
    if state:
        q["status"]["state"] = state
    if capability:
        q["spec"]["capability"] = capability
    return q


def facts(**overrides) -> Facts:
    base = dict(
        namespace="team-a",
        namespace_exists=True,
        queues={"default": queue("default"), "research": queue("research")},
        priority_classes={"low", "high"},
        nodes=[node(f"gpu-{i}") for i in range(4)],
        denied=[],
    )
    return Facts(**{**base, **overrides})


def run(tmp_path, text: str = STUDY, namespace: str | None = None, **fact_overrides):
    path = write(tmp_path, text)
    prepared = prepare(path, namespace)
    found = check(
        prepared.study, facts(**fact_overrides), prepared.manifests.values(), namespace_flag=namespace is not None
    )
    return [str(f.problem).replace(str(path), "study.yaml") for f in found], exit_code(found)


def test_a_study_that_fits_passes(tmp_path):
    assert run(tmp_path) == ([], ExitCode.INVALID_INPUT)


def test_unknown_queue_names_the_field_and_the_queues_there(tmp_path):
    assert run(tmp_path, queues={"default": queue("default")}) == (
        ["study.yaml:3:8: queue: no Volcano queue 'research' in the cluster (queues: default)"],
        ExitCode.INVALID_INPUT,
    )


@pytest.mark.parametrize("state", ["Closed", "Closing"])
def test_a_queue_that_is_not_open(tmp_path, state):
    assert run(tmp_path, queues={"research": queue("research", state)})[0] == [
        f"study.yaml:3:8: queue: Volcano queue 'research' is {state}: it admits no new gang (open it, or name an "
        "Open queue)"
    ]


def test_a_queue_without_a_state_yet_is_open(tmp_path):
    assert run(tmp_path, queues={"research": queue("research", None)})[0] == []


def test_no_volcano_is_the_cluster(tmp_path):
    assert run(tmp_path, queues=None, volcano=False) == (
        [
            "study.yaml:3:8: queue: the cluster has no Volcano queues (no API scheduling.volcano.sh/v1beta1 queues): "
            "is Volcano installed?"
        ],
        ExitCode.CLUSTER,
    )


def test_unknown_priority_class(tmp_path):
    assert run(tmp_path, priority_classes={"high", "system-node-critical"})[0] == [
        "study.yaml:4:17: priority_class: no PriorityClass 'low' in the cluster (priority classes: high, "
        "system-node-critical)"
    ]


def test_facts_the_user_may_not_read_are_not_checked(tmp_path):
    assert run(tmp_path, queues=None, priority_classes=None, nodes=None, namespace_exists=None)[0] == []


def test_a_pod_asking_more_gpus_than_any_node_has(tmp_path):
    nodes = [node("gpu-0", gpus=4), node("gpu-1", gpus=6), node("cpu-0", gpus=0)]
    assert run(tmp_path, nodes=nodes)[0] == [
        "study.yaml:14:60: trial.tasks.0.resources.requests.nvidia.com/gpu: a worker pod asks for 8 nvidia.com/gpu, "
        "and no node can hold it: the most any has is 6, on gpu-1 (3 Ready nodes)"
    ]


def test_nodes_not_ready_do_not_count(tmp_path):
    nodes = [node("gpu-0", gpus=4), node("gpu-big", gpus=16, ready=False)]
    assert run(tmp_path, nodes=nodes)[0] == [
        "study.yaml:14:60: trial.tasks.0.resources.requests.nvidia.com/gpu: a worker pod asks for 8 nvidia.com/gpu, "
        "and no node can hold it: the most any has is 4, on gpu-0 (1 Ready nodes)"
    ]


def test_a_resource_no_node_offers_at_all(tmp_path):
    nodes = [node("cpu-0", gpus=0)]
    assert run(tmp_path, nodes=nodes)[0] == [
        "study.yaml:14:60: trial.tasks.0.resources.requests.nvidia.com/gpu: a worker pod asks for 8 nvidia.com/gpu, "
        "and no node can hold it: none has any (1 Ready nodes)"
    ]


def test_a_resource_no_node_offers_spelt_near_one_they_offer_is_suggested(tmp_path):
    fpga = node("fpga-0", gpus=0)
    fpga["status"]["allocatable"]["example.com/fpga"] = "2"
    text = STUDY.replace("nvidia.com/gpu: 8", "example.com/fpgas: 1")
    assert run(tmp_path, text, nodes=[fpga])[0] == [
        "study.yaml:14:63: trial.tasks.0.resources.requests.example.com/fpgas: a worker pod asks for 1 "
        "example.com/fpgas, and no node can hold it: none has any (1 Ready nodes); did you mean example.com/fpga, "
        "which they offer?"
    ]


def test_memory_is_compared_as_a_quantity(tmp_path):
    nodes = [node(f"gpu-{i}", memory="8Gi") for i in range(4)]
    assert run(tmp_path, nodes=nodes)[0] == [
        "study.yaml:14:38: trial.tasks.0.resources.requests.memory: a worker pod asks for 16Gi memory, and no node "
        "can hold it: the most any has is 8Gi, on gpu-0 (4 Ready nodes)"
    ]


def test_a_pod_that_no_single_node_holds_although_each_resource_fits_one(tmp_path):
    nodes = [node("gpu-0", gpus=8, cpu="2"), node("cpu-0", gpus=0, cpu="64")]
    assert run(tmp_path, nodes=nodes)[0] == [
        "study.yaml:14:9: trial.tasks.0.resources: no single node can hold a worker pod asking for 4 cpu, 16Gi "
        "memory, 8 nvidia.com/gpu (2 Ready nodes)"
    ]


def test_a_gang_larger_than_the_empty_cluster(tmp_path):
    # each 8-GPU worker fits a node, but three of them do not fit two nodes
    assert run(tmp_path, nodes=[node("gpu-0"), node("gpu-1")])[0] == [
        "study.yaml:11:5: trial.tasks: a gang of 4 pods, 24 nvidia.com/gpu in all does not fit the cluster even when "
        "it is empty (2 Ready nodes, 16 nvidia.com/gpu allocatable in all)"
    ]


def test_the_gang_is_min_available_not_every_replica(tmp_path):
    text = STUDY.replace("      replicas: 3\n", "      replicas: 3\n      min_available: 2\n")
    assert run(tmp_path, text, nodes=[node("gpu-0"), node("gpu-1")])[0] == []


def test_a_node_selector_no_node_matches(tmp_path):
    text = STUDY.replace("  tasks:\n", "  node_selector: {pool: a100}\n  tasks:\n")
    assert run(tmp_path, text)[0] == [
        "study.yaml:10:18: trial.node_selector: no Ready node has the labels pool=a100 (4 Ready nodes)"
    ]


def test_a_tasks_own_node_selector_no_node_matches_is_located_at_the_task(tmp_path):
    text = STUDY.replace("      replicas: 1\n", "      replicas: 1\n      node_selector: {pool: cpu}\n")
    nodes = [node("gpu-0", labels={"pool": "gpu"}), node("gpu-1")]
    assert run(tmp_path, text, nodes=nodes)[0] == [
        "study.yaml:17:22: trial.tasks.1.node_selector: no Ready node has the labels pool=cpu (2 Ready nodes)"
    ]


def test_the_node_selector_narrows_the_nodes_a_pod_may_use(tmp_path):
    text = STUDY.replace("  tasks:\n", "  node_selector: {pool: a100}\n  tasks:\n")
    nodes = [node("small", gpus=4, labels={"pool": "a100"}), node("big", gpus=8)]
    assert run(tmp_path, text, nodes=nodes)[0] == [
        "study.yaml:15:60: trial.tasks.0.resources.requests.nvidia.com/gpu: a worker pod asks for 8 nvidia.com/gpu, "
        "and no node can hold it: the most any has is 4, on small (1 Ready nodes)"
    ]


def test_templated_resources_are_checked_per_trial(tmp_path):
    text = STUDY.replace('cpu: "4"', 'cpu: "{{ params.x * 40 }}"')
    problems, _ = run(tmp_path, text)
    assert problems == [
        "study.yaml:14:25: trial.tasks.0.resources.requests.cpu: a worker pod asks for 80 cpu, and no node can hold "
        "it: the most any has is 64, on gpu-0 (4 Ready nodes)"
    ]


def test_the_queue_capability_must_hold_one_gang(tmp_path):
    queues = {"research": queue("research", capability={"nvidia.com/gpu": "16", "cpu": "100"})}
    assert run(tmp_path, queues=queues)[0] == [
        "study.yaml:3:8: queue: Volcano queue 'research' holds at most 16 nvidia.com/gpu (spec.capability), and one "
        "gang needs 24"
    ]


def test_a_missing_namespace(tmp_path):
    assert run(tmp_path, namespace_exists=False) == (
        ["study.yaml:2:12: namespace: namespace 'team-a' does not exist in the cluster"],
        ExitCode.INVALID_INPUT,
    )


def test_a_missing_namespace_given_on_the_command_line(tmp_path):
    path = write(tmp_path, STUDY)
    prepared = prepare(path, "team-b")
    found = check(
        prepared.study,
        facts(namespace="team-b", namespace_exists=False),
        prepared.manifests.values(),
        namespace_flag=True,
    )
    problems = [str(f.problem) for f in found]
    assert problems == ["--namespace: namespace 'team-b' does not exist in the cluster"]


def test_permissions_one_line_per_resource_with_every_verb_refused_exit_3(tmp_path):
    denied = [
        Access("create", "batch.volcano.sh", "jobs", "team-a", "submit runs each trial as one"),
        Access("delete", "batch.volcano.sh", "jobs", "team-a", "submit runs each trial as one"),
        Access("watch", "", "nodes", None, "submit counts the free GPUs from them"),
    ]
    problems, code = run(tmp_path, denied=denied, queues={})
    assert problems == [
        "study.yaml:3:8: queue: no Volcano queue 'research' in the cluster (it has no queues)",
        "study.yaml:2:12: namespace: not permitted to create, delete jobs.batch.volcano.sh in namespace 'team-a': "
        "submit runs each trial as one",
    ]  # nodes across the cluster: not a refusal (the loop goes without its GPU signal, `degraded`)
    assert code is ExitCode.CLUSTER


def test_rights_in_a_namespace_that_does_not_exist_are_not_listed(tmp_path):
    denied = [Access("create", "", "configmaps", "team-a", "x"), Access("list", "", "queues", None, "y")]
    problems, _ = run(tmp_path, namespace_exists=False, denied=denied)
    assert problems == [
        "study.yaml:2:12: namespace: namespace 'team-a' does not exist in the cluster",
        "study.yaml: not permitted to list queues across the cluster: y",
    ]


def test_every_problem_at_once(tmp_path):
    problems, code = run(
        tmp_path,
        queues={"research": queue("research", "Closed")},
        priority_classes=set(),
        nodes=[node("n", gpus=1)],
        namespace_exists=False,
    )
    assert [p.split(": ")[1] for p in problems] == [
        "namespace",
        "queue",
        "priority_class",
        "trial.tasks.0.resources.requests.nvidia.com/gpu",
    ]
    assert code is ExitCode.INVALID_INPUT


def test_accesses_follow_the_workload_and_detach(tmp_path):
    study = prepare(write(tmp_path, STUDY)).study
    needed = {(a.verb, a.what, a.namespace) for a in accesses(study)}
    assert {
        ("create", "jobs.batch.volcano.sh", "team-a"),
        ("delete", "jobs.batch.volcano.sh", "team-a"),
        ("watch", "jobs.batch.volcano.sh", "team-a"),
        ("list", "podgroups.scheduling.volcano.sh", "team-a"),
        ("create", "configmaps", "team-a"),
        ("patch", "configmaps", "team-a"),
        ("list", "events", "team-a"),
        ("watch", "nodes", None),
        ("watch", "pods", None),
    } <= needed
    assert ("create", "podgroups.scheduling.volcano.sh", "team-a") not in needed
    detached = {(a.verb, a.what, a.namespace) for a in accesses(study, watch_cluster=False)}
    assert ("watch", "nodes", None) not in detached
    batch = prepare(
        write(
            tmp_path,
            STUDY.replace("tasks:\n", "tasks:\n", 1)
            .replace("trial:\n", "workload: batch\ntrial:\n")
            .replace(
                """    - name: ps
      replicas: 1
      resources:
        requests: {cpu: "2"}
""",
                "",
            ),
        )
    ).study
    needed = {(a.verb, a.what) for a in accesses(batch)}
    assert ("create", "jobs.batch") in needed and ("create", "podgroups.scheduling.volcano.sh") in needed
    # each batch attempt's headless Service (the pods' DNS names); Volcano's svc plugin makes a Volcano Job's
    assert {("create", "services"), ("get", "services")} <= needed
    assert not {a.what for a in accesses(study)} & {"services"}
    assert ("create", "services", "team-a") in {(a.verb, a.what, a.namespace) for a in accesses(study, services=True)}


def test_pods_of_a_batch_trial_take_the_gang_from_the_podgroup():
    manifests = [
        {"kind": "PodGroup", "spec": {"minMember": 2}},
        {
            "kind": "Job",
            "spec": {
                "parallelism": 3,
                "template": {
                    "spec": {
                        "containers": [
                            {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
                            {"resources": {"requests": {"cpu": "500m"}}},
                        ],
                        "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
                    }
                },
            },
        },
    ]
    (pod,) = pods_of(manifests)
    assert (pod.replicas, pod.gang, pod.requests) == (3, 2, {"nvidia.com/gpu": "2", "cpu": "2"})


class FakeCluster:
    """Answers the preflight's reads from plain data, as the API server would."""

    def __init__(self, namespaces=("team-a",), denied=()):
        self.namespaces = set(namespaces)
        self.denied = set(denied)
        self.created: list[dict] = []
        self.reached = False

    def reach(self):
        self.reached = True

    def get(self, kind, name, namespace=None):
        if kind[1] == "Namespace":
            if name in self.namespaces:
                return {"metadata": {"name": name}}
            raise NotFound(f"namespaces {name!r} not found")
        raise AssertionError(kind)

    def list(self, kind, namespace=None, all_namespaces=False, **_):
        items = {
            "Queue": [queue("research")],
            "PriorityClass": [{"metadata": {"name": "low"}}],
            "Node": [node("gpu-0"), node("gpu-1"), node("gpu-2")],
        }[kind[1]]
        return items, "1"

    def create(self, manifest, dry_run=False):
        raise AssertionError("preflight must not create anything")

    def request(self, method, path, query=None, body=None, what=""):
        assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        assert set(body) == {"apiVersion", "kind", "spec"}  # the API server refuses a review with metadata
        attrs = body["spec"]["resourceAttributes"]
        return {"status": {"allowed": (attrs["verb"], attrs["resource"]) not in self.denied}}


def test_preflight_reads_the_facts_and_raises_every_problem(tmp_path):
    path = write(tmp_path, STUDY)
    prepared = prepare(path)
    cluster = FakeCluster(namespaces=(), denied={("create", "configmaps")})
    with pytest.raises(PreflightError) as caught:
        preflight(cluster, prepared.study, prepared.manifests.values())
    assert cluster.reached
    assert [str(p).replace(str(path), "study.yaml") for p in caught.value.problems] == [
        "study.yaml:2:12: namespace: namespace 'team-a' does not exist in the cluster"
    ]
    assert caught.value.exit_code is ExitCode.INVALID_INPUT
    cluster = FakeCluster(denied={("create", "configmaps"), ("watch", "pods")})
    with pytest.raises(PreflightError) as caught:
        preflight(cluster, prepared.study, prepared.manifests.values())
    assert [str(p).replace(str(path), "study.yaml") for p in caught.value.problems] == [
        "study.yaml:2:12: namespace: not permitted to create configmaps in namespace 'team-a': submit keeps the "
        "study's record in one"
    ]
    assert caught.value.exit_code is ExitCode.CLUSTER
    assert preflight(FakeCluster(), prepared.study, prepared.manifests.values()) is None  # all well: no error
    # no reads of nodes and pods across the cluster: submitted all the same, and said in one line
    blind = preflight(
        FakeCluster(denied={("watch", "pods"), ("list", "nodes")}), prepared.study, prepared.manifests.values()
    )
    assert blind == (
        "not permitted to list, watch nodes, pods across the cluster: no GPU signal and no yielding to "
        "higher-priority gangs, the target follows pending gangs and the API's answers only (an admin "
        "grants the reads with `stratctl rbac --cluster-wide-reads`)"
    )


def test_a_server_that_does_not_answer_is_not_a_fact(tmp_path):
    prepared = prepare(write(tmp_path, STUDY))

    class Down(FakeCluster):
        def list(self, kind, **_):
            raise Unavailable("list: cannot reach the API server")

    with pytest.raises(Unavailable):
        preflight(Down(), prepared.study, prepared.manifests.values())


# -- the command, as a process ------------------------------------------------------------

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team-a}}]
current-context: x
"""


def _submit(*args: str) -> tuple[int, list[str], float]:
    import subprocess
    import sys
    import time

    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "stratctl", "submit", *args], capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stderr.splitlines(), time.monotonic() - started


@pytest.mark.parametrize("server", ["closed", "silent"])
def test_an_api_server_out_of_reach_at_the_start_exits_3_within_10_seconds(tmp_path, server):
    """A closed port refuses at once; a silent one (accepts, never answers) hangs each
    request: either way the one line comes within about 10 s of the start of the process."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if server == "closed":
        listener.close()
    else:
        listener.listen(16)  # the kernel completes the handshakes; nobody ever reads or answers
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG.replace("{port}", str(port)))
        code, lines, seconds = _submit(str(write(tmp_path, STUDY)), "--kubeconfig", str(kubeconfig))
    finally:
        listener.close()
    assert code == ExitCode.CLUSTER
    assert len(lines) == 1 and lines[0].startswith(
        "error: no answer from the API server for 8s, giving up (last error: get /version: "
    ), lines
    assert seconds <= 10.5, f"took {seconds:.1f}s"


def test_a_kubeconfig_file_that_does_not_exist(tmp_path):
    code, lines, _ = _submit(str(write(tmp_path, STUDY)), "--kubeconfig", str(tmp_path / "nope"))
    assert (code, lines) == (
        ExitCode.INVALID_INPUT,
        [f"error: the kubeconfig file {tmp_path / 'nope'} (--kubeconfig) does not exist"],
    )


def test_no_right_at_all_in_a_namespace_one_cannot_read_is_one_line(tmp_path):
    """Most users may not read namespaces: a namespace that does not exist then looks like one
    where they have no rights at all. One line says both, not one per right."""
    study = prepare(write(tmp_path, STUDY)).study
    everything = accesses(study)
    # the restricted user of the testbed may list pods in every namespace, but nothing else outside its own
    found = check(
        study,
        facts(
            namespace_exists=None,
            denied=[a for a in everything if a.namespace and a.resource != "pods"],
            allowed=[a for a in everything if not a.namespace or a.resource == "pods"],
        ),
        [],
    )
    assert [str(f.problem).replace(str(study.source), "study.yaml") for f in found] == [
        "study.yaml:2:12: namespace: namespace 'team-a' does not exist, or you have no rights in it (not permitted "
        "to create configmaps or jobs.batch.volcano.sh there)"
    ]
    assert exit_code(found) is ExitCode.CLUSTER


def test_the_preflight_reads_go_at_once_and_count_with_the_loop():
    """The study's request pace is for its loop: twenty reads at a 1/s pace would take 19 s
    before the first trial. They share the loop's connection, metrics and retry account."""
    import time

    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.backends.kubernetes.api.connect import preflight_gated
    from stratctl.run.throttle import Throttle

    throttle = Throttle(qps=1, burst=1)
    cluster = Cluster(None, "ns", gate=throttle.call)
    gated = preflight_gated(cluster, throttle)
    assert (gated.metrics, gated.grants, gated.outage, gated.api) == (
        cluster.metrics,
        cluster.grants,
        cluster.outage,
        cluster.api,
    )
    started = time.monotonic()
    for _ in range(20):
        gated.gate(lambda: None)
    assert time.monotonic() - started < 1.0
    assert gated.gate.__self__.stats is throttle.stats and cluster.gate == throttle.call


LISTED = STUDY.replace("queue: research", "queue: [research, spare]")


def test_every_listed_queue_must_exist_and_be_open(tmp_path):
    queues = {"research": queue("research", "Closed")}
    assert run(tmp_path, LISTED, queues=queues)[0] == [
        "study.yaml:3:9: queue.0: Volcano queue 'research' is Closed: it admits no new gang (open it, or name an "
        "Open queue)",
        "study.yaml:3:19: queue.1: no Volcano queue 'spare' in the cluster (queues: research)",
    ]


def test_one_listed_queue_holding_a_gang_is_enough(tmp_path):
    small = {"nvidia.com/gpu": "16"}
    assert (
        run(tmp_path, LISTED, queues={"research": queue("research", capability=small), "spare": queue("spare")})[0]
        == []
    )
    assert run(
        tmp_path,
        LISTED,
        queues={"research": queue("research", capability=small), "spare": queue("spare", capability=small)},
    )[0] == [
        "study.yaml:3:9: queue.0: Volcano queue 'research' holds at most 16 nvidia.com/gpu (spec.capability), and "
        "one gang needs 24",
        "study.yaml:3:19: queue.1: Volcano queue 'spare' holds at most 16 nvidia.com/gpu (spec.capability), and "
        "one gang needs 24",
    ]
