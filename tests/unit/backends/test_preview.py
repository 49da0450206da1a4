"""`stratctl render` shows what `submit` would really send: Slurm's sbatch script, YARN's
application request, Kubernetes' manifests; built offline, nothing created or sent."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from stratctl.backends.slurm.scheduler import SlurmScheduler
from stratctl.backends.slurm.script import build
from stratctl.backends.yarn.app import Jar
from stratctl.backends.yarn.scheduler import YarnScheduler
from stratctl.core.render import bundled_templates
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import ExitCode
from tests.unit.cli.test_cli import run
from tests.unit.core.test_capabilities import _record_sends
from tests.unit.studies import MINIMAL, write

EXAMPLES = Path(__file__).parents[3] / "examples"
SLURM, YARN = EXAMPLES / "slurm-sweep.yaml", EXAMPLES / "yarn-sweep.yaml"


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """In an empty directory, with every Slurm command and YARN request recorded."""
    monkeypatch.chdir(tmp_path)
    return _record_sends(monkeypatch)


def json_stream(text: str) -> list:
    """The JSON objects of a stream (as jq and kubectl read one), in order."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        doc, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        docs.append(doc)
    return docs


def scripts(path: Path, attempt: int = 0) -> list[str]:
    """The sbatch scripts the Slurm scheduler sends for every trial's attempt, into its
    study directory (as `prepare` builds them, without making the trials' directories)."""
    study = load_study(path)
    scheduler = SlurmScheduler(study)
    templates = [scheduler.renderer.dir, bundled_templates()]
    return [
        build(
            study, scheduler.renderer.render(t, attempt=attempt, resume=attempt > 0), templates, scheduler.output
        ).text
        for t in expand(study)
    ]


def test_render_of_a_slurm_study_is_the_sbatch_script_of_each_trial(tmp_path, offline):
    result = run("render", SLURM)
    assert result.exit_code == 0, result.stderr
    expected = scripts(SLURM)
    assert len(expected) == 8 and result.stdout == "".join(expected)
    assert result.stdout.count("#!/bin/bash\n") == 8 and "#SBATCH --ntasks=2\n" in result.stdout
    assert "#SBATCH --partition=research\n" in result.stdout and "apiVersion" not in result.stdout
    assert offline == [] and result.stderr == ""


def test_render_of_one_slurm_trial_attempt_as_yaml_json_or_files(tmp_path, offline):
    study = load_study(SLURM)
    trial = expand(study)[2]
    [script] = [s for s in scripts(SLURM, attempt=1) if f"--job-name={trial.name}-a1\n" in s]
    as_yaml = run("render", SLURM, "--trial", "2", "--attempt", "1", "--resume", "--format", "yaml")
    assert as_yaml.exit_code == 0, as_yaml.stderr
    [doc] = yaml.safe_load_all(as_yaml.stdout)
    assert doc == {
        "job": f"{trial.name}-a1",
        "trial": trial.name,
        "attempt": 1,
        "comment": doc["comment"],
        "tasks": 2,
        "gpus": 2,
        "script": script,
    }
    assert doc["comment"].startswith(f"stratctl:slurm-sweep/{trial.name}/1/")
    assert "script: |\n  #!/bin/bash\n" in as_yaml.stdout  # the script's lines as they are
    as_json = run("render", SLURM, "--trial", trial.name, "--attempt", "1", "--resume", "--format", "json")
    assert json.loads(as_json.stdout) == doc
    out = tmp_path / "out"
    written = run("render", SLURM, "-o", out, "--trial", "2", "--trial", "3")
    assert written.exit_code == 0 and written.stderr == f"wrote 2 files to {out}\n"
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(f"{t.name}.sh" for t in expand(study)[2:4])
    assert (out / f"{trial.name}.sh").read_text() in scripts(SLURM)
    assert offline == [] and not (EXAMPLES / "stratctl-out").exists()  # render makes no trial directory


def test_render_of_a_yarn_study_is_the_application_request_with_the_id_a_placeholder(tmp_path, offline, monkeypatch):
    jar = tmp_path / "am.jar"
    jar.write_bytes(b"jar")
    monkeypatch.setenv("STRATCTL_YARN_AM_JAR", str(jar))
    result = run("render", YARN, "--trial", "0")
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    # what the YARN scheduler would send for that trial once the ResourceManager gave it an id
    study = load_study(YARN)
    sent = (
        YarnScheduler(study)
        ._build(expand(study)[0], 0)
        .body("application_1796_0042", study, Jar.of(jar), ["/etc/hadoop", "/hadoop/*"])
    )
    differ = {path: (shown, real) for path, shown, real in differences(body, sent)}
    assert differ.pop(("application-id",)) == ("<application-id>", "application_1796_0042")
    for path, (shown, _real) in differ.items():  # the AM's classpath, and what derives from the id (MASTER_PORT)
        assert path[:3] == ("am-container-spec", "environment", "entry"), path
        assert shown in (
            "<derived from the application id>",
            "./*:<the ResourceManager's yarn.application.classpath>",
        ), (path, shown)
    env = {e["key"]: e["value"] for e in body["am-container-spec"]["environment"]["entry"]}
    assert env["CLASSPATH"] == "./*:<the ResourceManager's yarn.application.classpath>"
    [script] = [base64.b64decode(v).decode() for k, v in env.items() if "SCRIPT" in k]
    # the study directory: beside the study file, wherever the command runs
    assert f"STRATCTL_OUTPUT_DIR={EXAMPLES}/stratctl-out/yarn-sweep/" in script and "LEARNING_RATE=" in script
    assert result.stderr.splitlines() == [
        "note: <application-id>: the ResourceManager gives each application its id when it is submitted; what "
        "derives from it is <derived from the application id>",
        "note: <the ResourceManager's yarn.application.classpath>: read from the ResourceManager at submit (set "
        "yarn.classpath to fix it)",
    ]
    as_yaml = run("render", YARN, "--trial", "0", "--format", "yaml")
    assert list(yaml.safe_load_all(as_yaml.stdout)) == [body]
    assert offline == [] and not (tmp_path / "stratctl-out").exists()


def differences(one, other, path=()):
    """(path, value in one, value in other) of every leaf where two JSON values differ."""
    if isinstance(one, dict) and isinstance(other, dict) and one.keys() == other.keys():
        for key in one:
            yield from differences(one[key], other[key], path + (key,))
    elif isinstance(one, list) and isinstance(other, list) and len(one) == len(other):
        for i, (a, b) in enumerate(zip(one, other)):
            yield from differences(a, b, path + (i,))
    elif one != other:
        yield path, one, other


def test_render_of_a_yarn_study_says_which_values_are_placeholders(tmp_path, offline, monkeypatch):
    monkeypatch.setenv("STRATCTL_YARN_AM_JAR", str(tmp_path / "missing.jar"))
    text = YARN.read_text().replace("  max_app_attempts: 2\n", "  max_app_attempts: 2\n  classpath: [/etc/hadoop]\n")
    result = run("render", write(tmp_path, text))
    assert result.exit_code == 0, result.stderr
    bodies = json_stream(result.stdout)
    assert len(bodies) == 8 and len({b["application-name"] for b in bodies}) == 8
    resource = bodies[0]["am-container-spec"]["local-resources"]["entry"][0]["value"]
    assert resource["resource"] == (tmp_path / "missing.jar").as_uri()
    assert (resource["size"], resource["timestamp"]) == ("<its size>", "<its modification time, ms>")
    env = {e["key"]: e["value"] for e in bodies[0]["am-container-spec"]["environment"]["entry"]}
    assert env["CLASSPATH"] == "./*:/etc/hadoop"
    [_, jar] = result.stderr.splitlines()
    assert jar.startswith(
        f"note: yarn-sweep: no gang application master jar at {tmp_path / 'missing.jar'} (STRATCTL_YARN_AM_JAR)"
    ) and jar.endswith("submit refuses the study until the jar is there)")
    assert offline == []


def test_render_of_a_kubernetes_study_is_its_manifests_as_yaml_or_json(tmp_path):
    study = write(tmp_path, MINIMAL)
    as_yaml = run("render", study)
    assert as_yaml.exit_code == 0 and as_yaml.stdout.startswith("---\napiVersion: batch.volcano.sh/v1alpha1\n")
    as_json = run("render", study, "--format", "json")
    docs = json_stream(as_json.stdout)
    assert docs == list(yaml.safe_load_all(as_yaml.stdout)) and len(docs) == 5


@pytest.mark.parametrize(
    "path, words",
    [
        (YARN, "--format script: backend yarn submits no script; use json or yaml"),
        (None, "--format script: backend kubernetes submits no script; use yaml or json"),
    ],
)
def test_a_form_the_backend_has_not_is_refused(tmp_path, path, words):
    result = run("render", path or write(tmp_path, MINIMAL), "--format", "script")
    assert result.exit_code == ExitCode.INVALID_INPUT == 2
    assert result.stderr == f"error: {words}\n" and result.stdout == ""
