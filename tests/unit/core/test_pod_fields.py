"""Pod fields of a trial (volumes, mounts, affinity, pull secrets, env_from, security
context): validated with located problems, rendered in both workloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratctl.core.space import expand
from stratctl.core.spec import json_schema, load_study
from tests.unit.rendering import Renderer
from tests.unit.studies import load, problems

EXAMPLE = Path(__file__).parents[3] / "examples" / "checkpoint-pvc.yaml"

STUDY = """\
name: pods
namespace: ns
workload: {workload}
space:
  lr: {{type: choice, values: [0.1, 0.2]}}
strategy: {{kind: grid}}
trial:
  image: busybox
  volumes:
    - {{name: ckpt, pvc: {{claim: "ckpt-{{{{ study }}}}"}}}}
    - {{name: shm, empty_dir: {{medium: Memory, size_limit: 8Gi}}}}
    - {{name: cfg, config_map: {{name: trainer-config}}}}
    - {{name: creds, secret: {{name: hub-token, optional: true}}}}
  volume_mounts:
    - {{name: ckpt, mount_path: /ckpt}}
    - {{name: shm, mount_path: /dev/shm}}
  affinity:
    node:
      required: {{gpu-type: [a100, h100], topology.kubernetes.io/zone: zone-a}}
      preferred: {{disk: ssd}}
  image_pull_secrets: [regcred]
  env_from: [{{secret: wandb}}, {{config_map: defaults, prefix: CFG_}}]
  security_context: {{run_as_user: 1000, run_as_non_root: true, fs_group: 2000}}
  tasks:
    - name: worker
      volume_mounts:
        - {{name: cfg, mount_path: /etc/cfg, read_only: true}}
        - {{name: creds, mount_path: /secrets, sub_path: token}}
"""

VOLUMES = [
    {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-pods"}},
    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
    {"name": "cfg", "configMap": {"name": "trainer-config"}},
    {"name": "creds", "secret": {"secretName": "hub-token", "optional": True}},
]
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "gpu-type", "operator": "In", "values": ["a100", "h100"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]},
                    ]
                }
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}
        ],
    }
}


def _pod(docs: list[dict], workload: str) -> dict:
    if workload == "volcano":
        return docs[0]["spec"]["tasks"][0]["template"]["spec"]
    [job] = [d for d in docs if d["kind"] == "Job"]
    return job["spec"]["template"]["spec"]


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_every_pod_field_is_rendered_in_kubernetes_terms(tmp_path, workload):
    study = load(tmp_path, STUDY.format(workload=workload))
    pod = _pod(Renderer(study).render(expand(study)[0]), workload)
    assert pod["volumes"] == VOLUMES  # the claim name is a template over the trial's values
    assert pod["affinity"] == AFFINITY
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsNonRoot": True, "fsGroup": 2000}
    [container] = pod["containers"]
    assert container["envFrom"] == [
        {"secretRef": {"name": "wandb"}},
        {"prefix": "CFG_", "configMapRef": {"name": "defaults"}},
    ]
    # the trial's mounts, then the task's own
    assert container["volumeMounts"] == [
        {"name": "ckpt", "mountPath": "/ckpt"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True},
        {"name": "creds", "mountPath": "/secrets", "subPath": "token"},
    ]


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_a_trial_without_pod_fields_renders_none_of_them(tmp_path, workload):
    text = STUDY.format(workload=workload)
    text = text[: text.index("  volumes:")] + "  tasks: [{name: worker}]\n"
    study = load(tmp_path, text)
    pod = _pod(Renderer(study).render(expand(study)[0]), workload)
    assert not {"volumes", "affinity", "imagePullSecrets", "securityContext"} & set(pod)
    assert not {"envFrom", "volumeMounts"} & set(pod["containers"][0])


def _problems(tmp_path, old: str, new: str) -> list[str]:
    text = STUDY.format(workload="volcano")
    assert old in text
    return problems(tmp_path, text.replace(old, new))


def test_a_mount_of_an_undefined_volume_is_located_at_its_name(tmp_path):
    assert _problems(tmp_path, "{name: cfg, mount_path: /etc/cfg", "{name: cgf, mount_path: /etc/cfg") == [
        "study.yaml:27:18: trial.tasks.0.volume_mounts.0.name: mount of volume 'cgf', "
        "which trial.volumes does not define"
    ]
    assert _problems(tmp_path, "{name: shm, mount_path: /dev/shm}", "{name: tmp, mount_path: /dev/shm}") == [
        "study.yaml:16:14: trial.volume_mounts.1.name: mount of volume 'tmp', which trial.volumes does not define"
    ]


def test_a_duplicate_volume_name_is_located_at_the_second(tmp_path):
    assert _problems(tmp_path, "{name: cfg, config_map", "{name: shm, config_map") == [
        "study.yaml:12:14: trial.volumes.2.name: duplicate volume name 'shm'"
    ]


@pytest.mark.parametrize(
    ("source", "got"),
    [
        ("{name: cfg}", "none"),
        ("{name: cfg, config_map: {name: a}, secret: {name: b}}", "config_map, secret"),
    ],
)
def test_a_volume_needs_exactly_one_source(tmp_path, source, got):
    [problem] = _problems(tmp_path, "{name: cfg, config_map: {name: trainer-config}}", source)
    assert problem.startswith(
        "study.yaml:12:7: trial.volumes.2: volume 'cfg' needs exactly one source of "
        "pvc, empty_dir, config_map, secret; got " + got
    )


def test_a_relative_mount_path_is_located_at_it(tmp_path):
    assert _problems(tmp_path, "mount_path: /ckpt}", "mount_path: ckpt}") == [
        "study.yaml:15:32: trial.volume_mounts.0.mount_path: mount_path must be an absolute path "
        "(starting with '/'), got 'ckpt'"
    ]


def test_env_from_names_exactly_one_source_and_unknown_fields_are_refused(tmp_path):
    [p] = _problems(tmp_path, "{secret: wandb}", "{secret: wandb, config_map: x}")
    assert p.startswith("study.yaml:22:14: trial.env_from.0:") and "exactly one of 'secret' or 'config_map'" in p
    assert _problems(tmp_path, "run_as_user: 1000", "runAsUser: 1000") == [
        "study.yaml:23:22: unknown key 'runAsUser' in trial.security_context (did you mean 'run_as_user'?)"
    ]


def test_the_schema_lists_the_pod_fields():
    trial = json_schema()["$defs"]["TrialSpec"]["properties"]
    assert {"volumes", "volume_mounts", "affinity", "image_pull_secrets", "env_from", "security_context"} <= set(trial)
    assert "volume_mounts" in json_schema()["$defs"]["Task"]["properties"]


def test_the_checkpoint_example_mounts_its_claim_at_the_checkpoint_and_resumes_from_it():
    study = load_study(EXAMPLE)
    [job] = Renderer(study).render(expand(study)[0], attempt=1, resume=True)
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-claim"}} in pod["volumes"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["STRATCTL_RESUME"] == "1"
    assert env["STRATCTL_CHECKPOINT_DIR"].startswith("/ckpt/ckpt-pvc/")
    assert {"name": "ckpt", "mountPath": "/ckpt"} in container["volumeMounts"]
    assert "--resume" in container["args"][0]


def test_a_field_stratctl_does_not_model_is_reached_through_a_copy_of_the_bundled_template(tmp_path):
    # what docs/study-file.md shows: copy the bundled template, add beside `containers:`, point at it
    bundled = (Path(__file__).parents[3] / "templates" / "volcano-job.yaml.j2").read_text()
    added = (
        "        runtimeClassName: nvidia\n"
        "        initContainers:\n"
        "        - name: fetch-data\n"
        '          image: {{ "registry.example.com/fetch:1" | tojson }}\n'
        '          args: ["--to=/data/{{ study }}"]\n'
    )
    assert bundled.count("        containers:\n") == 1
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "volcano-job.yaml.j2").write_text(
        bundled.replace("        containers:\n", added + "        containers:\n")
    )
    text = STUDY.format(workload="volcano").replace(
        "trial:\n", "templates_dir: templates\ntrial:\n  template: volcano-job.yaml.j2\n", 1
    )
    study = load(tmp_path, text)
    pod = _pod(Renderer(study).render(expand(study)[0]), "volcano")
    assert pod["runtimeClassName"] == "nvidia"
    [init] = pod["initContainers"]
    assert {k: v for k, v in init.items() if k != "env"} == {
        "name": "fetch-data",
        "image": "registry.example.com/fetch:1",
        "args": ["--to=/data/pods"],
    }
    assert {e["name"] for e in init["env"]} >= {"STRATCTL_TRIAL"}  # stamped like every container
    assert pod["volumes"] == VOLUMES  # the modelled fields still render from the copy
    assert {e["name"] for e in pod["containers"][0]["env"]} >= {"STRATCTL_TRIAL", "STRATCTL_CHECKPOINT_DIR"}
