"""Trials whose processes really run: on a node whose kubelet starts containers (the local
testbed's real node, `stratctl-real-0`, or any such node of another cluster), never on
KWOK's. A trial prints a line and calls `stratctl.trial.result(...)` in the image that has
stratctl (testbed: `stratctl.local/python:3.11`, STRATCTL_TEST_PYTHON_IMAGE elsewhere);
its result comes back through the container's termination message and its line through
`stratctl logs`. Skipped, saying why, only when no node of the cluster runs processes.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from tests.e2e.support import GPU, Cli, finish, unique

pytestmark = pytest.mark.e2e

REAL_KEY = "testbed.stratctl.io/real"  # the testbed's label and NoSchedule taint on its real node
IMAGE = os.environ.get("STRATCTL_TEST_PYTHON_IMAGE", "stratctl.local/python:3.11")


def runs_processes(node: dict) -> bool:
    """A Ready node whose kubelet is a kubelet: not one KWOK plays (its annotation, its
    "fake" kubelet version, its kwok runtime)."""
    meta, status = node["metadata"], node.get("status") or {}
    if "kwok.x-k8s.io/node" in (meta.get("annotations") or {}):
        return False
    info = status.get("nodeInfo") or {}
    runtime = info.get("containerRuntimeVersion") or ""
    if info.get("kubeletVersion") in ("", "fake", None) or not runtime or runtime.startswith("kwok"):
        return False
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return bool(ready) and ready[0].get("status") == "True"


@pytest.fixture(scope="module")
def real_node(testbed):
    """The name and GPUs of a node that runs real processes (the testbed's real one first)."""
    from stratctl.backends.kubernetes.api.cluster import Cluster

    cluster = Cluster.connect(testbed.kubeconfig, testbed.admin_context, testbed.namespace)
    try:
        nodes, _ = cluster.list(("v1", "Node"))
    finally:
        cluster.close()
    real = sorted(
        (n for n in nodes if runs_processes(n)),
        key=lambda n: ((n["metadata"].get("labels") or {}).get(REAL_KEY) != "true", n["metadata"]["name"]),
    )
    if not real:
        pytest.skip(
            f"no node of the cluster runs real processes (all {len(nodes)} are KWOK's or not Ready); "
            "the local testbed starts one unless STRATCTL_TESTBED_REAL_NODE=0"
        )
    node = real[0]
    gpus = int((node["status"].get("allocatable") or {}).get(GPU, "0") or 0)
    return node["metadata"]["name"], gpus


def real_study(name: str, namespace: str, node: str, gpus: int) -> str:
    """Two one-pod trials on `node` (its taint tolerated), one GPU each when it has them:
    each prints a line with its seed and the host it ran on, then its result."""
    program = textwrap.dedent("""\
        import socket
        from stratctl import trial
        seed = {{ params.seed }}
        print(f"real trial seed={seed} ran on {socket.gethostname()}", flush=True)
        trial.result(loss=seed / 10, seed=seed, host=socket.gethostname())
        """)
    gpu = f", {GPU}: 1" if gpus else ""
    limits = f", limits: {{{GPU}: 1}}" if gpus else ""
    return textwrap.dedent(f"""\
        name: {name}
        namespace: {namespace}
        queue: default
        priority_class: stratctl-low
        space:
          seed: {{type: int, low: 1, high: 2}}
        strategy: {{kind: grid}}
        trial:
          image: {IMAGE}
          command: ["python3", "-c"]
          args: [{json.dumps(program)}]
          node_selector: {{kubernetes.io/hostname: {node}}}
          tolerations: [{{key: {REAL_KEY}, operator: Exists, effect: NoSchedule}}]
          resources: {{requests: {{cpu: 100m, memory: 64Mi{gpu}}}{limits}}}
          tasks: [{{name: worker, replicas: 1}}]
        throttle: {{qps: 20, burst: 10, parallelism: {{min: 1, initial: 2, max: 2}}}}
        """)


def test_a_trial_runs_on_the_real_node_and_its_result_and_line_come_back(testbed, real_node, studies):
    node, gpus = real_node
    name = unique("real")
    path = studies(name, real_study(name, testbed.namespace, node, gpus))
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)

    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=240)
    assert (progress["succeeded"], progress["failed"]) == (2, 0), progress

    snapshot = cli.status(name)
    results = {t["params"]["seed"]: t["result"] for t in snapshot["trials"]}
    # the hostname a pod sees is its own name; what matters: the process ran and wrote it
    assert {seed: {k: v for k, v in r.items() if k != "host"} for seed, r in results.items()} == {
        1: {"loss": 0.1, "seed": 1},
        2: {"loss": 0.2, "seed": 2},
    }, snapshot["trials"]
    for trial in snapshot["trials"]:
        seed, host = trial["params"]["seed"], trial["result"]["host"]
        out = cli.run("logs", name, trial["trial"])
        assert f"real trial seed={seed} ran on {host}" in out, out


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


@pytest.fixture
def scripts(api, testbed):
    """`scripts(name, *files)`: a ConfigMap `name` in the test namespace holding the given
    examples files (path relative to examples/), for a trial to mount at /scripts; deleted
    afterwards. How a user ships a small script without building an image."""
    from stratctl.backends.kubernetes.api.resources import CONFIGMAP

    made: list[str] = []

    def make(name: str, *files: str) -> str:
        data = {}
        for rel in files:
            with open(os.path.join(EXAMPLES, rel)) as f:
                data[os.path.basename(rel)] = f.read()
        api.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": testbed.namespace},
                "data": data,
            }
        )
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            api.delete(CONFIGMAP, name)
        except Exception:
            pass


def on_real_node(node: str) -> str:
    """The trial fields that put its pods on `node` (its taint tolerated)."""
    return (
        f"  node_selector: {{kubernetes.io/hostname: {node}}}\n"
        f"  tolerations: [{{key: {REAL_KEY}, operator: Exists, effect: NoSchedule}}]\n"
    )


@pytest.mark.parametrize(
    ("workload", "tasks", "ranks"),
    [
        ("volcano", "[{name: ps, replicas: 1}, {name: worker, replicas: 2}]", {"ps": 1, "worker": 2}),
        ("batch", "[{name: worker, replicas: 2}]", {"worker": 2}),
    ],
)
def test_the_ranks_of_a_real_trial_meet_rank_0_by_its_dns_name(
    testbed, real_node, studies, scripts, workload, tasks, ranks
):
    """examples/rendezvous/rendezvous_check.py in every pod: rank 0 listens on
    MASTER_ADDR:MASTER_PORT (its DNS name under the trial's headless Service), every other
    rank connects by that name and is heard once; rank 0's record is the trial's result."""
    node, _ = real_node
    name = unique(f"rrdv-{workload[:3]}")
    config = scripts(name, "rendezvous/rendezvous_check.py")
    study = (
        f"name: {name}\n"
        f"namespace: {testbed.namespace}\n"
        "queue: default\n"
        "priority_class: stratctl-low\n"
        f"workload: {workload}\n"
        "space:\n"
        "  seed: {type: int, low: 1, high: 1}\n"
        "strategy: {kind: grid}\n"
        "trial:\n"
        f"  image: {IMAGE}\n"
        '  command: ["python3", "/scripts/rendezvous_check.py", "--timeout", "90"]\n'
        f"{on_real_node(node)}"
        "  resources: {requests: {cpu: 50m, memory: 32Mi}}\n"
        f"  volumes: [{{name: scripts, config_map: {{name: {config}}}}}]\n"
        "  volume_mounts: [{name: scripts, mount_path: /scripts}]\n"
        f"  tasks: {tasks}\n"
        "throttle: {qps: 20, burst: 10, parallelism: {min: 1, initial: 1, max: 1}}\n"
    )
    path = studies(name, study)
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=240)
    assert (progress["succeeded"], progress["failed"]) == (1, 0), progress

    (trial,) = cli.status(name)["trials"]
    result = trial["result"]
    size = sum(ranks.values())
    assert (result["rendezvous"], result["world_size"], result["peers_heard"]) == ("ok", size, size - 1), result
    host, port = result["master"].rsplit(":", 1)
    # rank 0's name under the trial's headless Service (<pod hostname>.<job>), resolved by
    # the cluster's DNS in the other pods; the port is stratctl's fixed one
    assert host.count(".") == 1 and host.split(".")[1].startswith(trial["trial"]), result
    assert int(port) == 29500, result


CURVE = textwrap.dedent("""\
    import importlib.util, os, time
    from stratctl import trial
    client = importlib.util.find_spec("kubernetes") is not None
    token = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
    x, y = {{ params.x }}, {{ params.y }}
    final = (x - 2) ** 2 + (y - 3) ** 2 / 10
    for step in range(STEPS):
        trial.report(step, loss=final + 1 / (step + 1))
        time.sleep(0.75)
    trial.result(loss=final, client=client, token=token)
    """)


def test_reports_printed_by_real_trials_reach_the_median_pruner(testbed, real_node, studies, api):
    """A TPE study with the median pruner whose trials call `stratctl.trial.report()` in the
    image, which has no Kubernetes client and no service account token: their report lines
    reach the loop through pods/log, at least one trial is pruned, and its pod goes."""
    from tests.e2e.test_search import jobs_of, told_of

    node, _ = real_node
    name = unique("rprune")
    steps, budget = 20, 9
    study = (
        textwrap.dedent(f"""\
        name: {name}
        namespace: {testbed.namespace}
        queue: default
        priority_class: stratctl-low
        space:
          x: {{type: uniform, low: -5, high: 10}}
          y: {{type: uniform, low: 0, high: 15}}
        strategy: {{kind: tpe, trials: {budget}, seed: 7}}
        objective: {{metric: loss, direction: minimize}}
        pruner: {{kind: median, startup_trials: 3, warmup_steps: 1}}
        trial:
          image: {IMAGE}
          command: ["python3", "-c"]
          args: [{json.dumps(CURVE.replace("STEPS", str(steps)))}]
        """)
        + on_real_node(node)
        + textwrap.dedent("""\
          resources: {requests: {cpu: 50m, memory: 32Mi}}
          tasks: [{name: worker, replicas: 1}]
        throttle: {qps: 20, burst: 10, parallelism: {min: 1, initial: 3, max: 3}}
        """)
    )
    path = studies(name, study)
    cli = Cli(testbed, context=testbed.restricted_context, timeout=120)
    progress = finish(cli.start("submit", path, "-o", "json", "--poll-interval", "1"), timeout=400)

    told = told_of(api, name)
    pruned = {t for t, e in told.items() if e["state"] == "pruned"}
    assert pruned, f"no trial was pruned: {told}"
    assert progress["pruned"] == len(pruned) and progress["succeeded"] == budget - len(pruned), progress
    jobs = {j["metadata"]["labels"]["stratctl.io/trial"] for j in jobs_of(api, name)}
    assert not pruned & jobs  # their jobs deleted: their pods and processes went with them
    for trial in pruned:
        entry = told[trial]
        x, y = entry["params"]["x"], entry["params"]["y"]
        # a value the process printed, at a step before its last
        assert entry["value"] == pytest.approx((x - 2) ** 2 + (y - 3) ** 2 / 10 + 1 / (entry["step"] + 1), abs=1e-5)
        assert 1 <= entry["step"] < steps - 1
    if IMAGE == "stratctl.local/python:3.11":  # the testbed's image: stratctl alone, no client, no token
        results = [t["result"] for t in cli.status(name)["trials"] if t["state"] == "succeeded"]
        assert results and all(r["client"] is False and r["token"] is False for r in results), results
