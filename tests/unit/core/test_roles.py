"""Roles on Kubernetes: each task's node selection, tolerations and Volcano policies over the
trial's, and a task that does not hold the gang, rendered for the task's pods only."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratctl.core.space import expand
from stratctl.core.spec import load_study
from tests.unit.rendering import Renderer
from tests.unit.studies import load, problems

EXAMPLES = Path(__file__).parents[3] / "examples"

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "operator": "Equal", "value": "rl", "effect": "NoSchedule"}

ROLES = """\
name: roles
namespace: ns
workload: {workload}
space:
  lr: {{type: choice, values: [0.1]}}
strategy: {{kind: grid}}
trial:
  image: busybox
  command: [train]
  node_selector: {{pool: rl, zone: a}}
  tolerations: [{{key: dedicated, operator: Equal, value: rl, effect: NoSchedule}}]
  affinity: {{node: {{preferred: {{disk: ssd}}}}}}
  tasks:
{tasks}
"""

PS_WORKERS = """\
    - name: worker
      replicas: 2
      node_selector: {gpu-type: a100, zone: b}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      affinity: {node: {required: {gpu-type: [a100, h100]}}}
      policies: [{event: TaskCompleted, action: CompleteJob}, {exit_code: 3, action: AbortJob}]
    - name: ps
      replicas: 2
      tolerations: []
    - name: logs
      min_available: 0
"""


def _pods(job: dict) -> dict[str, dict]:
    return {t["name"]: t["template"]["spec"] for t in job["spec"]["tasks"]}


def test_each_task_places_its_own_pods_over_the_trials_defaults(tmp_path):
    study = load(tmp_path, ROLES.format(workload="volcano", tasks=PS_WORKERS))
    [job] = Renderer(study).render(expand(study)[0])
    pods = _pods(job)
    # node_selector: the task's keys over the trial's
    assert pods["worker"]["nodeSelector"] == {"pool": "rl", "zone": "b", "gpu-type": "a100"}
    assert pods["ps"]["nodeSelector"] == pods["logs"]["nodeSelector"] == {"pool": "rl", "zone": "a"}
    # tolerations replace the trial's: [] is none at all; no value is the trial's
    assert pods["worker"]["tolerations"] == [GPU_TAINT]
    assert "tolerations" not in pods["ps"]
    assert pods["logs"]["tolerations"] == [DEDICATED]
    # affinity replaces the trial's
    required = pods["worker"]["affinity"]["nodeAffinity"]
    assert list(required) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100", "h100"]}]}
    ]
    assert list(pods["ps"]["affinity"]["nodeAffinity"]) == ["preferredDuringSchedulingIgnoredDuringExecution"]


def test_task_policies_are_the_tasks_own_and_the_trials_stay_on_the_job(tmp_path):
    study = load(tmp_path, ROLES.format(workload="volcano", tasks=PS_WORKERS))
    [job] = Renderer(study).render(expand(study)[0])
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert tasks["worker"]["policies"] == [
        {"event": "TaskCompleted", "action": "CompleteJob"},
        {"exitCode": 3, "action": "AbortJob"},
    ]
    assert "policies" not in tasks["ps"] and "policies" not in tasks["logs"]
    assert job["spec"]["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "AbortJob"},
    ]


def test_a_task_outside_the_gang_is_not_waited_for(tmp_path):
    study = load(tmp_path, ROLES.format(workload="volcano", tasks=PS_WORKERS))
    [job] = Renderer(study).render(expand(study)[0])
    assert [(t["name"], t["replicas"], t["minAvailable"]) for t in job["spec"]["tasks"]] == [
        ("worker", 2, 2),
        ("ps", 2, 2),
        ("logs", 1, 0),
    ]
    assert job["spec"]["minAvailable"] == 4 == study.gang_size


def test_the_batch_workloads_one_task_places_its_pods_too(tmp_path):
    one = "    - name: eval\n      replicas: 2\n      node_selector: {zone: c}\n      tolerations: []\n"
    study = load(tmp_path, ROLES.format(workload="batch", tasks=one))
    jobs = [d for d in Renderer(study).render(expand(study)[0]) if d["kind"] == "Job"]
    pod = jobs[0]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "rl", "zone": "c"}
    assert "tolerations" not in pod


def test_the_ppo_examples_cpu_pods_do_not_tolerate_the_gpu_nodes():
    study = load_study(EXAMPLES / "ppo-tuning.yaml")
    [job] = Renderer(study).render(expand(study)[0])
    pods = _pods(job)
    assert pods["learner"]["tolerations"] == [GPU_TAINT, DEDICATED]
    assert pods["ps"]["tolerations"] == pods["evaluator"]["tolerations"] == [DEDICATED]
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert tasks["learner"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]


@pytest.mark.parametrize(
    "field, value, message",
    [
        (
            "policies",
            "[{event: CommandIssued, action: AbortJob}]",
            "study.yaml:{line}:26: trial.tasks.0.policies.0.event: event 'CommandIssued' concerns the whole job, "
            "never one "
            "task's pods: give it in trial.policies",
        ),
        (
            "tolerations",
            "[{key: a, operator: Sometimes}]",
            "study.yaml:{line}:40: trial.tasks.0.tolerations.0.operator: must be one of 'Equal' or 'Exists'",
        ),
        ("node_selector", "[a]", "study.yaml:{line}:22: trial.tasks.0.node_selector: must be a mapping"),
    ],
)
def test_a_wrong_task_field_is_located_at_it(tmp_path, field, value, message):
    task = f"    - name: worker\n      {field}: {value}\n"
    found = problems(tmp_path, ROLES.format(workload="volcano", tasks=task))
    assert found == [message.format(line=15)]
