"""An attempt's YARN application: its tags, the gang the AM reads from its environment
(roles in task order, each its own containers' size and script, the trial's rendezvous
port), the REST submission body, and the task script, run for real by bash with hostile
values."""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest

from stratctl import rendezvous
from stratctl.backends.yarn.app import Jar, build, master_port, parse_tags
from stratctl.core.render import bundled_templates
from stratctl.core.space import expand
from tests.unit.rendering import Renderer
from tests.unit.studies import load, problems

STUDY = """\
name: sweep
backend: yarn
yarn: {resource_managers: ["http://rm1:8088", "http://rm2:8088/"], queue: research, tags: [team-a], placement: spread,
       gang_timeout: 2m, max_app_attempts: 3}
checkpoint: {location: "/ckpt/{{ study }}/{{ trial }}"}
space:
  lr: {type: choice, values: [0.1, "x\\"; rm -rf / #\\n$(id)"]}
strategy: {kind: grid}
trial:
  command: ["python", "train.py", "--lr={{ params.lr }}"]
  resources: {requests: {cpu: 2, memory: 4Gi}, limits: {nvidia.com/gpu: 1}}
  tasks: [{name: worker, replicas: 2}]
"""


def apps(tmp_path, text=STUDY, attempt=0):
    study = load(tmp_path, text)
    renderer = Renderer(study)
    return study, [
        build(
            study,
            renderer.render(t, attempt=attempt, resume=attempt > 0),
            [bundled_templates()],
            tmp_path / "out" / study.name,
        )
        for t in expand(study)
    ]


def test_the_application_names_the_attempt_and_carries_the_gang(tmp_path):
    study, (app, other) = apps(tmp_path)
    assert study.yarn.resource_managers == ["http://rm1:8088", "http://rm2:8088"]
    assert app.tasks == 2 and app.gpus == 2
    tags = parse_tags(",".join(app.tags))
    assert tags["study"] == "sweep" and tags["trial"] == app.trial and tags["n"] == "0"
    assert app.tag in app.tags and app.tag != other.tag and "team-a" in app.tags
    env = app.environment
    assert env["STRATCTL_AM_ROLES"] == "worker:2"
    assert env["STRATCTL_AM_RESOURCES_0"] == "memory-mb=4096,vcores=2,yarn.io/gpu=1"
    assert env["STRATCTL_AM_PLACEMENT"] == "spread" and env["STRATCTL_AM_PLACEMENT_SCOPE"] == "node"
    assert env["STRATCTL_AM_GANG_TIMEOUT"] == "120"
    assert base64.b64decode(env["STRATCTL_AM_SCRIPT_0"]).decode() == app.roles[0].script
    assert all(k.startswith("STRATCTL_AM_") for k in env)  # the AM's own: none is passed on to a container
    jar = Jar("file:///opt/am.jar", 1234, 1796467261608)
    body = app.body("application_1_0007", study, jar, ["/etc/hadoop", "/lib/*"])
    assert body["application-id"] == "application_1_0007" and body["queue"] == "research"
    assert body["application-type"] == "STRATCTL" and body["max-app-attempts"] == 3
    assert body["application-tags"] == {"tag": app.tags}
    spec = body["am-container-spec"]
    assert spec["local-resources"]["entry"][0]["value"] == {
        "resource": "file:///opt/am.jar",
        "type": "FILE",
        "visibility": "APPLICATION",
        "size": 1234,
        "timestamp": 1796467261608,
    }
    command = spec["commands"]["command"]
    assert '"' not in command and "$" not in command  # the NodeManager pastes it into bash -c "..." unescaped
    environment = {e["key"]: e["value"] for e in spec["environment"]["entry"]}
    assert environment["CLASSPATH"] == "./*:/etc/hadoop:/lib/*"
    # the trial's port: derived from the application's sequence number, as on Slurm from the job id
    assert environment["STRATCTL_AM_MASTER_PORT"] == str(rendezvous.derived_port(7)) == "20007"
    assert all(not set(v) & set('"\\`') for k, v in environment.items() if k != "CLASSPATH")


def test_a_later_attempt_is_another_application_of_the_same_trial(tmp_path):
    _, (zero, _) = apps(tmp_path)
    _, (two, _) = apps(tmp_path, attempt=2)
    assert zero.trial == two.trial and two.attempt == 2 and zero.tag != two.tag
    assert parse_tags(two.tags)["n"] == "2"


@pytest.mark.parametrize("restarted, resume", [(None, "0"), ("1", "1")])
def test_the_task_script_runs_the_command_with_hostile_values_as_plain_words(tmp_path, restarted, resume):
    _, (_, hostile) = apps(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items() "
        "if k.startswith('STRATCTL_')}}))\n"
    )
    python.chmod(0o755)
    script = tmp_path / "task.sh"
    script.write_text(hostile.roles[0].script)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **({"STRATCTL_YARN_RESTARTED": restarted} if restarted else {})}
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert ran["argv"] == ["train.py", '--lr=x"; rm -rf / #\n$(id)']
    assert ran["env"]["STRATCTL_RESUME"] == resume
    assert ran["env"]["STRATCTL_CHECKPOINT_DIR"] == f"/ckpt/sweep/{hostile.trial}"
    assert ran["env"]["STRATCTL_OUTPUT_DIR"] == str(tmp_path / "out" / "sweep" / hostile.trial)


ROLES = STUDY.replace(
    """  resources: {requests: {cpu: 2, memory: 4Gi}, limits: {nvidia.com/gpu: 1}}
  tasks: [{name: worker, replicas: 2}]
""",
    """  resources: {requests: {cpu: 2, memory: 4Gi}, limits: {nvidia.com/gpu: 1}}
  env: {MASTER_PORT: "1234", RANK: "9", LOG_LEVEL: debug}
  tasks:
    - name: ps
      command: ["python", "ps.py"]
      resources: {requests: {cpu: 1, memory: 512Mi}}
    - name: param-worker
      replicas: 3
    - name: evaluator
      command: ["python", "eval.py", "--lr={{ params.lr }}"]
      resources: {requests: {cpu: 1, memory: 1Gi}, limits: {nvidia.com/gpu: 2}}
""",
)


def test_each_task_is_a_role_of_its_own_size_command_and_count_in_task_order(tmp_path):
    """What the AM gets for a trial of 3 roles: their names and counts in task order (the
    order of the ranks), each role's container size and script (its own command)."""
    _, (app, _) = apps(tmp_path, ROLES)
    assert [(r.name, r.replicas, r.gpus) for r in app.roles] == [
        ("ps", 1, 0),
        ("param-worker", 3, 1),
        ("evaluator", 1, 2),
    ]
    assert app.tasks == 5 and app.gpus == 5
    env = app.environment
    assert env["STRATCTL_AM_ROLES"] == "ps:1,param-worker:3,evaluator:1"
    assert [env[f"STRATCTL_AM_RESOURCES_{i}"] for i in range(3)] == [
        "memory-mb=512,vcores=1",
        "memory-mb=4096,vcores=2,yarn.io/gpu=1",
        "memory-mb=1024,vcores=1,yarn.io/gpu=2",
    ]
    scripts = [base64.b64decode(env[f"STRATCTL_AM_SCRIPT_{i}"]).decode() for i in range(3)]
    assert scripts == [r.script for r in app.roles]
    assert "exec python ps.py\n" in scripts[0] and "exec python train.py --lr=0.1\n" in scripts[1]
    assert "exec python eval.py --lr=0.1\n" in scripts[2]
    for script in scripts:  # every role's script: the same trial, the same output directory
        assert f"export STRATCTL_TRIAL={app.trial}\n" in script and "export LOG_LEVEL=debug" in script
        # the contract is the AM's to set: a rendered value must not override it in the script
        assert "MASTER_PORT" not in script and "RANK" not in script
    assert not {"STRATCTL_AM_SCRIPT_3", "STRATCTL_AM_RESOURCES_3"} & set(env)


def test_the_port_is_the_applications_sequence_number_past_the_base():
    assert master_port("application_1796472482776_0001") == 20001
    assert master_port("application_1796472482776_20003") == 20003  # wraps within the span
    assert master_port("application_1_0042") != master_port("application_1_0043")


def test_a_yarn_study_needs_a_command_for_every_task(tmp_path):
    no_command = STUDY.replace('  command: ["python", "train.py", "--lr={{ params.lr }}"]\n', '  args: ["--lr=1"]\n')
    assert any("set trial.command" in p and "backend yarn" in p for p in problems(tmp_path, no_command))
    two = no_command.replace("tasks: [{name: worker, replicas: 2}]", 'tasks: [{name: a, command: ["x"]}, {name: b}]')
    found = problems(tmp_path, two)
    assert any("study.yaml:12:38:" in p and "trial.tasks.1:" in p and "command of task 'b'" in p for p in found), found


@pytest.mark.parametrize(
    "field, value",
    [
        ("node_selector", "{disk: ssd}"),
        ("tolerations", "[{key: gpu, operator: Exists}]"),
        ("affinity", "{node: {required: {zone: [a]}}}"),
        ("policies", "[{event: TaskCompleted, action: CompleteJob}]"),
        ("min_available", "1"),
    ],
)
def test_what_a_yarn_task_cannot_have_is_a_located_error(tmp_path, field, value):
    """YARN places a trial's containers by yarn.node_label and yarn.placement alone, starts
    them all together and ends the trial when all have ended: per-task placement, policies,
    or replicas left out of the gang, are refused at validate, at the task's field."""
    from stratctl.core.spec import Task

    assert field in Task.model_fields
    text = STUDY.replace(
        "tasks: [{name: worker, replicas: 2}]",
        f"tasks: [{{name: ps}}, {{name: worker, replicas: 2, {field}: {value}}}]",
    )
    found = problems(tmp_path, text)
    assert any("study.yaml:12:" in p and f"trial.tasks.1.{field}" in p and "yarn" in p for p in found), found


@pytest.mark.parametrize(
    "block, field, words",
    [
        ("{resource_managers: [rm1:8088]}", "yarn.resource_managers.0", "web address"),
        ("{resource_managers: []}", "yarn.resource_managers", "at least one value"),
        ("{tags: [stratctl-x]}", "yarn.tags.0", "set by stratctl"),
        ('{tags: ["a,b"]}', "yarn.tags.0", "without a comma"),
        ("{placement: everywhere}", "yarn.placement", "'any', 'spread' or 'pack'"),
        ("{gang_timeout: soon}", "yarn.gang_timeout", ""),
        ("{max_app_attempts: 0}", "yarn.max_app_attempts", "must be at least 1"),
        ("{colour: blue}", "in yarn", "unknown key 'colour'"),
    ],
)
def test_a_bad_yarn_block_is_a_located_error(tmp_path, block, field, words):
    text = STUDY.replace(STUDY.split("\n")[2] + "\n" + STUDY.split("\n")[3], f"yarn: {block}")
    found = problems(tmp_path, text)
    assert found and all("study.yaml:3:" in p for p in found), found
    assert any(field in p and words in p for p in found), found


def test_a_study_listing_queues_submits_each_application_to_the_first(tmp_path):
    text = STUDY.replace("queue: research, tags", "tags").replace(
        "name: sweep\n", "name: sweep\nqueue: [edge, research]\n"
    )
    study, (app, _) = apps(tmp_path, text)
    body = app.body("application_1_0007", study, Jar("file:///opt/am.jar", 1, 1), [])
    assert body["queue"] == "edge"  # the loop moves it on to research if it waits there past the bound
