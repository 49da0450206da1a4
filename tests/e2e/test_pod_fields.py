"""A trial's pod fields on the real testbed: a study whose pods mount a claim (bound to a
pre-bound hostPath volume the test creates), a memory-backed emptyDir at /dev/shm, a config
map and a secret, take their environment from a secret and a config map, pull with an image
pull secret, run as a given user and need zone-a nodes: every pod Volcano places carries
them and lands on a zone-a node."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import NODE, POD
from tests.e2e.support import finish, unique, wait_until

pytestmark = pytest.mark.e2e

ZONE = "topology.kubernetes.io/zone"


def kubectl(testbed, *args: str, stdin: str | None = None) -> str:
    assert testbed.kubectl, "the testbed has no kubectl"
    done = subprocess.run(
        [
            testbed.kubectl,
            "--kubeconfig",
            testbed.kubeconfig,
            "--context",
            testbed.admin_context,
            "-n",
            testbed.namespace,
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def objects(testbed):
    """A claim pre-bound to a hostPath volume, a config map and a secret, named after `name`;
    deleted afterwards."""
    made: list[str] = []

    def make(name: str) -> None:
        manifests = [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{name}-pv"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "hostPath": {"path": f"/tmp/{name}"},
                    "persistentVolumeReclaimPolicy": "Retain",
                    "claimRef": {"namespace": testbed.namespace, "name": f"{name}-ckpt"},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": f"{name}-ckpt"},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "volumeName": f"{name}-pv",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-cfg"}, "data": {"EPOCHS": "3"}},
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{name}-creds"},
                "stringData": {"TOKEN": "t0ken"},
            },
        ]
        made.append(name)
        kubectl(testbed, "apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))
        # the cluster's volume binder binds the pre-bound pair (Volcano's scheduler places a
        # pod that uses the claim only then)
        wait_until(
            lambda: kubectl(testbed, "get", "pvc", f"{name}-ckpt", "-o", "jsonpath={.status.phase}") == "Bound",
            60,
            message="the claim bound to its volume",
        )

    yield make
    unprotect = json.dumps({"metadata": {"finalizers": None}})  # no controller here to remove them
    for name in made:
        kubectl(testbed, "patch", "pvc", f"{name}-ckpt", "--type=merge", "-p", unprotect)
        kubectl(testbed, "patch", "pv", f"{name}-pv", "--type=merge", "-p", unprotect)
        kubectl(
            testbed,
            "delete",
            "--ignore-not-found",
            "--wait=false",
            f"pvc/{name}-ckpt",
            f"configmap/{name}-cfg",
            f"secret/{name}-creds",
            f"pv/{name}-pv",
        )


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_pods_carry_volumes_env_from_pull_secrets_security_context_and_land_in_the_required_zone(
    testbed, api, cli, studies, objects, workload
):
    name = unique("pod")
    objects(name)
    trials, replicas = 3, 2
    path = studies(
        name,
        textwrap.dedent(f"""\
        name: {name}
        namespace: {testbed.namespace}
        priority_class: stratctl-low
        workload: {workload}
        space:
          seed: {{type: int, low: 0, high: {trials - 1}}}
        strategy: {{kind: grid}}
        trial:
          image: stratctl.invalid/fake-trial:0
          annotations: {{testbed.stratctl.io/run-duration: 6s}}
          resources: {{requests: {{nvidia.com/gpu: 1, cpu: 100m}}, limits: {{nvidia.com/gpu: 1}}}}
          volumes:
            - {{name: ckpt, pvc: {{claim: {name}-ckpt}}}}
            - {{name: shm, empty_dir: {{medium: Memory, size_limit: 1Gi}}}}
            - {{name: cfg, config_map: {{name: {name}-cfg}}}}
            - {{name: creds, secret: {{name: {name}-creds}}}}
          volume_mounts:
            - {{name: ckpt, mount_path: /ckpt}}
            - {{name: shm, mount_path: /dev/shm}}
          affinity:
            node:
              required: {{{ZONE}: zone-a}}
          image_pull_secrets: [regcred]
          env_from: [{{secret: {name}-creds}}, {{config_map: {name}-cfg}}]
          security_context: {{run_as_user: 1000, fs_group: 1000}}
          tasks:
            - name: worker
              replicas: {replicas}
              volume_mounts: [{{name: creds, mount_path: /var/run/creds, read_only: true}}]
        checkpoint: {{location: "/ckpt/{{{{ study }}}}/{{{{ trial }}}}"}}
        throttle: {{qps: 50, burst: 20, parallelism: {{min: 1, initial: {trials}, max: {trials}}}}}
        """),
    )
    zone_a = {n["metadata"]["name"] for n in api.list(NODE)[0] if n["metadata"]["labels"].get(ZONE) == "zone-a"}
    assert zone_a, "the testbed has no zone-a nodes"
    submit = cli.start("submit", path, "-o", "json", "--poll-interval", "1")
    try:
        progress = finish(submit, timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert (progress["succeeded"], progress["failed"]) == (trials, 0), progress

    pods = api.list(POD, label_selector=f"{labels.STUDY}={name}")[0]
    assert len(pods) == trials * replicas
    for pod in pods:
        spec = pod["spec"]
        assert spec["nodeName"] in zone_a, f"{pod['metadata']['name']} ran on {spec['nodeName']}, not in zone-a"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["ckpt"]["persistentVolumeClaim"] == {"claimName": f"{name}-ckpt"}
        assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
        assert volumes["cfg"]["configMap"]["name"] == f"{name}-cfg"
        assert volumes["creds"]["secret"]["secretName"] == f"{name}-creds"
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec["securityContext"] == {"runAsUser": 1000, "fsGroup": 1000}
        assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]}]
        }
        [container] = spec["containers"]
        assert container["envFrom"] == [
            {"secretRef": {"name": f"{name}-creds"}},
            {"configMapRef": {"name": f"{name}-cfg"}},
        ]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/ckpt"]["name"] == "ckpt" and mounts["/dev/shm"]["name"] == "shm"
        assert mounts["/var/run/creds"] == {"name": "creds", "mountPath": "/var/run/creds", "readOnly": True}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[labels.ENV_CHECKPOINT].startswith(f"/ckpt/{name}/")
