"""Preflight on the real testbed: a study the cluster cannot run is refused with one exact
line per reason and the right exit code, and nothing of it is created; a gang that can
never start once submitted is explained by `status` and by the submit loop."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import CONFIGMAP, NODE, PODGROUP, PRIORITY_CLASS, QUEUE, VOLCANO_JOB
from stratctl.backends.kubernetes.objects.gpus import schedulable
from stratctl.backends.kubernetes.objects.state import TrialState, classify
from tests.e2e.support import wait_until

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def study_yaml(
    name: str,
    namespace: str,
    queue: str = "default",
    priority_class: str = "stratctl-low",
    gpus: int = 1,
    duration: str = "2s",
    trials: int = 1,
) -> str:
    return textwrap.dedent(f"""\
        name: {name}
        namespace: {namespace}
        queue: {queue}
        priority_class: {priority_class}
        space:
          seed: {{type: int, low: 0, high: {trials - 1}, grid: true}}
        strategy: {{kind: grid}}
        trial:
          image: busybox
          annotations:
            testbed.stratctl.io/run-duration: "{duration}"
          resources: {{requests: {{nvidia.com/gpu: {gpus}, cpu: 100m}}}}
          tasks: [{{name: worker, replicas: 1}}]
        throttle: {{qps: 20, burst: 20, parallelism: {{min: 1, initial: {trials}, max: {trials}}}}}
        """)


def cli(*args: str, timeout: float = 120) -> tuple[int, list[str], list[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "stratctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "400"},
    )
    return proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(), time.monotonic() - started


@pytest.fixture
def unique():
    return f"{int(time.time() * 1000) % 100000:05d}"


@pytest.fixture
def study(testbed, api, tmp_path, unique):
    """Write a study file (returns its path); afterwards delete whatever of it exists."""
    names: list[str] = []

    def write(prefix: str, **kw) -> Path:
        name = f"{prefix}-{unique}"
        names.append(name)
        path = tmp_path / f"{name}.yaml"
        path.write_text(study_yaml(name, testbed.namespace, **kw))
        return path

    yield write
    for name in names:
        for kind in (VOLCANO_JOB, PODGROUP, CONFIGMAP):
            for item in api.list(kind, label_selector=f"{labels.STUDY}={name}")[0]:
                api.delete(kind, item["metadata"]["name"])


@pytest.fixture
def queues(api):
    """Create Volcano queues for a test (`make(name, state, capability)`); deleted afterwards."""
    made: list[str] = []

    def make(name: str, capability: dict | None = None) -> str:
        spec = {"weight": 1, "reclaimable": True, **({"capability": capability} if capability else {})}
        api.create(
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
        )
        made.append(name)
        wait_until(
            lambda: (api.get(QUEUE, name).get("status") or {}).get("state") == "Open", 30, message=f"queue {name} Open"
        )
        return name

    yield make
    for name in made:
        api.delete(QUEUE, name)


def close(api, name: str) -> None:
    """Close a queue the way Volcano's queue controller records it (status.state)."""
    api.request(
        "PATCH",
        f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}/status",
        body={"status": {"state": "Closed"}},
        what=f"close Queue {name}",
        content_type="application/merge-patch+json",
    )
    wait_until(lambda: api.get(QUEUE, name)["status"].get("state") == "Closed", 30, message=f"queue {name} Closed")


def nothing_of(api, path: Path) -> None:
    name = yaml.safe_load(path.read_text())["name"]
    for kind in (VOLCANO_JOB, PODGROUP, CONFIGMAP):
        assert api.list(kind, label_selector=f"{labels.STUDY}={name}")[0] == [], f"{kind[1]} of {name} created"


def submit(testbed, path: Path, *extra: str, context: str | None = None, kubeconfig: str | None = None):
    return cli(
        "submit",
        str(path),
        "--kubeconfig",
        kubeconfig or testbed.kubeconfig,
        "--context",
        context or testbed.restricted_context,
        "--poll-interval",
        "1",
        *extra,
    )


def names(api, kind) -> str:
    return ", ".join(sorted(item["metadata"]["name"] for item in api.list(kind, all_namespaces=True)[0]))


@pytest.mark.parametrize("dry_run", [[], ["--dry-run=server"]], ids=["submit", "dry-run"])
def test_a_queue_that_does_not_exist(testbed, api, study, unique, dry_run):
    path = study("pf-noq", queue=f"nosuch-{unique}")
    code, out, err, _ = submit(testbed, path, *dry_run)
    assert (code, err) == (
        2,
        [f"{path}:3:8: queue: no Volcano queue 'nosuch-{unique}' in the cluster (queues: {names(api, QUEUE)})"],
    )
    nothing_of(api, path)


def test_a_closed_queue(testbed, api, study, queues, unique):
    queue = queues(f"pf-closed-{unique}")
    close(api, queue)
    path = study("pf-closed", queue=queue)
    code, out, err, _ = submit(testbed, path)
    assert (code, err) == (
        2,
        [
            f"{path}:3:8: queue: Volcano queue '{queue}' is Closed: it admits no new gang (open "
            "it, or name an Open queue)"
        ],
    )
    nothing_of(api, path)


def test_a_priority_class_that_does_not_exist(testbed, api, study, unique):
    path = study("pf-nopc", priority_class=f"nosuch-{unique}")
    code, out, err, _ = submit(testbed, path)
    assert (code, err) == (
        2,
        [
            f"{path}:4:17: priority_class: no PriorityClass 'nosuch-{unique}' in the cluster "
            f"(priority classes: {names(api, PRIORITY_CLASS)})"
        ],
    )
    nothing_of(api, path)


def test_a_pod_asking_for_more_gpus_than_any_node_has(testbed, api, study):
    nodes = [n for n in api.list(NODE, all_namespaces=True)[0] if schedulable(n)]
    most = max(int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) for n in nodes)
    first = min(
        n["metadata"]["name"] for n in nodes if int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) == most
    )
    path = study("pf-big", gpus=most + 1)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "nvidia.com/gpu" in text)
    column = path.read_text().splitlines()[line - 1].index(f"nvidia.com/gpu: {most + 1}") + len("nvidia.com/gpu: ") + 1
    code, out, err, _ = submit(testbed, path)
    assert (code, err) == (
        2,
        [
            f"{path}:{line}:{column}: trial.resources.requests.nvidia.com/gpu: a worker pod asks "
            f"for {most + 1} nvidia.com/gpu, and no node can hold it: the most any has is {most}, "
            f"on {first} ({len(nodes)} Ready nodes)"
        ],
    )
    nothing_of(api, path)


def test_every_problem_at_once(testbed, api, study, unique):
    path = study("pf-all", queue=f"nosuch-{unique}", priority_class=f"nosuch-{unique}", gpus=100)
    code, out, err, _ = submit(testbed, path)
    assert code == 2
    assert [line.split(": ")[1] for line in err[:-1]] == [
        "queue",
        "priority_class",
        "trial.resources.requests.nvidia.com/gpu",
    ]
    assert err[-1] == "3 problems"
    nothing_of(api, path)


@pytest.fixture
def jobless_user(testbed, api, unique, tmp_path):
    """A kubeconfig for a ServiceAccount that may do everything the testbed's restricted user
    may (the RBAC of `stratctl rbac --cluster-wide-reads`), except create, patch and delete
    Volcano jobs."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(testbed.admin()), client.RbacAuthorizationV1Api(testbed.admin())
    ns, name = testbed.namespace, f"pf-jobless-{unique}"
    role = rbac.read_namespaced_role("stratctl", ns)
    rules = []
    for rule in role.rules:
        if "batch.volcano.sh" in (rule.api_groups or []):
            rule.verbs = ["get", "list", "watch"]
        rules.append(rule)
    core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
    rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": rules})
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": name},
            "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        },
    )
    cluster_roles = {f"{name}-{i}": role for i, role in enumerate((f"stratctl:{ns}", "stratctl:cluster-reads"))}
    for binding, cluster_role in cluster_roles.items():
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": binding},
                "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            }
        )
    try:
        token = core.create_namespaced_service_account_token(
            name, ns, {"spec": {"expirationSeconds": 600}}
        ).status.token
        config = yaml.safe_load(Path(testbed.kubeconfig).read_text())
        cluster = next(c for c in config["contexts"] if c["name"] == testbed.admin_context)["context"]["cluster"]
        config["users"] = [{"name": name, "user": {"token": token}}]
        config["contexts"] = [{"name": name, "context": {"cluster": cluster, "user": name, "namespace": ns}}]
        config["current-context"] = name
        path = tmp_path / "jobless.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        yield str(path), name
    finally:
        for binding in cluster_roles:
            rbac.delete_cluster_role_binding(binding)
        rbac.delete_namespaced_role_binding(name, ns)
        rbac.delete_namespaced_role(name, ns)
        core.delete_namespaced_service_account(name, ns)


def test_a_user_who_may_not_create_jobs_is_refused_before_anything_is_written(testbed, api, study, jobless_user):
    kubeconfig, context = jobless_user
    path = study("pf-rbac")
    code, out, err, _ = submit(testbed, path, kubeconfig=kubeconfig, context=context)
    assert (code, err) == (
        3,
        [
            f"{path}:2:12: namespace: not permitted to create, patch, delete jobs.batch.volcano.sh "
            f"in namespace '{testbed.namespace}': submit runs each trial as one"
        ],
    )
    nothing_of(api, path)  # the study's record ConfigMap included


def test_a_namespace_that_does_not_exist_is_one_line(testbed, api, study, unique):
    path = study("pf-nons")
    code, out, err, _ = submit(testbed, path, "-n", f"nosuch-{unique}", context=testbed.admin_context)
    assert (code, err) == (2, [f"--namespace: namespace 'nosuch-{unique}' does not exist in the cluster"])
    # the restricted user may not read namespaces: one line says what it cannot tell apart
    code, out, err, _ = submit(testbed, path, "-n", f"nosuch-{unique}")
    assert (code, err) == (
        3,
        [
            f"--namespace: namespace 'nosuch-{unique}' does not exist, or you have no rights in it "
            "(not permitted to create configmaps or jobs.batch.volcano.sh there)"
        ],
    )


def test_the_restricted_user_passes_preflight_with_the_demo_study(testbed, api):
    code, out, err, seconds = cli(
        "submit",
        str(REPO / "examples" / "demo.yaml"),
        "--kubeconfig",
        testbed.kubeconfig,
        "--context",
        testbed.restricted_context,
        "--dry-run=server",
    )
    assert code == 0, err
    assert out[0].startswith("dry run (server): 12 of 12 trials accepted by the API server")


def test_a_gang_whose_queue_closes_or_goes_after_submit_says_so(testbed, api, study, queues, unique):
    """A queue capped at 2 GPUs holds a running 2-GPU trial; the next trial's gang waits in it
    (the scheduler's events say why). Closing the queue, then deleting it, is what `status` and
    the submit loop then report."""
    queue = queues(f"pf-cap-{unique}", capability={"nvidia.com/gpu": "2"})
    blocker = study("pf-blk", queue=queue, gpus=2, duration="300s")
    code, out, err, _ = submit(testbed, blocker, "--detach")
    assert code == 0, err
    blocker_name = yaml.safe_load(blocker.read_text())["name"]
    wait_until(
        lambda: [
            j
            for j in api.list(VOLCANO_JOB, label_selector=f"{labels.STUDY}={blocker_name}")[0]
            if classify(j) is TrialState.RUNNING
        ],
        60,
        message="the blocker running",
    )
    waiting = study("pf-wait", queue=queue, gpus=2, duration="5s")
    name = yaml.safe_load(waiting.read_text())["name"]
    # the submit loop follows the study (a rerun would be refused by preflight once the queue is closed)
    loop = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stratctl",
            "submit",
            str(waiting),
            "--kubeconfig",
            testbed.kubeconfig,
            "--context",
            testbed.restricted_context,
            "--poll-interval",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(loop.stderr.readline, "")), daemon=True)
    reader.start()

    def status_says(wanted: str) -> str | None:
        code, out, err, _ = cli(
            "status", name, "--kubeconfig", testbed.kubeconfig, "--context", testbed.restricted_context
        )
        assert code == 0, err
        return next((line for line in out if wanted in line), None)

    closed = f"queue '{queue}' is Closed: Volcano admits no new gang from it"
    try:
        wait_until(
            lambda: api.list(PODGROUP, label_selector=f"{labels.STUDY}={name}")[0],
            60,
            message="the waiting trial's PodGroup",
        )
        # held back by the queue's capability before its pods exist: only the scheduler's events say so
        quota = "queue resource quota insufficient: insufficient nvidia.com/gpu"
        wait_until(lambda: status_says(quota), 30, message="status says the quota holds the gang")
        close(api, queue)
        row = wait_until(lambda: status_says(closed), 30, message="status says Closed")
        assert f"{name}-" in row and "pending" in row, row  # the trial's own row
        wait_until(lambda: any(closed in line for line in lines), 60, message=f"the loop saying why: {lines}")
    finally:
        loop.terminate()
        loop.wait(30)
    said = [line for line in lines if closed in line and "waiting to start" in line]
    assert f"1 gang(s) waiting to start; {name}-" in said[0], lines

    api.delete(QUEUE, queue)
    gone = f"queue '{queue}' does not exist: Volcano will not schedule the gang (create the queue, or drain the study)"
    wait_until(lambda: status_says(gone), 30, message="status says gone")
