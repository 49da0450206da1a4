"""`submit --in-cluster`: the driver's objects (rendering/driverjob.py) and the hand-over
(verbs/incluster.py) against the in-memory cluster, on a fake clock."""

from __future__ import annotations

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.resources import BATCH_JOB, CONFIGMAP, SERVICE
from stratctl.backends.kubernetes.objects.lease import LeaseStore
from stratctl.backends.kubernetes.rendering.driverjob import (
    MOUNT,
    DriverSpec,
    config_map,
    job,
    layout,
    service,
)
from stratctl.backends.kubernetes.verbs.incluster import outcome, remove_driver, send, study_files
from stratctl.core.spec import load_study
from stratctl.errors import ClusterError, UsageError
from stratctl.run.driver import Mark
from stratctl.version import VERSION
from tests.unit.fake_cluster import FakeCluster

NS = "research"


def spec(**changes) -> DriverSpec:
    fields = dict(
        study="sweep",
        namespace=NS,
        image="registry.example/stratctl:1",
        files={"b/sweep.yaml": "name: sweep\n", "tpl/volcano-job.yaml.j2": "kind: Job\n"},
        study_file="b/sweep.yaml",
        flags=("--qps", "5"),
        client_version=VERSION,
    )
    fields.update(changes)
    return DriverSpec(**fields)


def test_the_study_and_its_templates_keep_their_places_relative_to_each_other():
    place, places = layout("/home/u/p/studies/s.yaml", ["/home/u/p/tpl/a.j2", "/home/u/p/tpl/sub/b.j2"])
    assert place == "studies/s.yaml"
    assert places == {
        "/home/u/p/studies/s.yaml": "studies/s.yaml",
        "/home/u/p/tpl/a.j2": "tpl/a.j2",
        "/home/u/p/tpl/sub/b.j2": "tpl/sub/b.j2",
    }
    assert layout("/x/s.yaml", []) == ("s.yaml", {"/x/s.yaml": "s.yaml"})


def test_the_driver_job_runs_submit_take_over_on_the_mounted_study_as_its_service_account():
    manifest = job(spec(node_selector={"pool": "cpu"}, scheduler="volcano"))
    assert manifest["metadata"]["name"] == "stratctl-driver-sweep"
    pod = manifest["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == [
        "submit",
        f"{MOUNT}/b/sweep.yaml",
        "--take-over",
        "--namespace",
        NS,
        "--metrics-port",
        "9090",
        "--metrics-address",
        "0.0.0.0",
        "--qps",
        "5",
    ]
    assert container["image"] == "registry.example/stratctl:1"
    assert (pod["serviceAccountName"], pod["priorityClassName"]) == ("stratctl-driver", "stratctl-driver")
    assert pod["automountServiceAccountToken"] is False  # its token is the projected volume, mounted where clients look
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts == {"/var/run/secrets/kubernetes.io/serviceaccount": "api", MOUNT: "study"}
    env = {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env["STRATCTL_DRIVER_POD"] == "metadata.name" and env["STRATCTL_DRIVER_NODE"] == "spec.nodeName"
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["tolerations"] == [{"key": "pool", "operator": "Exists"}]
    assert pod["schedulerName"] == "volcano"
    policy = manifest["spec"]
    assert policy["podReplacementPolicy"] == "Failed"  # a new pod only once the old one ended: no overlap
    ignore, fail = policy["podFailurePolicy"]["rules"]
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert fail["action"] == "FailJob" and fail["onExitCodes"]["values"] == [1, 2, 4, 124]
    assert "schedulerName" not in job(spec())["spec"]["template"]["spec"]
    assert "nodeSelector" not in job(spec())["spec"]["template"]["spec"]


def test_no_driver_object_carries_the_label_that_makes_an_object_a_trial():
    s = spec()
    for manifest in (job(s), config_map(s), service(s)):
        assert labels.STUDY not in manifest["metadata"]["labels"]
        assert manifest["metadata"]["labels"][labels.DRIVER_OF] == "sweep"
    assert labels.STUDY not in job(s)["spec"]["template"]["metadata"]["labels"]
    assert service(s)["spec"]["selector"] == job(s)["spec"]["template"]["metadata"]["labels"]


def test_the_volume_puts_each_file_of_the_config_map_at_its_place():
    s = spec()
    data = config_map(s)["data"]
    [volume] = [v for v in job(s)["spec"]["template"]["spec"]["volumes"] if v["name"] == "study"]
    placed = {item["path"]: data[item["key"]] for item in volume["configMap"]["items"]}
    assert placed == dict(s.files)


class Clock:
    def __init__(self):
        self.now = 1000.0
        self.on_sleep = lambda: None

    def wall(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep()


def driver_takes(cluster: FakeCluster, clock: Clock, pod: str = "stratctl-driver-sweep-x7k2p", node: str = "gpu-3"):
    """What the driver's pod does once it runs: takes the study's Lease."""

    def take():
        store = LeaseStore(cluster, NS, "sweep")
        mark, version = store.read()
        if mark is None:
            store.write(Mark(f"pod {pod} on {node}", clock.now, clock.now, 30.0), version)

    clock.on_sleep = take


def test_send_creates_the_study_its_service_and_its_job_then_says_which_pod_drives_it():
    cluster, clock = FakeCluster(NS), Clock()
    driver_takes(cluster, clock)
    driven = send(cluster, spec(), clock.wall, clock.sleep)
    assert (driven.pod, driven.node, driven.job, driven.version, driven.kept) == (
        "stratctl-driver-sweep-x7k2p",
        "gpu-3",
        "stratctl-driver-sweep",
        VERSION,
        False,
    )
    for kind in (CONFIGMAP, SERVICE, BATCH_JOB):
        cluster.get(kind, "stratctl-driver-sweep", NS)
    assert "pod stratctl-driver-sweep-x7k2p on node gpu-3" in driven.line("sweep")
    assert driven.version_warning() is None


def test_the_same_study_sent_again_keeps_its_running_driver_and_a_changed_one_replaces_it():
    cluster, clock = FakeCluster(NS), Clock()
    driver_takes(cluster, clock)
    send(cluster, spec(), clock.wall, clock.sleep)
    first = cluster.get(BATCH_JOB, "stratctl-driver-sweep", NS)["metadata"]["uid"]
    again = send(cluster, spec(), clock.wall, clock.sleep)
    assert again.kept and cluster.get(BATCH_JOB, "stratctl-driver-sweep", NS)["metadata"]["uid"] == first
    changed = send(cluster, spec(flags=("--qps", "9")), clock.wall, clock.sleep)
    assert not changed.kept
    replaced = cluster.get(BATCH_JOB, "stratctl-driver-sweep", NS)
    assert (
        replaced["metadata"]["uid"] != first
        and replaced["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "9"
    )


def test_a_driver_pod_whose_image_cannot_be_pulled_fails_the_command_naming_the_image():
    cluster, clock = FakeCluster(NS), Clock()

    def stuck():
        if clock.now > 1003 and not cluster.list(("v1", "Pod"), NS)[0]:
            cluster.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": "stratctl-driver-sweep-a",
                        "namespace": NS,
                        "labels": {labels.DRIVER_OF: "sweep"},
                    },
                    "status": {
                        "phase": "Pending",
                        "containerStatuses": [
                            {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
                        ],
                    },
                }
            )

    clock.on_sleep = stuck
    with pytest.raises(
        ClusterError, match=r"ImagePullBackOff: not found \(its image registry.example/stratctl:1: --driver-image"
    ):
        send(cluster, spec(), clock.wall, clock.sleep)


def test_a_job_that_cannot_make_its_pod_says_why_and_who_applies_the_driver_rbac():
    cluster, clock = FakeCluster(NS), Clock()
    cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "e1", "namespace": NS},
            "involvedObject": {"name": "stratctl-driver-sweep"},
            "reason": "FailedCreate",
            "message": 'Error creating: pods "stratctl-driver-sweep-" is forbidden: '
            'serviceaccount "stratctl-driver" not found',
        }
    )
    with pytest.raises(
        ClusterError,
        match=r"serviceaccount \"stratctl-driver\" not found; an admin applies `stratctl rbac -n research --driver`",
    ):
        send(cluster, spec(), clock.wall, clock.sleep)
    assert clock.now - 1000 < 15  # said within seconds, not at the start-up bound


def test_a_driver_that_never_holds_the_study_times_out_saying_what_its_pod_does():
    cluster, clock = FakeCluster(NS), Clock()
    with pytest.raises(ClusterError, match="did not take it within 30 s"):
        send(cluster, spec(), clock.wall, clock.sleep, startup=30)


def test_outcome_and_remove_driver():
    cluster, clock = FakeCluster(NS), Clock()
    driver_takes(cluster, clock)
    send(cluster, spec(), clock.wall, clock.sleep)
    assert outcome(cluster, NS, "sweep") is None
    found = cluster.objects[("batch/v1", "Job", NS, "stratctl-driver-sweep")]
    found["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "exit code 1"}]}
    assert outcome(cluster, NS, "sweep") == (False, "the driver ended: exit code 1")
    found["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert outcome(cluster, NS, "sweep") == (True, "the driver ended: every trial done")
    assert remove_driver(cluster, NS, "sweep") is True
    assert remove_driver(cluster, NS, "sweep") is False
    assert outcome(cluster, NS, "sweep")[0] is False


STUDY = """\
name: sweep
namespace: research
templates_dir: {templates}
space:
  lr: {{type: choice, values: [0.1, 0.01]}}
strategy: {{kind: grid}}
trial:
  image: busybox:1.36
  command: ["sh", "-c", "echo {{{{ params.lr }}}}"]
  resources:
    requests: {{nvidia.com/gpu: 1}}
    limits: {{nvidia.com/gpu: 1}}
"""


def test_study_files_carries_the_study_text_and_its_templates_directory(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "volcano-job.yaml.j2").write_text("{{ x }}\n")
    (tmp_path / "tpl" / "__pycache__").mkdir()
    (tmp_path / "tpl" / "__pycache__" / "junk.pyc").write_bytes(b"\0\1")
    (tmp_path / "studies").mkdir()
    path = tmp_path / "studies" / "sweep.yaml"
    path.write_text(STUDY.format(templates="../tpl"))
    place, files = study_files(load_study(path))
    assert place == "studies/sweep.yaml"
    assert files == {"studies/sweep.yaml": path.read_text(), "tpl/volcano-job.yaml.j2": "{{ x }}\n"}


def test_an_absolute_templates_dir_is_refused_naming_the_file(tmp_path):
    (tmp_path / "tpl").mkdir()
    path = tmp_path / "sweep.yaml"
    path.write_text(STUDY.format(templates=tmp_path / "tpl"))
    with pytest.raises(UsageError, match=r"sweep.yaml: templates_dir: .* relative to the study file"):
        study_files(load_study(path))


def test_a_driver_of_another_version_is_one_warning_line_naming_both():
    from stratctl.backends.kubernetes.verbs.incluster import Driven

    older = Driven("p", "n", "stratctl-driver-sweep", NS, "0.0.9")
    assert older.version_warning() == f"warning: the driver runs stratctl 0.0.9, this command is stratctl {VERSION}"
    assert Driven("p", "n", "j", NS, VERSION).version_warning() is None
    assert Driven("p", "n", "j", NS, "").version_warning() is None  # a Lease that does not say


def test_the_lease_names_the_version_of_its_holder():
    cluster = FakeCluster(NS)
    LeaseStore(cluster, NS, "sweep").write(Mark("me", 1.0, 1.0, 30.0), "")
    lease = cluster.get(("coordination.k8s.io/v1", "Lease"), "stratctl-driver-sweep", NS)
    assert lease["metadata"]["annotations"] == {labels.VERSION: VERSION}
