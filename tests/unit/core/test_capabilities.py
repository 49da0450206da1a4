"""What a backend cannot honour is said by `validate` (and `plan`, `render`, `submit`),
located at the field, with nothing submitted: never dropped silently, never first refused
by `submit`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stratctl.core import capabilities
from stratctl.core.capabilities import BACKENDS, CAPABILITIES, EVERYWHERE, FIELDS, JUDGED_APART
from stratctl.core.spec import Checkpoint, Retries, Strategy, Study, Task, Throttle, TrialSpec
from stratctl.errors import ExitCode
from tests.unit.cli.test_cli import run
from tests.unit.studies import problems, write

SLURM = """\
name: sweep
backend: slurm
slurm: {partition: research}
space:
  lr: {type: choice, values: [0.1, 0.01]}
strategy: {kind: grid}
trial:
  command: ["python", "train.py", "--lr={{ params.lr }}"]
  resources: {requests: {cpu: 2, memory: 4Gi}, limits: {nvidia.com/gpu: 1}}
  tasks: [{name: worker, replicas: 2}]
"""
YARN = SLURM.replace("backend: slurm\nslurm: {partition: research}", "backend: yarn\nyarn: {queue: research}")
KUBERNETES = SLURM.replace("backend: slurm\nslurm: {partition: research}\n", "").replace(
    '  command: ["python", "train.py", "--lr={{ params.lr }}"]', '  image: busybox\n  args: ["--lr={{ params.lr }}"]'
)
BACKENDS_PAGE = Path(__file__).parents[3] / "docs" / "backends" / "index.md"


def test_every_field_of_the_study_is_judged_for_every_backend():
    """A field added to the study models is one line in FIELDS (or EVERYWHERE): until then
    this fails, so no backend drops it without a word."""
    judged = {f.path for f in FIELDS} | set(EVERYWHERE) | set(JUDGED_APART)
    models = {
        "": Study,
        "trial.": TrialSpec,
        "trial.tasks.*.": Task,
        "checkpoint.": Checkpoint,
        "retries.": Retries,
        "throttle.": Throttle,
        "strategy.": Strategy,
    }
    unjudged = [
        prefix + name
        for prefix, model in models.items()
        for name in model.model_fields
        if prefix + name not in judged and prefix + name + "." not in models and (prefix + name != "trial.tasks")
    ]
    assert unjudged == []
    assert len(judged) == len(FIELDS) + len(EVERYWHERE) + len(JUDGED_APART)  # each judged once
    assert set(CAPABILITIES) == set(BACKENDS)


@pytest.mark.parametrize(
    "text, old, new, where, words",
    [
        (
            SLURM,
            "  tasks:",
            "  affinity: {node: {required: {zone: [a]}}}\n  tasks:",
            "10:13",
            "trial.affinity: backend slurm "
            "cannot honour node affinity (each attempt is one sbatch job run on the nodes): it would be dropped; use "
            "slurm.constraint (node features), or use backend kubernetes",
        ),
        (
            SLURM,
            "  tasks:",
            "  topology_spread_constraints: [{maxSkew: 1, topologyKey: zone}]\n  tasks:",
            "10:32",
            "trial.topology_spread_constraints: backend slurm cannot honour topology spread constraints",
        ),
        (
            SLURM,
            "  tasks:",
            "  node_selector: {gpu: a100}\n  tasks:",
            "10:18",
            "trial.node_selector: backend slurm cannot honour a node selector",
        ),
        (
            SLURM,
            "  tasks:",
            "  tolerations: [{key: gpu, operator: Exists}]\n  tasks:",
            "10:16",
            "trial.tolerations: backend slurm cannot honour tolerations",
        ),
        (
            SLURM,
            "cpu: 2,",
            "cpu: 2, rdma/hca: 1,",
            "9:44",
            "trial.resources.requests.rdma/hca: backend slurm cannot give "
            "a trial rdma/hca (each attempt is one sbatch job run on the nodes, asking the nodes for cpu, memory, "
            "nvidia.com/gpu only): it would be dropped; remove it, or use backend kubernetes",
        ),
        (
            SLURM,
            "cpu: 2,",
            "cpu: 2, hugepages-2Mi: 1Gi,",
            "9:49",
            "trial.resources.requests.hugepages-2Mi: backend slurm",
        ),
        (
            SLURM,
            "replicas: 2}",
            "replicas: 2, resources: {limits: {amd.com/gpu: 1}}}",
            "10:73",
            "trial.tasks.0.resources.limits.amd.com/gpu: backend slurm cannot give a trial amd.com/gpu",
        ),
        (
            SLURM,
            "  command:",
            "  image: pytorch/pytorch\n  command:",
            "8:10",
            "trial.image: backend slurm cannot honour a container image",
        ),
        (
            SLURM,
            "  tasks:",
            "  volumes: [{name: data, pvc: {claim: data}}]\n  tasks:",
            "10:12",
            "trial.volumes: backend slurm",
        ),
        (
            SLURM,
            "replicas: 2}",
            "replicas: 2, min_available: 1}",
            "10:54",
            "trial.tasks.0.min_available: backend slurm starts every process of a trial together",
        ),
        (
            SLURM,
            "  tasks:",
            "  min_available: 1\n  tasks:",
            "10:18",
            "trial.min_available: backend slurm starts every process of a trial together",
        ),
        (
            SLURM,
            "name: sweep\n",
            "name: sweep\nnamespace: ml\n",
            "2:12",
            "namespace: backend slurm cannot honour a Kubernetes namespace",
        ),
        (
            SLURM,
            "name: sweep\n",
            "name: sweep\nqueue: [gpu, cpu]\n",
            "2:8",
            "queue: slurm.partition says it too: on backend slurm queue is slurm.partition "
            "(a list of them: each trial starts in the first that can run it); keep one of the two",
        ),
        (
            SLURM,
            "name: sweep\n",
            "name: sweep\ncheckpoint: {grace_seconds: 60}\n",
            "2:29",
            "checkpoint.grace_seconds: backend slurm cannot honour a grace period",
        ),
        (
            SLURM,
            "name: sweep\n",
            "name: sweep\nyarn: {queue: research}\n",
            "2:7",
            "yarn: backend slurm cannot honour "
            "YARN's options (each attempt is one sbatch job run on the nodes): it would be dropped; remove it",
        ),
        (
            YARN,
            "  tasks:",
            "  affinity: {node: {required: {zone: [a]}}}\n  tasks:",
            "10:13",
            "trial.affinity: backend "
            "yarn cannot honour node affinity (each attempt is one YARN application run on the nodes): it would be "
            "dropped; use yarn.node_label, or use backend kubernetes",
        ),
        (
            YARN,
            "  tasks:",
            "  topology_spread_constraints: [{maxSkew: 1}]\n  tasks:",
            "10:32",
            "trial."
            "topology_spread_constraints: backend yarn cannot honour topology spread constraints (each attempt is one "
            "YARN application run on the nodes): it would be dropped; use yarn.placement: spread",
        ),
        (
            YARN,
            "cpu: 2,",
            "cpu: 2, hugepages-1Gi: 2Gi,",
            "9:49",
            "trial.resources.requests.hugepages-1Gi: backend yarn",
        ),
        (
            YARN,
            "  tasks:",
            "  labels: {team: a}\n  tasks:",
            "10:11",
            "trial.labels: backend yarn cannot honour pod labels "
            "(each attempt is one YARN application run on the nodes): it would be dropped; use yarn.tags",
        ),
        (
            YARN,
            "name: sweep\n",
            "name: sweep\nslurm: {partition: a}\n",
            "2:8",
            "slurm: backend yarn cannot honour Slurm's options",
        ),
        (
            KUBERNETES,
            "name: sweep\n",
            "name: sweep\nworkload: batch\n",
            "8:13",
            "trial.policies: backend "
            "kubernetes-batch cannot honour Volcano lifecycle policies (each attempt is a batch/v1 Job ganged by a "
            "Volcano "
            "PodGroup): it would be dropped; remove it, or use backend kubernetes with workload volcano",
        ),
        (
            KUBERNETES,
            "name: sweep\n",
            "name: sweep\nyarn: {queue: research}\n",
            "2:7",
            "yarn: backend kubernetes-volcano cannot honour YARN's options",
        ),
        (
            SLURM,
            "replicas: 2}",
            "replicas: 2, node_selector: {disk: ssd}}",
            "10:54",
            "trial.tasks.0.node_selector: "
            "backend slurm cannot honour a node selector (each attempt is one sbatch job run on the nodes): it would "
            "be "
            "dropped; use slurm.constraint (node features), or use backend kubernetes",
        ),
        (
            YARN,
            "replicas: 2}",
            "replicas: 2, tolerations: [{key: gpu}]}",
            "10:52",
            "trial.tasks.0.tolerations: backend yarn cannot honour tolerations",
        ),
        (
            KUBERNETES,
            "name: sweep\n",
            "name: sweep\nworkload: batch\n",
            "11:15",
            "trial.tasks.0.policies: backend kubernetes-batch cannot honour Volcano lifecycle policies",
        ),
    ],
    ids=[
        "slurm-affinity",
        "slurm-spread",
        "slurm-node-selector",
        "slurm-tolerations",
        "slurm-rdma",
        "slurm-hugepages",
        "slurm-task-resource",
        "slurm-image",
        "slurm-volumes",
        "slurm-task-gang",
        "slurm-trial-gang",
        "slurm-namespace",
        "slurm-queue",
        "slurm-grace",
        "slurm-yarn-block",
        "yarn-affinity",
        "yarn-spread",
        "yarn-hugepages",
        "yarn-labels",
        "yarn-slurm-block",
        "batch-policies",
        "kubernetes-yarn-block",
        "slurm-task-node-selector",
        "yarn-task-tolerations",
        "batch-task-policies",
    ],
)
def test_validate_says_what_the_backend_would_drop_or_refuse_at_the_field(tmp_path, text, old, new, where, words):
    if words.startswith("trial.policies"):  # a Volcano study's lifecycle policies, then the workload changed
        text = text.replace(
            "  image: busybox", "  image: busybox\n  policies: [{event: PodEvicted, action: RestartJob}]"
        )
    if words.startswith("trial.tasks.0.policies"):  # a task's
        text = text.replace(
            "replicas: 2}", "replicas: 2,\n    policies: [{event: TaskCompleted, action: CompleteJob}]}"
        )
    assert text.count(old) == 1, old
    study = write(tmp_path, text.replace(old, new))
    result = run("validate", study)
    assert result.exit_code == ExitCode.INVALID_INPUT == 2
    assert result.stdout == ""
    assert f"{study}:{where}: {words}" in result.stderr, result.stderr


def test_a_list_of_queues_is_a_list_of_partitions_on_slurm(tmp_path):
    """Queue fallback on Slurm: `queue: [a, b]` is honoured (as the partitions), instead of
    slurm.partition."""
    text = SLURM.replace("slurm: {partition: research}", "queue: [edge, research]\nslurm: {time_limit: 5m}")
    assert run("validate", write(tmp_path, text)).exit_code == 0


def test_a_list_of_queues_on_yarn_is_honoured_and_refused_beside_yarn_queue(tmp_path):
    """Queue fallback on YARN: the study's queues, its applications moved on past the bound."""
    listed = YARN.replace("yarn: {queue: research}", "queue: [prod, research]")
    assert run("validate", write(tmp_path, listed)).exit_code == 0
    both = YARN.replace("yarn: {queue: research}", "queue: [prod, research]\nyarn: {queue: research}")
    [found] = problems(tmp_path, both)
    assert found.startswith("study.yaml:3:8: queue: yarn.queue says it too: on backend yarn queue is yarn.queue")


def test_the_studies_as_given_are_valid(tmp_path):
    for text in (SLURM, YARN, KUBERNETES, KUBERNETES.replace("name: sweep\n", "name: sweep\nworkload: batch\n")):
        result = run("validate", write(tmp_path, text))
        assert result.exit_code == 0, result.stderr


def test_every_problem_of_the_backend_is_said_at_once_in_file_order(tmp_path):
    text = SLURM.replace("name: sweep\n", "name: sweep\nnamespace: ml\npriority_class: high\n").replace(
        "  tasks:", "  node_selector: {gpu: a100}\n  tolerations: [{key: gpu}]\n  tasks:"
    )
    found = problems(tmp_path, text)
    assert [p.split(": ", 2)[0:2] for p in found] == [
        ["study.yaml:2:12", "namespace"],
        ["study.yaml:3:17", "priority_class"],
        ["study.yaml:12:18", "trial.node_selector"],
        ["study.yaml:13:16", "trial.tolerations"],
    ]
    assert "use slurm.qos" in found[1]


def test_a_default_written_out_or_a_whole_gang_is_no_problem(tmp_path):
    """What changes nothing on the backend is not refused: the default value written out,
    min_available equal to the replicas, a resource the nodes give."""
    text = (
        SLURM.replace(
            "name: sweep\n",
            "name: sweep\nnamespace: default\nworkload: volcano\nqueue: default\n"
            "throttle: {yield_to_higher_priority: true}\n",
        )
        .replace("replicas: 2}", "replicas: 2, min_available: 2}")
        .replace("  tasks:", "  node_selector: {}\n  tasks:")
    )
    assert run("validate", write(tmp_path, text)).exit_code == 0


@pytest.mark.parametrize("command", [["plan"], ["render"], ["submit"], ["submit", "--dry-run", "client"]])
def test_every_command_that_loads_the_study_refuses_it_before_anything_is_sent(tmp_path, monkeypatch, command):
    sent = _record_sends(monkeypatch)
    study = write(tmp_path, SLURM.replace("  tasks:", "  affinity: {node: {required: {zone: [a]}}}\n  tasks:"))
    monkeypatch.chdir(tmp_path)
    result = run(command[0], study, *command[1:])
    assert result.exit_code == 2
    assert f"{study}:10:13: trial.affinity: backend slurm cannot honour node affinity" in result.stderr
    assert result.stdout == "" and sent == [] and not (tmp_path / "stratctl-out").exists()


@pytest.mark.parametrize("backend", ["slurm", "yarn"])
@pytest.mark.parametrize(
    "options, named",
    [
        (["--move-waiting"], "--move-waiting"),
        (["--dry-run", "server"], "--dry-run=server"),
        (["--prometheus-url", "http://prom:9090"], "--prometheus-url"),
        (["--move-waiting", "--dry-run", "server"], "--move-waiting, --dry-run=server"),
    ],
)
def test_submit_options_a_batch_scheduler_cannot_honour_are_refused_by_name(
    tmp_path, monkeypatch, backend, options, named
):
    sent = _record_sends(monkeypatch)
    monkeypatch.chdir(tmp_path)
    result = run("submit", write(tmp_path, SLURM if backend == "slurm" else YARN), *options)
    assert result.exit_code == ExitCode.INVALID_INPUT == 2
    runs = "one sbatch job" if backend == "slurm" else "one YARN application"
    # one option alone: its own reason (--move-waiting: why there is nothing to move)
    why = {
        "--move-waiting": "asks for all of them at once" if backend == "slurm" else "moves its waiting applications",
        "--dry-run=server": "--dry-run client builds every",
        "--prometheus-url": "etcd's and the Volcano scheduler's latencies",
    }.get(named, rf"each attempt is {runs} run on the nodes")
    assert re.fullmatch(
        rf"error: {re.escape(named)}: backend {backend} does not support (this option|these options) "
        rf"\(.*{why}.*\); nothing was submitted\n",
        result.stderr,
    ), result.stderr
    assert sent == [] and not (tmp_path / "stratctl-out").exists()


@pytest.mark.parametrize("backend", ["slurm", "yarn"])
@pytest.mark.parametrize("kind", ["tpe", "cmaes", "nsga2"])  # gp: its torch extra
def test_a_closed_loop_search_with_a_pruner_is_valid_on_a_batch_scheduler(tmp_path, backend, kind):
    text = (SLURM if backend == "slurm" else YARN).replace(
        "strategy: {kind: grid}",
        f"strategy: {{kind: {kind}, trials: 4}}\nobjective: {{metric: loss}}\npruner: {{kind: median}}",
    )
    assert text.count("pruner:") == 1
    result = run("validate", write(tmp_path, text))
    assert result.exit_code == 0, result.stderr


def test_the_options_are_honoured_on_kubernetes():
    for backend in capabilities.KUBERNETES:
        assert CAPABILITIES[backend].options == set(capabilities.OPTIONS)


def test_the_backends_page_lists_every_judged_field_with_its_support_on_each_backend():
    rows = {}
    for line in BACKENDS_PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = [c.split(":")[0].split(" (")[0] for c in cells[1:]]
    for entry in FIELDS:
        assert rows.get(entry.path) == ["yes" if b in entry.honoured_by else "no" for b in BACKENDS], entry.path
    for path in EVERYWHERE:
        assert rows.get(path) == ["yes"] * 4, path


def _record_sends(monkeypatch) -> list:
    """Every command run for Slurm and every YARN request that would create something."""
    from stratctl.backends.slurm.commands import Slurm
    from stratctl.backends.yarn.rest import ResourceManager

    sent: list = []
    monkeypatch.setattr(Slurm, "_run", lambda self, argv, stdin=None: sent.append(argv) or "")
    monkeypatch.setattr(ResourceManager, "new_application", lambda self: sent.append("new-application") or "a_1_1")
    monkeypatch.setattr(ResourceManager, "submit", lambda self, body: sent.append(body))
    return sent


def test_an_environment_value_the_cluster_fills_in_is_refused_where_only_literals_are_passed(tmp_path):
    """Slurm and YARN pass a task's literal environment (core/task.py); a value the cluster
    would fill in (Kubernetes' downward API) would be dropped there."""
    from tests.unit.studies import load

    study = load(tmp_path, SLURM.replace('"--lr={{ params.lr }}"]', '"--lr={{ params.lr }}"]\n  env: {POD: x}'))
    trial = study.trial.model_copy(update={"env": {"POD": {"field_ref": "metadata.name"}}})
    [problem] = capabilities.problems(study.model_copy(update={"trial": trial}))
    assert str(problem) == (
        f"{study.file}:9:14: trial.env.POD: backend slurm cannot give POD a value from the cluster "
        "(each attempt is one sbatch job run on the nodes, its environment literal strings only): "
        "it would be dropped; give a value, or use backend kubernetes"
    )
    assert capabilities.problems(study) == []


@pytest.mark.parametrize("backend", ["slurm", "yarn"])
def test_a_slurm_partition_or_yarn_queue_name_may_hold_what_a_dns_label_may_not(tmp_path, backend):
    from tests.unit.studies import load, problems

    base = SLURM if backend == "slurm" else YARN
    block = "slurm: {partition: research}\n" if backend == "slurm" else "yarn: {queue: research}\n"
    text = base.replace(block, "").replace("name: sweep\n", "name: sweep\nqueue: [gpu_A100, cpu.long]\n")
    assert "queue: [gpu_A100, cpu.long]" in text and block not in text
    assert load(tmp_path, text).queues == ("gpu_A100", "cpu.long")
    assert problems(tmp_path, text.replace("cpu.long", "'a,b'")) == [
        "study.yaml:2:19: queue.1: queue 'a,b' is not a partition or queue name (letters, digits, '_', '-' "
        "and '.', starting with a letter, digit or '_')"
    ]
