"""Rendering trials into manifests: golden files, the label contract, the sandbox."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from stratctl import labels, rendezvous
from stratctl.core.render import min_resources, spec_hash
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import StudyError
from stratctl.view.yamlout import dump_all
from tests.unit.rendering import Renderer, validate
from tests.unit.studies import MINIMAL, load, write

GOLDEN = Path(__file__).parents[1] / "golden"
EXAMPLES = Path(__file__).parents[3] / "examples"
UPDATE = os.environ.get("STRATCTL_UPDATE_GOLDEN") == "1"  # regenerate: STRATCTL_UPDATE_GOLDEN=1 pytest ...
CONTRACT = {
    rendezvous.NUM_NODES,
    rendezvous.NODE_RANK,
    rendezvous.NODE_ADDRS,
    rendezvous.TASK,
    rendezvous.TASK_INDEX,
    rendezvous.TASKS,
    rendezvous.hosts_var("worker"),
    rendezvous.num_var("worker"),
}


def _golden(name: str, docs: list[dict]) -> None:
    path = GOLDEN / name
    text = dump_all(docs)
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"golden file {path} is missing; write it with STRATCTL_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} changed; if intended, rerun with STRATCTL_UPDATE_GOLDEN=1"


@pytest.mark.parametrize(
    ("study", "attempt", "resume"), [("volcano", 0, False), ("volcano", 2, True), ("batch", 0, False)]
)
def test_golden_manifests(study, attempt, resume):
    s = load_study(GOLDEN / f"{study}.study.yaml")
    trial = expand(s)[3]
    _golden(f"{study}-trial3-attempt{attempt}.yaml", Renderer(s).render(trial, attempt=attempt, resume=resume))


def _volcano(tmp_path, text=MINIMAL):
    study = load(tmp_path, text)
    trials = expand(study)
    return study, trials, Renderer(study)


def test_volcano_job_is_complete_without_the_admission_webhook():
    study = load_study(GOLDEN / "volcano.study.yaml")
    [job] = Renderer(study).render(expand(study)[0])
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    spec = job["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["minAvailable"] == 7 == study.gang_size
    assert spec["queue"] == "rl-research"
    assert spec["priorityClassName"] == "rl-low"
    assert spec["maxRetry"] == 5
    assert spec["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "RestartJob"},
        {"exitCode": 3, "action": "AbortJob"},
    ]
    assert [(t["name"], t["replicas"], t["minAvailable"]) for t in spec["tasks"]] == [
        ("learner", 4, 4),
        ("ps", 2, 2),
        ("evaluator", 1, 1),
    ]
    pod = spec["tasks"][0]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["priorityClassName"] == "rl-low"
    assert pod["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    tsc = pod["topologySpreadConstraints"][0]
    assert tsc["labelSelector"]["matchLabels"][labels.TRIAL] == job["metadata"]["labels"][labels.TRIAL]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}


def test_default_policies_restart_on_eviction(tmp_path):
    _, trials, r = _volcano(tmp_path)
    [job] = r.render(trials[0])
    assert job["spec"]["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "AbortJob"},
    ]
    assert "priorityClassName" not in job["spec"]


def test_every_object_and_pod_carries_the_label_contract(tmp_path):
    study, trials, r = _volcano(
        tmp_path,
        MINIMAL.replace("name: tiny", "name: tiny\ncritical: true")
        + "checkpoint: {location: 's3://b/{{ study }}/{{ trial }}'}\n",
    )
    trial = trials[2]
    docs = r.render(trial, attempt=3, resume=True)
    job = docs[0]
    pods = [t["template"] for t in job["spec"]["tasks"]]
    for meta in [job["metadata"]] + [p["metadata"] for p in pods]:
        assert meta["labels"][labels.STUDY] == "tiny"
        assert meta["labels"][labels.TRIAL] == trial.name
        assert meta["labels"][labels.ATTEMPT] == "3"
        assert meta["labels"][labels.CRITICAL] == "true"
        assert meta["labels"][labels.MANAGED_BY] == "stratctl"
        assert meta["labels"][labels.SPEC_HASH] == spec_hash(docs)
        assert json.loads(meta["annotations"][labels.PARAMS]) == dict(trial.params)
        assert meta["annotations"][labels.TRIAL_INDEX] == "2"
        assert meta["annotations"][labels.CHECKPOINT] == f"s3://b/tiny/{trial.name}"
    assert job["metadata"]["name"] == f"{trial.name}-a3"
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    stratctls = {k: v for k, v in env.items() if k.startswith("STRATCTL_") and k not in CONTRACT}
    assert stratctls == {
        labels.ENV_STUDY: "tiny",
        labels.ENV_TRIAL: trial.name,
        labels.ENV_ATTEMPT: "3",
        labels.ENV_CHECKPOINT: f"s3://b/tiny/{trial.name}",
        labels.ENV_RESUME: "1",
        labels.ENV_PARAMS: json.dumps(dict(trial.params), sort_keys=True, separators=(",", ":")),
    }
    assert CONTRACT <= set(env)  # and the rendezvous contract (backends/kubernetes/test_rendezvous.py)
    assert r.render(trial, attempt=3)[0]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"][4] == {
        "name": labels.ENV_RESUME,
        "value": "0",
    }


def test_parameters_are_substituted_in_args_env_and_annotations():
    study = load_study(EXAMPLES / "demo.yaml")
    trial = expand(study)[0]
    [job] = Renderer(study).render(trial)
    pod = job["spec"]["tasks"][0]["template"]
    assert pod["metadata"]["annotations"]["testbed.stratctl.io/run-duration"] == f"{trial.params['run_seconds']}s"
    container = pod["spec"]["containers"][0]
    assert f"lr={trial.params['lr']}" in container["args"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BATCH_SIZE"] == str(trial.params["batch_size"])


def test_batch_workload_is_a_podgroup_and_a_ganged_job():
    study = load_study(GOLDEN / "batch.study.yaml")
    trial = expand(study)[0]
    group, job, service = Renderer(study).render(trial)
    assert (group["apiVersion"], group["kind"]) == ("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert group["spec"] == {
        "minMember": 3,
        "queue": "default",
        "priorityClassName": "eval-low",
        "minResources": {"nvidia.com/gpu": "3", "cpu": "6", "memory": "12Gi"},
    }
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group["metadata"]["name"] == trial.name
    assert pod["spec"]["schedulerName"] == "volcano"
    assert group["metadata"]["labels"][labels.SPEC_HASH] == job["metadata"]["labels"][labels.SPEC_HASH]
    # Indexed, under the headless Service the Job owns (backends/kubernetes/test_rendezvous.py)
    assert job["spec"]["completionMode"] == "Indexed" and pod["spec"]["subdomain"] == trial.name
    assert (service["kind"], service["metadata"]["name"]) == ("Service", trial.name)
    assert service["metadata"]["labels"][labels.SPEC_HASH] == job["metadata"]["labels"][labels.SPEC_HASH]


def test_min_resources_sums_the_gang(tmp_path):
    study = load(
        tmp_path,
        MINIMAL.replace(
            "resources: {limits: {nvidia.com/gpu: 1}}",
            "resources: {requests: {cpu: 500m, memory: 1536Mi}, limits: {nvidia.com/gpu: 1}}",
        ),
    )
    assert min_resources(study) == {"nvidia.com/gpu": "2", "cpu": "1", "memory": "3Gi"}


def test_spec_hash_is_stable_and_tracks_content(tmp_path):
    study, trials, r = _volcano(tmp_path)
    a = r.render(trials[0])
    assert a == Renderer(study).render(trials[0])  # a new renderer, same manifests
    h = a[0]["metadata"]["labels"][labels.SPEC_HASH]
    assert spec_hash(a) == h
    assert r.render(trials[0], attempt=1)[0]["metadata"]["labels"][labels.SPEC_HASH] != h
    assert r.render(trials[1])[0]["metadata"]["labels"][labels.SPEC_HASH] != h
    edited = json.loads(json.dumps(a))
    edited[0]["spec"]["queue"] = "other"
    assert spec_hash(edited) != h


def test_render_is_pure(tmp_path):
    _, trials, r = _volcano(tmp_path)
    first = r.render(trials[0])
    first[0]["metadata"]["labels"]["mutated"] = "yes"
    assert "mutated" not in r.render(trials[0])[0]["metadata"]["labels"]


def _custom(tmp_path, template: str, study_extra: str = "") -> Path:
    (tmp_path / "tpl").mkdir(exist_ok=True)
    (tmp_path / "tpl" / "job.yaml.j2").write_text(template)
    return write(tmp_path, MINIMAL + "  template: job.yaml.j2\ntemplates_dir: tpl\n" + study_extra)


PER_TRIAL_TEMPLATE = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {{ job }}
  namespace: {{ namespace }}
spec:
  schedulerName: volcano
  minAvailable: {{ gang_size }}
  queue: {{ spec.queue }}
{% if attempt > 0 %}
  maxRetry: {{ spec.retries.max_retry + attempt }}
{% endif %}
  tasks:
  - name: worker
    replicas: {{ params.bs // 8 }}
    template:
      spec:
        containers:
        - name: worker
          image: {{ tasks[0].image }}
          args: {{ tasks[0].args | tojson }}
"""


def test_user_templates_that_use_trial_values_freely_render_per_trial(tmp_path):
    study = load_study(_custom(tmp_path, PER_TRIAL_TEMPLATE))
    r = Renderer(study)
    assert r._compiled is None  # the per-trial path
    trial = expand(study)[0]
    [job] = r.render(trial, attempt=2)
    assert job["spec"]["maxRetry"] == 5
    assert job["spec"]["tasks"][0]["replicas"] == trial.params["bs"] // 8
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert container["args"] == [f"--lr={trial.params['lr']}"]
    assert container["env"][1] == {"name": labels.ENV_TRIAL, "value": trial.name}
    assert spec_hash([job]) == job["metadata"]["labels"][labels.SPEC_HASH]


def test_fast_and_per_trial_paths_agree(tmp_path):
    study = load_study(GOLDEN / "volcano.study.yaml")
    fast = Renderer(study)
    slow = Renderer(study)
    slow._compiled = None
    assert fast._compiled is not None
    for trial in expand(study)[:5]:
        for attempt, resume in [(0, False), (4, True)]:
            assert fast.render(trial, attempt, resume) == slow.render(trial, attempt, resume)


def test_undefined_variable_in_a_template_names_the_file_and_line(tmp_path):
    path = _custom(tmp_path, PER_TRIAL_TEMPLATE.replace("{{ spec.queue }}", "{{ spec.queeu }}"))
    with pytest.raises(StudyError) as e:
        validate(path)
    [p] = e.value.problems
    assert p.file.endswith("tpl/job.yaml.j2") and p.line == 9
    assert "'dict object' has no attribute 'queeu'" in p.message


def test_unknown_variable_in_a_template_is_caught_before_rendering(tmp_path):
    path = _custom(tmp_path, PER_TRIAL_TEMPLATE.replace("{{ namespace }}", "{{ nmespace }}"))
    with pytest.raises(StudyError) as e:
        Renderer(load_study(path))
    assert (
        str(e.value)
        == f"{tmp_path}/tpl/job.yaml.j2:5: unknown template variable 'nmespace' (did you mean 'namespace'?)"
    )


def test_template_file_reaching_python_internals_is_refused_unrendered(tmp_path):
    path = _custom(tmp_path, PER_TRIAL_TEMPLATE.replace("{{ job }}", "{{ job.__class__.__mro__[1].__subclasses__() }}"))
    with pytest.raises(StudyError) as e:
        Renderer(load_study(path))
    [p] = e.value.problems
    assert (p.line, p.message) == (
        4,
        "template accesses '__class__', '__mro__', '__subclasses__': private attributes are not allowed",
    )


def test_the_sandbox_stops_what_static_checks_miss(tmp_path):
    path = _custom(tmp_path, PER_TRIAL_TEMPLATE.replace("{{ job }}", "{{ job | attr('__class__') }}"))
    with pytest.raises(StudyError) as e:
        validate(path)
    [p] = e.value.problems
    assert p.line == 4
    assert p.message.startswith("rendering not allowed for trial 0 (tiny-")
    assert "access to attribute '__class__' of 'str' object is unsafe" in p.message


def test_template_symlink_escaping_the_templates_directory(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "secret.j2").write_text("kind: Secret\n")
    (tmp_path / "tpl" / "job.yaml.j2").symlink_to(tmp_path / "secret.j2")
    path = write(tmp_path, MINIMAL + "  template: job.yaml.j2\ntemplates_dir: tpl\n")
    with pytest.raises(StudyError) as e:
        Renderer(load_study(path))
    assert str(e.value).startswith(f"{path}:14:13: template 'job.yaml.j2' escapes the templates directory")


def test_missing_template(tmp_path):
    (tmp_path / "tpl").mkdir()
    path = write(tmp_path, MINIMAL + "  template: nope.yaml.j2\ntemplates_dir: tpl\n")
    with pytest.raises(StudyError, match=r"study.yaml:14:13: template 'nope.yaml.j2' not found"):
        Renderer(load_study(path))


def test_template_rendering_invalid_yaml(tmp_path):
    path = _custom(tmp_path, "kind: Job\nmetadata: {name: {{ job }}\n")
    with pytest.raises(StudyError, match="the rendered template is not valid YAML"):
        validate(path)


def test_rendered_yaml_round_trips(tmp_path):
    _, trials, r = _volcano(tmp_path)
    docs = r.render(trials[0])
    assert list(yaml.safe_load_all(dump_all(docs))) == docs


def test_every_attempt_of_a_trial_is_in_its_shard_outside_the_spec_hash(tmp_path):
    study = load(tmp_path, MINIMAL.replace("trials: 5", "trials: 40"))
    renderer = Renderer(study)
    seen = set()
    for trial in expand(study):
        first, later = renderer.render(trial), renderer.render(trial, attempt=2, resume=True)
        shard = labels.shard_of(trial.name)
        assert {d["metadata"]["labels"][labels.SHARD] for d in first + later} == {shard}
        assert first[0]["metadata"]["labels"][labels.SPEC_HASH] == spec_hash(first)
        unsharded = json.loads(json.dumps(first))
        del unsharded[0]["metadata"]["labels"][labels.SHARD]
        assert spec_hash(unsharded) == spec_hash(first)  # an attempt rendered before shards hashes the same
        seen.add(shard)
    assert seen == {str(s) for s in range(labels.SHARDS)}
