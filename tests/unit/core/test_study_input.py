"""Reading a study as an operator writes it: from standard input, with mistakes told in
stratctl's words and the value that was probably meant suggested."""

from __future__ import annotations

import io
import sys

import pytest
import yaml
from typer.testing import CliRunner

from stratctl.backends.launch import prepare
from stratctl.cli.main import app
from stratctl.core import wording
from stratctl.core.spec import load_study
from stratctl.errors import StudyError
from tests.unit.studies import MINIMAL, problems

runner = CliRunner()


@pytest.fixture
def stdin(monkeypatch):
    def feed(text: str) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))

    return feed


def test_dash_reads_the_study_from_stdin(stdin):
    stdin(MINIMAL)
    study = load_study("-")
    assert (study.name, study.file, study.source, study.text) == ("tiny", "<stdin>", None, MINIMAL)


def test_problems_of_a_study_on_stdin_are_located_in_stdin(stdin):
    stdin(MINIMAL.replace("replicas: 2", "replicas: 0"))
    with pytest.raises(StudyError) as e:
        load_study("-")
    assert [str(p) for p in e.value.problems] == ["<stdin>:12:17: trial.tasks.0.replicas: must be at least 1"]


def test_the_commands_take_dash_for_stdin():
    result = runner.invoke(app, ["validate", "-"], input=MINIMAL)
    assert (result.exit_code, result.stdout) == (0, "<stdin>: valid: study tiny, 5 trials\n")
    result = runner.invoke(app, ["render", "-"], input=MINIMAL)
    assert result.exit_code == 0
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout)] == ["Job"] * 5
    result = runner.invoke(app, ["plan", "-o", "json", "-"], input=MINIMAL)
    assert result.exit_code == 0 and '"trials"' in result.stdout
    result = runner.invoke(app, ["validate", "-"], input="name: x\n")
    assert result.exit_code == 2 and result.stderr.startswith("<stdin>:1:1: ")


def test_submit_keeps_the_text_read_from_stdin_for_the_record(stdin):
    stdin(MINIMAL)
    prepared = prepare("-", namespace="elsewhere")
    assert prepared.study.text == MINIMAL and len(prepared.trials) == 5
    assert (prepared.study.namespace, prepared.study.file) == ("elsewhere", "<stdin>")


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("values: [16, 32]", "values: []", "study.yaml:5:30: space.bs.values: must list at least one value"),
        ("replicas: 2", "replicas: 0", "study.yaml:12:17: trial.tasks.0.replicas: must be at least 1"),
        ("trials: 5", "trials: five", "study.yaml:6:43: strategy.trials: must be a whole number, got 'five'"),
        (
            "namespace: ns",
            "namespace: ns\ncritical: maybe",
            "study.yaml:3:11: critical: must be true or false, got 'maybe'",
        ),
        (
            "namespace: ns",
            "namespace: ns\nthrottle: {qps: .inf}",
            "study.yaml:3:17: throttle.qps: must be a finite number",
        ),
        ("namespace: ns", "namespace: ns\nthrottle: {qps: 0}", "study.yaml:3:17: throttle.qps: must be greater than 0"),
        (
            "{limits: {nvidia.com/gpu: 1}}",
            "{requests: {cpu: [1]}}",
            "study.yaml:13:35: trial.tasks.0.resources.requests.cpu: must be a whole number, a number or a string",
        ),
        ("  tasks:", "  tasks: {}\n  x:", "study.yaml:10:10: trial.tasks: must be a list"),
        ("  image: busybox", "  image: [busybox]", "study.yaml:8:10: trial.image: must be a string"),
        ("  image: busybox", "  image: busybox\n  env: {int: [1]}", "study.yaml:9:14: trial.env.int: must be a string"),
    ],
)
def test_validation_messages_are_plain_sentences(tmp_path, old, new, message):
    text = MINIMAL.replace(old, new)
    if new.startswith("  tasks: {}"):  # keep the rest of the file valid YAML
        text = MINIMAL.split("  tasks:")[0] + "  tasks: {}\n"
    found = problems(tmp_path, text)
    assert found == [message]
    assert not any(w in message for w in ("Input should", "after validation", "valid integer"))


def test_an_empty_space_says_what_it_lacks(tmp_path):
    text = (
        MINIMAL.replace("  lr: {type: loguniform, low: 1.0e-4, high: 1.0e-1}\n", "")
        .replace("  bs: {type: choice, values: [16, 32]}\n", "")
        .replace("space:\n", "space: {}\n")
    )
    text = text.replace('args: ["--lr={{ params.lr }}"]', "args: []")
    assert problems(tmp_path, text) == ["study.yaml:3:8: space: must have at least one entry"]


def test_every_pydantic_error_type_in_the_table_has_a_sentence():
    for kind, sentence in wording.MESSAGES.items():
        assert sentence and not sentence.startswith("Input"), kind


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "type: choice",
            "type: choise",
            "study.yaml:5:14: space.bs: 'type' must be one of choice, uniform, loguniform, int (did you mean "
            "'choice'?)",
        ),
        (
            "kind: random",
            "kind: randm",
            "study.yaml:6:18: strategy.kind: must be one of 'grid', 'random', 'quasi-random', 'tpe', 'gp', 'cmaes' "
            "or 'nsga2' (did you mean 'random'?)",
        ),
        (
            "namespace: ns",
            "namespace: ns\nworkload: volcan",
            "study.yaml:3:11: workload: must be one of 'volcano' or 'batch' (did you mean 'volcano'?)",
        ),
        (
            "namespace: ns",
            "namespace: ns\ncleanup: dlete",
            "study.yaml:3:10: cleanup: must be one of 'keep' or 'delete' (did you mean 'delete'?)",
        ),
        (
            "  image: busybox",
            "  image: busybox\n  restart_policy: never",
            "study.yaml:9:19: trial.restart_policy: must be one of 'Never' or 'OnFailure' (did you mean 'Never'?)",
        ),
        (
            "kind: random",
            "kind: sobol",  # nothing close: no suggestion, the list says it all
            "study.yaml:6:18: strategy.kind: must be one of 'grid', 'random', 'quasi-random', 'tpe', 'gp', 'cmaes' "
            "or 'nsga2'",
        ),
    ],
)
def test_a_mistyped_value_suggests_the_closest_allowed_one(tmp_path, old, new, message):
    assert problems(tmp_path, MINIMAL.replace(old, new)) == [message]


def test_a_mistyped_key_suggests_the_closest_known_one(tmp_path):
    text = MINIMAL.replace("strategy: {kind", "strategy: {knd")
    assert "study.yaml:6:12: unknown key 'knd' in strategy (did you mean 'kind'?)" in problems(tmp_path, text)


@pytest.mark.parametrize("indent", ["\t", "  \t"])
def test_a_tab_in_the_indentation_says_to_use_spaces(tmp_path, indent):
    text = MINIMAL.replace("  image: busybox", f"{indent}image: busybox")
    assert problems(tmp_path, text) == [f"study.yaml:8:{len(indent)}: a tab in the indentation: use spaces, not tabs"]


def test_a_tab_after_a_colon_is_pointed_at(tmp_path):
    text = MINIMAL.replace("image: busybox", "image:\tbusybox")
    assert problems(tmp_path, text) == ["study.yaml:8:9: a tab where YAML needs spaces: use spaces, not tabs"]


def test_another_namespace_changes_the_namespace_and_nothing_else(tmp_path):
    import json

    from stratctl.backends.launch import prepare
    from tests.unit.studies import MINIMAL

    path = tmp_path / "s.yaml"
    path.write_text(MINIMAL)
    here, there = prepare(path), prepare(path, namespace="elsewhere")
    assert there.study.namespace == "elsewhere"
    # a full dump would mark every default as set: cost.expected_duration then stamps jobs
    assert there.study.cost.model_fields_set == here.study.cost.model_fields_set
    assert there.study.model_dump(exclude_unset=True) == {
        **here.study.model_dump(exclude_unset=True),
        "namespace": "elsewhere",
    }
    for name, manifests in here.manifests.items():
        moved = json.dumps(there.manifests[name]).replace('"elsewhere"', '"ns"')
        for old, new in zip(manifests, there.manifests[name]):  # the spec hash covers the namespace
            moved = moved.replace(
                new["metadata"]["labels"]["stratctl.io/spec-hash"], old["metadata"]["labels"]["stratctl.io/spec-hash"]
            )
        assert json.loads(moved) == manifests
