"""Validation of study files: every kind of mistake is reported at FILE:LINE:COL."""

from __future__ import annotations

import pytest

from stratctl.core.spec import MAX_NAME, parse_duration
from stratctl.errors import StudyError
from tests.unit.studies import MINIMAL, load, problems, write


def test_minimal_study_loads_with_defaults(tmp_path):
    study = load(tmp_path, MINIMAL)
    assert study.name == "tiny"
    assert study.workload == "volcano"
    assert study.queue == "default"
    assert study.gang_size == 2
    assert study.gpus_per_trial == 2
    assert study.retries.max_retry == 3
    assert study.cost.expected_seconds == 3600
    assert study.source == tmp_path / "study.yaml"
    assert len(study.spec_hash) == 12


def test_spec_hash_changes_with_content_not_formatting(tmp_path):
    a = load(tmp_path, MINIMAL)
    b = load(tmp_path, MINIMAL.replace("image: busybox", "image:    busybox   # same"))
    c = load(tmp_path, MINIMAL.replace("image: busybox", "image: alpine"))
    assert a.spec_hash == b.spec_hash != c.spec_hash


def test_malformed_yaml(tmp_path):
    text = "name: x\nspace:\n  lr: {type: uniform, low: 1\n"
    [p] = problems(tmp_path, text)
    assert p.startswith("study.yaml:4:1: malformed YAML:")


def test_control_characters(tmp_path):
    assert problems(tmp_path, "name: tiny\nqueue: a\x0cb\n") == [
        "study.yaml:2:9: malformed YAML: special characters are not allowed (character U+000C)"
    ]


def test_unknown_key_suggests_the_closest(tmp_path):
    text = MINIMAL.replace("  image: busybox", "  imgae: busybox\n  image: busybox")
    assert problems(tmp_path, text) == ["study.yaml:8:3: unknown key 'imgae' in trial (did you mean 'image'?)"]


def test_unknown_top_level_key(tmp_path):
    text = MINIMAL + "stratgy: {}\n"
    assert problems(tmp_path, text) == [
        "study.yaml:14:1: unknown key 'stratgy' in the study (did you mean 'strategy'?)"
    ]


def test_wrong_type_points_at_the_value(tmp_path):
    text = MINIMAL.replace("replicas: 2", "replicas: two")
    [p] = problems(tmp_path, text)
    assert p.startswith("study.yaml:12:17: trial.tasks.0.replicas: must be a whole number")
    assert "'two'" in p


def test_missing_required_field(tmp_path):
    text = MINIMAL.replace("strategy: {kind: random, seed: 3, trials: 5}\n", "")
    assert problems(tmp_path, text) == ["study.yaml:1:1: strategy: required field missing"]


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        ("{type: uniform, low: 2, high: 1}", "study.yaml:6:27: space.x.low: low (2.0) must be below high (1.0)"),
        ("{type: uniform, low: 1, high: 1}", "study.yaml:6:27: space.x.low: low (1.0) must be below high (1.0)"),
        ("{type: loguniform, low: 0, high: 1}", "study.yaml:6:30: space.x.low: loguniform needs low > 0 (got 0.0)"),
        ("{type: loguniform, low: -1, high: 1}", "study.yaml:6:30: space.x.low: loguniform needs low > 0 (got -1.0)"),
        ("{type: int, low: 5, high: 1}", "study.yaml:6:23: space.x.low: low (5) must not be above high (1)"),
    ],
)
def test_bad_distribution_bounds(tmp_path, param, expected):
    text = MINIMAL.replace(
        "  bs: {type: choice, values: [16, 32]}", f"  bs: {{type: choice, values: [16, 32]}}\n  x: {param}"
    )
    assert problems(tmp_path, text) == [expected]


def test_int_step_must_be_positive(tmp_path):
    text = MINIMAL.replace("  bs: {type: choice, values: [16, 32]}", "  bs: {type: int, low: 1, high: 9, step: 0}")
    [p] = problems(tmp_path, text)
    assert p.startswith("study.yaml:5:42: space.bs.step: must be at least 1")


def test_unknown_distribution(tmp_path):
    text = MINIMAL.replace("type: choice", "type: normal")
    [p] = problems(tmp_path, text)
    assert p == "study.yaml:5:14: space.bs: 'type' must be one of choice, uniform, loguniform, int"


def test_duplicate_parameter(tmp_path):
    text = MINIMAL.replace(
        "  bs: {type: choice, values: [16, 32]}",
        "  bs: {type: choice, values: [16, 32]}\n  lr: {type: uniform, low: 0, high: 1}",
    )
    assert problems(tmp_path, text) == ["study.yaml:6:3: duplicate parameter 'lr' (first defined at line 4)"]


def test_duplicate_key_elsewhere_is_reported_with_other_problems(tmp_path):
    text = MINIMAL.replace("namespace: ns", "namespace: ns\nnamespace: other").replace("replicas: 2", "replicas: -1")
    found = problems(tmp_path, text)
    assert found[0] == "study.yaml:3:1: duplicate key 'namespace' (first defined at line 2)"
    assert found[1].startswith("study.yaml:13:17: trial.tasks.0.replicas: must be at least 1")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x" * (MAX_NAME + 1), f"is {MAX_NAME + 1} characters; at most {MAX_NAME} allowed"),
        ("Tiny_Study", "is not a DNS-1123 label"),
        ("-tiny", "is not a DNS-1123 label"),
    ],
)
def test_study_name_too_long_or_not_dns(tmp_path, name, message):
    [p] = problems(tmp_path, MINIMAL.replace("name: tiny", f"name: {name}"))
    assert p.startswith("study.yaml:1:7: name: study name ")
    assert message in p


def test_empty_file(tmp_path):
    assert problems(tmp_path, "") == ["study.yaml:1:1: the file is empty: expected a study mapping"]
    assert problems(tmp_path, "# only a comment\n") == ["study.yaml:1:1: the file is empty: expected a study mapping"]


def test_not_a_mapping(tmp_path):
    assert problems(tmp_path, "- a\n- b\n") == ["study.yaml:1:1: expected a mapping of study fields, got a list"]


def test_alias_bomb_is_refused_before_expansion(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "\n".join(lines) + "\n"
    [p] = problems(tmp_path, text)
    # the 65th alias is on line 9 (8 * 9 = 72 aliases in all): refused while composing
    assert p.startswith("study.yaml:9:")
    assert "too many YAML aliases" in p


def test_wide_alias_expansion_is_bounded(tmp_path):
    # Few aliases, but each doubles the tree: caught by the node budget, not the alias count.
    lines = ["a0: &a0 [" + ",".join(["x"] * 1000) + "]"]
    for i in range(1, 30):
        lines.append(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]")
    [p] = problems(tmp_path, "\n".join(lines) + "\n")
    assert "expands to more than" in p and p.startswith("study.yaml:")


def test_python_tags_are_refused(tmp_path):
    text = MINIMAL.replace("image: busybox", "image: !!python/object/apply:os.system ['true']")
    assert (
        problems(tmp_path, text)[0]
        == "study.yaml:8:10: unsupported YAML tag 'tag:yaml.org,2002:python/object/apply:os.system'"
    )
    text = MINIMAL.replace("image: busybox", "image: !!python/name:os.system")
    assert problems(tmp_path, text)[0].startswith(
        "study.yaml:8:10: cannot read this value: could not determine a constructor"
    )


def test_template_path_escaping_the_templates_directory(tmp_path):
    text = MINIMAL + "  template: ../../etc/passwd\n"
    assert problems(tmp_path, text) == [
        "study.yaml:14:13: trial.template: template path '../../etc/passwd' escapes the templates directory"
    ]


def test_absolute_template_path_is_refused(tmp_path):
    [p] = problems(tmp_path, MINIMAL + "  template: /etc/passwd\n")
    assert "escapes the templates directory" in p


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{{ ''.__class__.__mro__ }}", "template accesses '__class__', '__mro__': private attributes are not allowed"),
        (
            "{{ cycler.__init__.__globals__ }}",
            "template accesses '__globals__', '__init__': private attributes are not allowed",
        ),
        ("{{ params['__class__'] }}", "template accesses '__class__': private attributes are not allowed"),
    ],
)
def test_template_values_reaching_python_internals(tmp_path, value, message):
    text = MINIMAL.replace("image: busybox", f'image: "{value}"')
    found = problems(tmp_path, text)
    assert found[0] == f"study.yaml:8:10: trial.image: {message}"


def test_unknown_parameter_in_a_template(tmp_path):
    text = MINIMAL.replace("params.lr", "params.lrr")
    assert problems(tmp_path, text) == [
        "study.yaml:9:10: trial.args.0: unknown parameter 'params.lrr' (did you mean 'lr'?)"
    ]


def test_undefined_variable_in_a_template(tmp_path):
    text = MINIMAL.replace("params.lr", "learning_rate")
    [p] = problems(tmp_path, text)
    assert p.startswith("study.yaml:9:10: trial.args.0: unknown template variable 'learning_rate'")


def test_template_syntax_error(tmp_path):
    text = MINIMAL.replace("{{ params.lr }}", "{{ params.lr }")
    [p] = problems(tmp_path, text)
    assert p.startswith("study.yaml:9:10: trial.args.0: template syntax error:")


def test_parameter_values_may_not_be_templates(tmp_path):
    text = MINIMAL.replace("values: [16, 32]", "values: ['{{ 7*7 }}', 32]")
    [p] = problems(tmp_path, text)
    assert p.startswith("study.yaml:5:30: space.bs.values: parameter values may not contain template delimiters")


def test_grid_strategy_needs_points_for_continuous_parameters(tmp_path):
    text = MINIMAL.replace("{kind: random, seed: 3, trials: 5}", "{kind: grid}")
    assert problems(tmp_path, text) == [
        "study.yaml:4:7: space.lr: the grid strategy needs 'grid: N' points for continuous parameter 'lr'"
    ]


def test_random_strategy_needs_a_trial_count(tmp_path):
    text = MINIMAL.replace("{kind: random, seed: 3, trials: 5}", "{kind: random, seed: 3}")
    [p] = problems(tmp_path, text)
    assert p == "study.yaml:6:11: strategy: strategy 'random' needs 'trials' (how many to sample)"


def test_batch_workload_takes_one_task(tmp_path):
    text = MINIMAL.replace("namespace: ns", "namespace: ns\nworkload: batch") + "    - name: ps\n"
    [p] = problems(tmp_path, text)
    assert "workload 'batch' runs one pod template: exactly one task allowed" in p


def test_every_problem_is_reported_at_once(tmp_path):
    text = (
        MINIMAL.replace("name: tiny", "name: Tiny")
        .replace("replicas: 2", "replicas: 0")
        .replace("trials: 5", "trials: 0")
        .replace("image: busybox", "imag: busybox")
    )
    found = problems(tmp_path, text)
    assert [p.split(":")[1] for p in found] == ["1", "6", "8", "12"]


def test_unreadable_file(tmp_path):
    with pytest.raises(StudyError) as e:
        from stratctl.core.spec import load_study

        load_study(tmp_path / "missing.yaml")
    assert "cannot read the file" in str(e.value)


def test_env_values_become_strings(tmp_path):
    study = load(tmp_path, MINIMAL.replace("  image: busybox", "  image: busybox\n  env: {A: 1, B: true, C: 0.5}"))
    assert study.trial.env == {"A": "1", "B": "true", "C": "0.5"}


@pytest.mark.parametrize(
    ("text", "seconds"), [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45), (120, 120), ("1.5h", 5400)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "-1h", 0, "1h 30m"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_file_written_by_write_helper_is_dedented(tmp_path):
    assert write(tmp_path, "  a: 1\n").read_text() == "a: 1\n"


def test_stratctl_label_keys_are_reserved(tmp_path):
    text = MINIMAL.replace("  image: busybox", "  image: busybox\n  labels: {stratctl.io/trial: mine}")
    assert problems(tmp_path, text) == [
        "study.yaml:9:11: trial.labels: 'stratctl.io/trial': keys under stratctl.io/ are set by stratctl"
    ]


def test_parameter_names_shadowing_dict_methods_are_refused(tmp_path):
    [p] = problems(tmp_path, MINIMAL.replace("  bs:", "  items:"))
    assert p.startswith("study.yaml:5:10: space.items: parameter name 'items' is reserved")


def test_stratctl_env_vars_are_reserved(tmp_path):
    text = MINIMAL.replace("  image: busybox", "  image: busybox\n  env: {STRATCTL_TRIAL: mine}")
    assert problems(tmp_path, text) == [
        "study.yaml:9:8: trial.env: 'STRATCTL_TRIAL': STRATCTL_* variables are set by stratctl"
    ]


def test_on_breaker_is_hold_or_drain_and_holds_by_default(tmp_path):
    assert load(tmp_path, MINIMAL).throttle.on_breaker == "hold"
    assert load(tmp_path, MINIMAL + "throttle: {on_breaker: drain}\n").throttle.on_breaker == "drain"
    assert problems(tmp_path, MINIMAL + "throttle:\n  on_breaker: pause\n") == [
        "study.yaml:15:15: throttle.on_breaker: must be one of 'hold' or 'drain'"
    ]
