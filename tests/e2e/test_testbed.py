"""The testbed is real: Volcano gang scheduling, KWOK pod lifecycles, priority preemption
and API Priority and Fairness 429s, observed through the Kubernetes API."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.e2e.support import wait_until

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"
RUN_DURATION = "testbed.stratctl.io/run-duration"


# ----------------------------------------------------------------------------- helpers
def vcjob(name, *, replicas, min_available, gpus=1, duration=None, priority_class=None, queue="default"):
    """A batch.volcano.sh Job with everything explicit (the testbed has no admission webhook)."""
    annotations = {RUN_DURATION: duration} if duration else {}
    pod_spec = {
        "schedulerName": "volcano",
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trial",
                "image": "stratctl.invalid/fake-trial:0",
                "resources": {
                    "requests": {GPU: str(gpus), "cpu": "100m", "memory": "128Mi"},
                    "limits": {GPU: str(gpus)},
                },
            }
        ],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    spec = {
        "schedulerName": "volcano",
        "queue": queue,
        "minAvailable": min_available,
        "maxRetry": 3,
        "tasks": [
            {
                "name": "worker",
                "replicas": replicas,
                "minAvailable": min_available,
                "template": {"metadata": {"annotations": annotations}, "spec": pod_spec},
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": spec,
    }


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


class Cluster:
    def __init__(self, tb, api_client):
        self.ns = tb.namespace
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def create_job(self, body):
        return self.custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.ns, "jobs", body)

    def get_job(self, name):
        return self.custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.ns, "jobs", name)

    def delete_job(self, name):
        try:
            self.custom.delete_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", self.ns, "jobs", name, propagation_policy="Background"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def job_phase(self, name):
        return (self.get_job(name).get("status") or {}).get("state", {}).get("phase")

    def podgroup(self, job_name):
        pgs = self.custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.ns, "podgroups")
        for pg in pgs["items"]:
            owners = pg["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == "Job" and o.get("name") == job_name for o in owners):
                return pg
        return None

    def pods(self, job_name):
        return self.core.list_namespaced_pod(self.ns, label_selector=f"volcano.sh/job-name={job_name}").items

    def running_pods(self, job_name):
        return [p for p in self.pods(job_name) if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]

    def wait_gone(self, job_name, timeout=60):
        wait_until(
            lambda: not self.pods(job_name) and self.podgroup(job_name) is None,
            timeout,
            message=f"pods and podgroup of {job_name} to be garbage-collected",
        )


def open_nodes(core):
    """The nodes any pod may go to: no NoSchedule or NoExecute taint (the testbed's real node
    has one: only pods that tolerate it run there)."""
    return [
        n
        for n in core.list_node().items
        if not any(t.effect in ("NoSchedule", "NoExecute") for t in n.spec.taints or [])
    ]


def total_gpus(core):
    return sum(int(n.status.allocatable.get(GPU, "0")) for n in open_nodes(core))


def used_gpus(core):
    """GPUs requested by pods bound to an open node and not finished (other tests may share the cluster)."""
    used = 0
    names = {n.metadata.name for n in open_nodes(core)}
    for p in core.list_pod_for_all_namespaces().items:
        if p.spec.node_name not in names or p.status.phase in ("Succeeded", "Failed"):
            continue
        for c in p.spec.containers:
            used += int(((c.resources and c.resources.requests) or {}).get(GPU, "0"))
    return used


class PodGroupPhases:
    """Records every phase a job's PodGroup goes through (watch, so short phases are seen)."""

    def __init__(self, tb, api_client, job_name):
        self.phases: list[str] = []
        self._job = job_name
        self._ns = tb.namespace
        self._custom = client.CustomObjectsApi(api_client)
        self._watch = watch.Watch()
        # List first (synchronously), then watch from that resourceVersion: no update is missed.
        listed = self._custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self._ns, "podgroups")
        self._rv = listed["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            for ev in self._watch.stream(
                self._custom.list_namespaced_custom_object,
                "scheduling.volcano.sh",
                "v1beta1",
                self._ns,
                "podgroups",
                resource_version=self._rv,
                timeout_seconds=120,
            ):
                pg = ev["object"]
                owners = pg.get("metadata", {}).get("ownerReferences") or []
                if not any(o.get("name") == self._job for o in owners):
                    continue
                phase = (pg.get("status") or {}).get("phase")
                if phase and (not self.phases or self.phases[-1] != phase):
                    self.phases.append(phase)
        except Exception:  # watch ends when the test stops it
            pass

    def stop(self):
        self._watch.stop()


@pytest.fixture
def admin(testbed):
    return Cluster(testbed, testbed.admin())


@pytest.fixture
def restricted(testbed):
    return Cluster(testbed, testbed.restricted())


@pytest.fixture
def jobs(admin):
    """Names of Volcano Jobs to delete (and wait for) after the test."""
    names: list[str] = []
    yield names
    for name in names:
        admin.delete_job(name)
    for name in names:
        admin.wait_gone(name)


# ----------------------------------------------------------------------------- tests
def test_fake_gpu_nodes(testbed, admin):
    nodes = admin.core.list_node(label_selector="type=kwok").items
    assert nodes, "no KWOK nodes"
    for n in nodes:
        assert int(n.status.allocatable[GPU]) > 0
        ready = [c.status for c in n.status.conditions if c.type == "Ready"]
        assert ready == ["True"], n.metadata.name
    zones = {n.metadata.labels.get("topology.kubernetes.io/zone") for n in nodes}
    assert len(zones) >= 2


def test_gang_runs_and_completes(testbed, admin, restricted, jobs):
    """(a) 4 one-GPU pods: PodGroup Inqueue -> Running, pods Running on KWOK nodes,
    Job Completed after the annotated run duration."""
    name = unique("gang4")
    phases = PodGroupPhases(testbed, testbed.admin(), name)
    jobs.append(name)
    restricted.create_job(vcjob(name, replicas=4, min_available=4, duration="5s"))
    try:
        running = wait_until(
            lambda: len(restricted.running_pods(name)) == 4 and restricted.running_pods(name),
            60,
            message="4 running pods",
        )
        node_names = {p.spec.node_name for p in running}
        kwok_nodes = {n.metadata.name for n in admin.core.list_node(label_selector="type=kwok").items}
        assert node_names <= kwok_nodes
        for p in running:
            assert p.spec.scheduler_name == "volcano"
        wait_until(lambda: restricted.job_phase(name) == "Completed", 60, message="job Completed")
        wait_until(lambda: "Running" in phases.phases, 10, message="PodGroup phase Running")
    finally:
        phases.stop()
    assert "Inqueue" in phases.phases, phases.phases
    assert phases.phases.index("Inqueue") < phases.phases.index("Running"), phases.phases
    pods = restricted.pods(name)
    assert pods and all(p.status.phase == "Succeeded" for p in pods)
    for p in pods:
        term = p.status.container_statuses[0].state.terminated
        assert term is not None and term.exit_code == 0 and term.reason == "Completed"
        # Succeeded only after the annotated 5s of Running (timestamps have 1s resolution).
        ran = (term.finished_at - p.status.start_time).total_seconds()
        assert ran >= 4, f"{p.metadata.name} ran {ran}s, less than its 5s run duration"
        assert term.started_at == p.status.start_time


def test_failed_exit_code(testbed, admin, jobs):
    """KWOK stage: a pod with exit-code annotation fails with that exit code, and its
    termination-message annotation becomes the terminated container's message."""
    name = unique("fail")
    body = vcjob(name, replicas=1, min_available=1, duration="1s")
    body["spec"]["maxRetry"] = 1
    notes = body["spec"]["tasks"][0]["template"]["metadata"]["annotations"]
    notes["testbed.stratctl.io/exit-code"] = "3"
    notes["testbed.stratctl.io/termination-message"] = '{"error": "diverged", "step": 70}'
    jobs.append(name)
    admin.create_job(body)

    def failed_pod():
        for p in admin.pods(name):
            if p.status.phase == "Failed":
                return p
        return None

    pod = wait_until(failed_pod, 60, message="a Failed pod")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (3, '{"error": "diverged", "step": 70}')


def test_gang_larger_than_cluster_stays_pending(testbed, admin, restricted, jobs):
    """(b) a gang needing more GPUs than the cluster has: no pod runs, PodGroup Pending."""
    size = total_gpus(admin.core) + 16
    name = unique("huge")
    jobs.append(name)
    restricted.create_job(vcjob(name, replicas=size, min_available=size))
    pg = wait_until(lambda: admin.podgroup(name), 30, message="podgroup")
    # Several scheduling cycles (period 0.5s).
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert not admin.running_pods(name)
        time.sleep(0.5)
    pg = admin.podgroup(name)
    status = pg.get("status") or {}
    assert status.get("phase") == "Pending", status
    assert not status.get("running"), status
    assert not admin.running_pods(name)
    assert admin.job_phase(name) in ("Pending", None), admin.job_phase(name)
    # The scheduler says why: an Unschedulable event on the PodGroup (e.g. "queue resource
    # quota insufficient: insufficient nvidia.com/gpu").
    events = admin.core.list_namespaced_event(admin.ns).items
    reasons = [
        e.message for e in events if e.involved_object.name == pg["metadata"]["name"] and e.reason == "Unschedulable"
    ]
    assert reasons, "no Unschedulable event on the PodGroup"


def test_high_priority_preempts_low(testbed, admin, jobs):
    """(c) a low-priority job fills every GPU; a high-priority gang takes GPUs from it."""
    gpus = total_gpus(admin.core) - used_gpus(admin.core)
    assert gpus >= 16, f"only {gpus} free GPUs"
    low = unique("low")
    high = unique("high")
    jobs.extend([high, low])
    # minAvailable < replicas: the low job's extra pods are elastic, so the proportion plugin
    # lets the high job be enqueued and the preempt action evicts low pods for it.
    admin.create_job(vcjob(low, replicas=gpus, min_available=8, priority_class="stratctl-low"))
    wait_until(lambda: len(admin.running_pods(low)) == gpus, 90, message=f"{gpus} low-priority pods running")
    low_pods = {p.metadata.name for p in admin.running_pods(low)}

    admin.create_job(vcjob(high, replicas=8, min_available=8, priority_class="stratctl-high"))
    wait_until(lambda: len(admin.running_pods(high)) == 8, 90, message="8 high-priority pods running")

    def evicted():
        events = admin.core.list_namespaced_event(admin.ns).items
        names = {e.involved_object.name for e in events if e.reason == "Evict" and e.involved_object.kind == "Pod"}
        disrupted = {
            p.metadata.name
            for p in admin.pods(low)
            for c in (p.status.conditions or [])
            if c.type == "DisruptionTarget" and c.status == "True"
        }
        return (names | disrupted) & low_pods

    victims = wait_until(evicted, 30, message="Evict events / DisruptionTarget on low-priority pods")
    assert len(victims) >= 1
    assert len(admin.running_pods(low)) <= gpus - 8


def _burst(api_client, namespace, prefix, n=60, threads=30):
    core = client.CoreV1Api(api_client)
    results = []

    def create(i):
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"{prefix}-{i}"), data={"i": str(i)})
        try:
            core.create_namespaced_config_map(namespace, body)
            return (201, None)
        except ApiException as exc:
            return (exc.status, (exc.headers or {}).get("Retry-After"))

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(create, range(n)))
    return results


def _cleanup_configmaps(testbed, prefix):
    core = client.CoreV1Api(testbed.admin())
    for cm in core.list_namespaced_config_map(testbed.namespace).items:
        if cm.metadata.name.startswith(prefix):
            core.delete_namespaced_config_map(cm.metadata.name, testbed.namespace)


def test_apf_rejects_restricted_burst(testbed):
    """(d) with the APF limit on, a burst by trial-runner gets 429 + Retry-After; admin none."""
    prefix = unique("apf")
    testbed.apf(True)
    try:
        restricted = _burst(testbed.restricted(), testbed.namespace, f"{prefix}-r")
        admin = _burst(testbed.admin(), testbed.namespace, f"{prefix}-a")
    finally:
        testbed.apf(False)
        _cleanup_configmaps(testbed, prefix)
    throttled = [r for r in restricted if r[0] == 429]
    assert throttled, f"no 429 for the restricted user: {restricted}"
    assert all(r[1] for r in throttled), f"429 without Retry-After: {throttled}"
    assert {s for s, _ in restricted} <= {201, 429}, restricted
    assert all(s == 201 for s, _ in admin), admin


def test_restricted_user_rbac(testbed):
    """The restricted context (bound to `stratctl rbac --cluster-wide-reads`) can do a
    trial's work in its namespace, and little else."""
    api = client.AuthorizationV1Api(testbed.restricted())

    def can(verb, resource, group="", namespace=None, subresource=None):
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, resource=resource, group=group, namespace=namespace, subresource=subresource
                )
            )
        )
        return api.create_self_subject_access_review(review).status.allowed

    ns = testbed.namespace
    assert can("create", "jobs", "batch.volcano.sh", ns)
    assert can("delete", "podgroups", "scheduling.volcano.sh", ns)
    assert can("create", "jobs", "batch", ns)
    assert can("create", "configmaps", "", ns)
    assert can("get", "pods", "", ns, subresource="log")
    assert can("list", "nodes")
    assert can("list", "pods")  # all namespaces, for GPU accounting
    assert can("watch", "queues", "scheduling.volcano.sh")
    assert can("list", "priorityclasses", "scheduling.k8s.io")
    assert not can("create", "pods", "", ns)
    assert not can("get", "secrets", "", ns)
    assert not can("create", "jobs", "batch.volcano.sh", "default")
    assert not can("create", "queues", "scheduling.volcano.sh")
    assert not can("delete", "nodes")
    assert not can("create", "commands", "bus.volcano.sh", ns)  # stratctl sends Volcano no commands


def test_capped_queue_holds_back_a_gang_above_its_capability(testbed, admin, jobs):
    """Queue `capped` (nvidia.com/gpu: 16): a 17-GPU gang there waits although the cluster has room."""
    queue = client.CustomObjectsApi(testbed.admin()).get_cluster_custom_object(
        "scheduling.volcano.sh", "v1beta1", "queues", "capped"
    )
    cap = int(queue["spec"]["capability"][GPU])
    assert total_gpus(admin.core) - used_gpus(admin.core) > cap
    name = unique("capped")
    jobs.append(name)
    admin.create_job(vcjob(name, replicas=cap + 1, min_available=cap + 1, queue="capped"))
    wait_until(lambda: admin.podgroup(name), 30, message="podgroup")
    time.sleep(4)
    assert not admin.running_pods(name)
    assert (admin.podgroup(name).get("status") or {}).get("phase") == "Pending"


COMPONENT_JOBS = ("kube-apiserver", "etcd", "kube-controller-manager", "volcano-scheduler", "volcano-controllers")


def test_prometheus_scrapes_every_component(testbed):
    """The testbed's Prometheus scrapes the control plane's components (an external cluster
    is checked only if STRATCTL_TEST_PROMETHEUS_URL names its Prometheus)."""
    import json
    import urllib.parse
    import urllib.request

    if testbed.prometheus_url is None:
        pytest.skip("this cluster has no Prometheus (set STRATCTL_TEST_PROMETHEUS_URL)")

    def up() -> dict[str, float]:
        query = urllib.parse.urlencode({"query": "up"})
        with urllib.request.urlopen(f"{testbed.prometheus_url}/api/v1/query?{query}", timeout=5) as response:
            result = json.load(response)["data"]["result"]
        return {sample["metric"]["job"]: float(sample["value"][1]) for sample in result}

    # Each job answers `up` once scraped (within a scrape interval of a fresh start).
    wait_until(
        lambda: all(up().get(job) == 1.0 for job in COMPONENT_JOBS), timeout=30, message=f"up == 1 for {COMPONENT_JOBS}"
    )
