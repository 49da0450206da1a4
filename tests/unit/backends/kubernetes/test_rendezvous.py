"""The rendezvous contract on Kubernetes (backends/kubernetes/rendering/rendezvous.py): the
objects that name a trial's pods under a headless Service, and what each pod's container sees
when it starts (worked out as the kubelet does, the rank wrapper run by a real /bin/sh:
tests/kubelet.py)."""

from __future__ import annotations

import copy
import subprocess

import pytest

from stratctl import labels, rendezvous
from stratctl.backends.kubernetes.attempts.requeue import create_attempt
from stratctl.backends.kubernetes.rendering.rendezvous import BATCH_INDEX, VOLCANO_INDEX, WRAPPER
from stratctl.core.render import bundled_templates
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.core.task import task_of
from stratctl.errors import StudyError
from tests.kubelet import started
from tests.unit.rendering import Renderer
from tests.unit.studies import load, write

STUDY = """\
name: ddp
namespace: ns
workload: {workload}
space:
  lr: {{type: choice, values: [0.1, 0.2]}}
strategy: {{kind: grid}}
trial:
  image: busybox
  command: [train, "--lr={{{{ params.lr }}}}"]
  env: {{RANK: "99", EPOCHS: "3"}}
  tasks:
{tasks}
"""
TWO = "    - {name: worker, replicas: 2}\n"
ROLES = (
    "    - {name: ps, replicas: 2}\n    - {name: worker, replicas: 4}\n    - {name: evaluator}\n"
    "    - {name: logs, replicas: 3, min_available: 0}\n"
)


def pods(docs: list[dict]) -> list[tuple[str, dict, dict]]:
    """(role, pod, container) of every pod the controller would create from `docs`, in rank
    order: Volcano's job controller (svc plugin: hostname = pod name, subdomain = job) or the
    Job controller of an Indexed Job (hostname `<job>-<index>`)."""
    job = next(d for d in docs if d["kind"] == "Job")
    name = job["metadata"]["name"]
    out = []
    if job["apiVersion"].startswith("batch.volcano.sh/"):
        for task in job["spec"]["tasks"]:
            for i in range(task["replicas"]):
                template = copy.deepcopy(task["template"])
                meta = {
                    **template["metadata"],
                    "name": f"{name}-{task['name']}-{i}",
                    "annotations": {**template["metadata"].get("annotations", {}), VOLCANO_INDEX: str(i)},
                }
                spec = {**template["spec"], "hostname": meta["name"], "subdomain": name}
                out.append((task["name"], {"metadata": meta, "spec": spec}, spec["containers"][0]))
    else:
        template = job["spec"]["template"]
        for i in range(job["spec"]["completions"]):
            meta = {
                **template["metadata"],
                "name": f"{name}-{i}-x7k2p",
                "annotations": {**template["metadata"].get("annotations", {}), BATCH_INDEX: str(i)},
            }
            spec = {**copy.deepcopy(template["spec"]), "hostname": f"{name}-{i}"}
            out.append(("", {"metadata": meta, "spec": spec}, spec["containers"][0]))
    return out


def seen(docs: list[dict]) -> list[tuple[dict, dict]]:
    """(pod, the environment its program starts with) of every pod, in rank order."""
    return [(pod, started(pod, container)) for _, pod, container in pods(docs)]


@pytest.mark.parametrize("workload", ["volcano", "batch"])
def test_every_pod_of_a_two_pod_trial_knows_its_rank_and_rank_0s_dns_name(tmp_path, workload):
    study = load(tmp_path, STUDY.format(workload=workload, tasks=TWO))
    trial = expand(study)[0]
    docs = Renderer(study).render(trial, attempt=2)
    job = f"{trial.name}-a2"
    hosts = [f"{job}-worker-{i}" if workload == "volcano" else f"{job}-{i}" for i in range(2)]
    for rank, (pod, env) in enumerate(seen(docs)):
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (hosts[rank], job)
        assert env[rendezvous.MASTER_ADDR] == f"{hosts[0]}.{job}"  # rank 0's DNS name under the Service
        assert env[rendezvous.NODE_ADDRS] == ",".join(f"{h}.{job}" for h in hosts)
        assert env[rendezvous.NODE_ADDRS].split(",")[rank] == f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}"
        assert (env[rendezvous.RANK], env[rendezvous.NODE_RANK], env[rendezvous.TASK_INDEX]) == (str(rank),) * 3
        assert (env[rendezvous.WORLD_SIZE], env[rendezvous.NUM_NODES]) == ("2", "2")
        assert env[rendezvous.MASTER_PORT] == str(rendezvous.FIXED_PORT)
        assert (env[rendezvous.TASK], env[rendezvous.TASKS]) == ("worker", "worker")
        assert env["STRATCTL_WORKER_HOSTS"] == env[rendezvous.NODE_ADDRS] and env["STRATCTL_WORKER_NUM"] == "2"
        assert env["EPOCHS"] == "3"  # the trial's own variables stay; its RANK gives way to the contract's


def test_a_volcano_job_names_its_pods_with_the_svc_plugin_and_indexes_them_with_env(tmp_path):
    study = load(tmp_path, STUDY.format(workload="volcano", tasks=TWO))
    [job] = Renderer(study).render(expand(study)[0])
    assert job["spec"]["plugins"] == {"svc": ["--publish-not-ready-addresses=true"], "env": []}


def test_ranks_run_over_the_roles_in_task_order(tmp_path):
    study = load(tmp_path, STUDY.format(workload="volcano", tasks=ROLES))
    docs = Renderer(study).render(expand(study)[1])
    job = docs[0]["metadata"]["name"]
    found = [
        (env[rendezvous.TASK], env[rendezvous.TASK_INDEX], env[rendezvous.RANK], env[rendezvous.NODE_RANK])
        for _, env in seen(docs)
    ]
    roles = [("ps", 2), ("worker", 4), ("evaluator", 1), ("logs", 3)]
    expected = [(role, str(i)) for role, n in roles for i in range(n)]
    assert [(t, i) for t, i, _, _ in found] == expected
    assert (
        [r for _, _, r, _ in found] == [n for _, _, _, n in found] == [str(r) for r in range(10)]
    )  # distinct, in order
    for pod, env in seen(docs):
        assert env[rendezvous.WORLD_SIZE] == "10" and env[rendezvous.TASKS] == "ps,worker,evaluator,logs"
        assert env[rendezvous.MASTER_ADDR] == f"{job}-ps-0.{job}"
        assert env["STRATCTL_WORKER_HOSTS"] == ",".join(f"{job}-worker-{i}.{job}" for i in range(4))
        assert env["STRATCTL_EVALUATOR_NUM"] == "1" and env["STRATCTL_LOGS_NUM"] == "3"
        assert (
            env[rendezvous.NODE_ADDRS].split(",")[int(env[rendezvous.RANK])]
            == f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}"
        )


def test_only_a_task_whose_rank_is_a_sum_starts_through_the_shell(tmp_path):
    """The first task's rank is its index, a one-pod task's a literal: both plain values,
    their commands untouched. A task of several pods after the first starts through /bin/sh,
    which execs the task's command and arguments unchanged."""
    study = load(tmp_path, STUDY.format(workload="volcano", tasks=ROLES))
    [job] = Renderer(study).render(expand(study)[0])
    containers = {t["name"]: t["template"]["spec"]["containers"][0] for t in job["spec"]["tasks"]}
    assert containers["ps"]["command"] == containers["evaluator"]["command"] == ["train", "--lr=0.1"]
    env = {e["name"]: e for e in containers["evaluator"]["env"]}
    assert env[rendezvous.RANK] == {"name": rendezvous.RANK, "value": "6"}
    env = {e["name"]: e for e in containers["ps"]["env"]}
    assert env[rendezvous.RANK]["valueFrom"] == {"fieldRef": {"fieldPath": f"metadata.annotations['{VOLCANO_INDEX}']"}}
    assert containers["worker"]["command"] == [
        "/bin/sh",
        "-c",
        WRAPPER.format(first=2),
        "stratctl-rank",
        "train",
        "--lr=0.1",
    ]
    assert rendezvous.RANK not in {e["name"] for e in containers["worker"]["env"]}


def test_the_rank_wrapper_execs_the_command_with_its_words_and_fails_without_an_index(tmp_path):
    script = WRAPPER.format(first=4).replace("$$", "$")  # as the kubelet hands it to the shell
    done = subprocess.run(
        ["/bin/sh", "-c", script, "stratctl-rank", "sh", "-c", 'echo "$RANK $STRATCTL_NODE_RANK $1"', "x", "two words"],
        env={"STRATCTL_TASK_INDEX": "3", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout) == (0, "7 7 two words\n")
    done = subprocess.run(
        ["/bin/sh", "-c", script, "stratctl-rank", "true"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr == "stratctl: no task index for this pod (STRATCTL_TASK_INDEX=): no rendezvous contract\n"


def test_a_task_whose_rank_is_a_sum_needs_a_command(tmp_path):
    text = STUDY.format(workload="volcano", tasks=ROLES).replace('  command: [train, "--lr={{ params.lr }}"]\n', "")
    path = write(tmp_path, text)
    with pytest.raises(StudyError) as e:
        Renderer(load_study(path)).render(expand(load_study(path))[0])
    assert [str(p).replace(str(path), "study.yaml") for p in e.value.problems] == [
        "study.yaml:12:7: trial.tasks.1: the 4 pods of task 'worker' start at rank 2, and a pod learns its rank on "
        "Kubernetes as that plus its index, which /bin/sh adds before it execs the task's command; the task has no "
        "command to start that way (the image's entrypoint cannot be): set command (the task's or trial.command)",
        "study.yaml:14:7: trial.tasks.3: the 3 pods of task 'logs' start at rank 7, and a pod learns its rank on "
        "Kubernetes as that plus its index, which /bin/sh adds before it execs the task's command; the task has no "
        "command to start that way (the image's entrypoint cannot be): set command (the task's or trial.command)",
    ]
    with_own = text.replace("{name: worker, replicas: 4}", "{name: worker, replicas: 4, command: [work]}").replace(
        "{name: logs, replicas: 3,", "{name: logs, replicas: 3, command: [ship],"
    )
    study = load(tmp_path, with_own)
    [job] = Renderer(study).render(expand(study)[0])
    assert job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["command"][-1] == "work"


def test_the_batch_workload_runs_indexed_under_a_headless_service_the_job_owns(tmp_path):
    study = load(tmp_path, STUDY.format(workload="batch", tasks=TWO))
    trial = expand(study)[0]
    group, job, service = Renderer(study).render(trial)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"] == trial.name
    assert service["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"batch.kubernetes.io/job-name": trial.name},
    }
    assert service["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": trial.name, "uid": ""}
    ]
    assert service["metadata"]["namespace"] == "ns"
    assert service["metadata"]["labels"][labels.TRIAL] == trial.name  # found, and deleted, with the study


class Recorder:
    """A cluster that records creates and answers with a uid, or 409 for what exists."""

    def __init__(self, existing: dict | None = None):
        self.created: list[dict] = []
        self.existing = existing or {}

    def create(self, manifest, dry_run=False):
        from stratctl.errors import AlreadyExists

        key = (manifest["kind"], manifest["metadata"]["name"])
        if key in self.existing:
            raise AlreadyExists("exists")
        self.created.append(manifest)
        return {**manifest, "metadata": {**manifest["metadata"], "uid": f"uid-of-{manifest['kind']}"}}

    def get(self, kind, name, namespace=None):
        return self.existing[(kind[1], name)]


def test_the_service_gets_the_uid_of_the_job_created_before_it(tmp_path):
    study = load(tmp_path, STUDY.format(workload="batch", tasks=TWO))
    docs = Renderer(study).render(expand(study)[0])
    cluster = Recorder()
    assert create_attempt(cluster, docs, "ns") == "created"
    assert [d["kind"] for d in cluster.created] == ["PodGroup", "Job", "Service"]
    assert cluster.created[2]["metadata"]["ownerReferences"][0]["uid"] == "uid-of-Job"
    assert docs[2]["metadata"]["ownerReferences"][0]["uid"] == ""  # the rendered manifests stay as rendered
    # a rerun finds the Job there: the Service is owned by that one
    job = {**docs[1], "metadata": {**docs[1]["metadata"], "uid": "the-first-run's"}}
    cluster = Recorder({("Job", job["metadata"]["name"]): job})
    create_attempt(cluster, docs, "ns")
    assert cluster.created[-1]["metadata"]["ownerReferences"][0]["uid"] == "the-first-run's"


def test_the_per_study_and_per_trial_renderings_agree(tmp_path):
    for workload, tasks in (("volcano", ROLES), ("batch", TWO)):
        study = load(
            tmp_path,
            STUDY.format(workload=workload, tasks=tasks).replace(
                "  command:", '  annotations: {a: "{{ trial }}"}\n  command:'
            ),
        )
        fast, slow = Renderer(study), Renderer(study)
        slow._compiled = None
        assert fast._compiled is not None and fast._layout is not None
        for trial in expand(study):
            for attempt in (0, 3):
                assert fast.render(trial, attempt) == slow.render(trial, attempt)


def test_a_custom_template_gets_the_contract_too(tmp_path):
    """The plugins, the Indexed mode, the Service and the variables are stamped after
    rendering, like stratctl's labels: a copy of a bundled template cannot forget them."""
    (tmp_path / "tpl").mkdir()
    text = (bundled_templates() / "volcano-job.yaml.j2").read_text()
    (tmp_path / "tpl" / "job.yaml.j2").write_text(
        text.replace("  tasks:\n", "  plugins: {svc: [], ssh: []}\n  tasks:\n")
    )
    study = load(
        tmp_path, STUDY.format(workload="volcano", tasks=TWO) + "  template: job.yaml.j2\ntemplates_dir: tpl\n"
    )
    docs = Renderer(study).render(expand(study)[0])
    assert docs[0]["spec"]["plugins"] == {"svc": [], "ssh": [], "env": []}  # the template's own svc arguments kept
    assert [env[rendezvous.RANK] for _, env in seen(docs)] == ["0", "1"]


def test_slurm_and_yarn_render_no_kubernetes_contract(tmp_path):
    text = (
        STUDY.format(workload="volcano", tasks=TWO)
        .replace("  image: busybox\n", "")
        .replace("workload: volcano\n", "backend: slurm\n")
        .replace("namespace: ns\n", "")
    )
    study = load(tmp_path, text)
    docs = Renderer(study).render(expand(study)[0])
    assert "plugins" not in docs[0]["spec"]
    task = task_of(docs)
    assert task.command == ["train", "--lr=0.1"]
    assert not {name for name, _ in task.env} & {rendezvous.MASTER_ADDR, rendezvous.NODE_ADDRS}


@pytest.mark.parametrize(
    "name, tasks, message",
    [
        (
            "9lives",
            TWO,
            "study.yaml:1:7: name: the study name '9lives' starts each trial's job name, which names its "
            "headless Service on Kubernetes (the pods' DNS names), and a Service name must start with a letter",
        ),
        (
            "a" * 40,
            "    - {name: parameter-server, replicas: 12}\n",
            "study.yaml:12:14: trial.tasks.0.name: each pod of task 'parameter-server' is named "
            "<job>-parameter-server-<index> "
            "in its trial's DNS (its hostname), up to 76 characters with this study name (attempt 999, index 11), "
            "over the "
            "63 a hostname may have: shorten the study name (40 characters) or the task name by 13",
        ),
    ],
)
def test_names_the_dns_names_cannot_carry_are_refused_located(tmp_path, name, tasks, message):
    path = write(tmp_path, STUDY.format(workload="volcano", tasks=tasks).replace("name: ddp", f"name: {name}"))
    with pytest.raises(StudyError) as e:
        Renderer(load_study(path))
    assert [str(p).replace(str(path), "study.yaml") for p in e.value.problems] == [message]


def test_a_long_study_name_fits_the_batch_workloads_shorter_hostnames(tmp_path):
    study = load(
        tmp_path,
        STUDY.format(workload="batch", tasks="    - {name: parameter-server, replicas: 12}\n").replace(
            "name: ddp", f"name: {'a' * 40}"
        ),
    )
    trial = expand(study)[0]
    docs = Renderer(study).render(trial, attempt=999)
    assert max(len(pod["spec"]["hostname"]) for _, pod, _ in pods(docs)) == 40 + 11 + 5 + 3 <= 63
