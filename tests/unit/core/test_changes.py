"""A study edited after it was submitted: which fields changed, which trials it touches, and
whether the rerun is refused (exit 4) or allowed (added trials, nothing rendered differently)."""

from __future__ import annotations

import pytest

from stratctl.core.changes import SPEC_LIMIT, changed_fields, compare, refusal, spec_text, summary
from stratctl.core.space import expand
from stratctl.errors import ExitCode, StudyChanged
from tests.unit.rendering import Renderer
from tests.unit.studies import MINIMAL, load


def hashes(study) -> dict[str, str]:
    renderer = Renderer(study)
    return {t.name: renderer.render(t)[0]["metadata"]["labels"]["stratctl.io/spec-hash"] for t in expand(study)}


def test_changed_fields_are_dotted_paths_down_to_list_items():
    old = {
        "trial": {"image": "a", "args": ["--x", "1"], "tasks": [{"replicas": 2}]},
        "space": {"lr": {"low": 0.1, "high": 1.0}},
        "throttle": {"qps": 5},
    }
    new = {
        "trial": {"image": "b", "args": ["--x", "2"], "tasks": [{"replicas": 2}, {"replicas": 1}]},
        "space": {"lr": {"low": 0.1, "high": 2.0}},
        "throttle": {"qps": 5, "burst": 3},
    }
    assert changed_fields(old, new) == ["space.lr.high", "throttle.burst", "trial.args.1", "trial.image", "trial.tasks"]
    assert changed_fields(old, old) == []


def test_an_image_and_args_edit_changes_every_trial_and_names_the_fields(tmp_path):
    before = load(tmp_path, MINIMAL)
    after = load(
        tmp_path, MINIMAL.replace("image: busybox", "image: busybox:1.36").replace("--lr=", "--learning-rate=")
    )
    c = compare(
        before.model_dump(mode="json"), after.model_dump(mode="json"), hashes(before), hashes(after), spec_changed=True
    )
    assert c.refused and c.fields == ("trial.args.0", "trial.image")
    assert len(c.changed) == 5 and c.removed == () and c.added == () and c.unchanged == 0
    assert summary("tiny", c) == (
        "study tiny changed since it was submitted (trial.args.0, trial.image): "
        "5 of 5 trial(s) in the cluster would run with a different spec"
    )


def test_a_changed_bound_replaces_the_trials_it_samples(tmp_path):
    before = load(tmp_path, MINIMAL)
    after = load(tmp_path, MINIMAL.replace("high: 1.0e-1", "high: 1.0e-2"))
    c = compare(
        before.model_dump(mode="json"), after.model_dump(mode="json"), hashes(before), hashes(after), spec_changed=True
    )
    assert c.refused and c.fields == ("space.lr.high",)
    assert len(c.removed) == 5 and len(c.added) == 5  # new parameters, new trial names


def test_adding_trials_is_allowed(tmp_path):
    twelve = load(tmp_path, MINIMAL.replace("trials: 5", "trials: 12"))
    fourteen = load(tmp_path, MINIMAL.replace("trials: 5", "trials: 14"))
    c = compare(
        twelve.model_dump(mode="json"),
        fourteen.model_dump(mode="json"),
        hashes(twelve),
        hashes(fourteen),
        spec_changed=True,
    )
    assert not c.refused and c.fields == ("strategy.trials",)
    assert c.unchanged == 12 and len(c.added) == 2


def test_an_edit_that_renders_nothing_differently_is_allowed(tmp_path):
    before = load(tmp_path, MINIMAL)
    commented = load(tmp_path, "# tuned on Tuesday\n" + MINIMAL)
    c = compare(
        before.model_dump(mode="json"),
        commented.model_dump(mode="json"),
        hashes(before),
        hashes(commented),
        spec_changed=commented.spec_hash != before.spec_hash,
    )
    assert not c.refused and c.fields == () and c.unchanged == 5
    paced = load(tmp_path, MINIMAL + "throttle: {qps: 3}\n")  # a loop setting: no manifest changes
    c = compare(
        before.model_dump(mode="json"), paced.model_dump(mode="json"), hashes(before), hashes(paced), spec_changed=True
    )
    assert not c.refused and c.fields == ("throttle.qps",) and c.unchanged == 5


def test_unknown_hashes_follow_the_spec_and_an_older_record_says_fields_unknown():
    existing = {"t-1": None, "t-2": "aaa"}
    rendered = {"t-1": "x", "t-2": "aaa"}
    assert not compare(None, {}, existing, rendered, spec_changed=False).refused
    c = compare(None, {}, existing, rendered, spec_changed=True)
    assert c.changed == ("t-1",) and c.fields is None
    assert "fields unknown" in summary("s", c)
    # trials the study no longer has: a change when the spec changed, leftovers of an accepted one when not
    assert compare(None, {}, {"gone": "h"}, {}, spec_changed=True).removed == ("gone",)
    assert not compare(None, {}, {"gone": "h"}, {}, spec_changed=False).refused


def test_the_refusal_says_what_changed_and_the_ways_forward(tmp_path):
    c = compare(
        {"trial": {"image": "a"}},
        {"trial": {"image": "b"}},
        {"t-1": "h1", "t-2": "h2"},
        {"t-1": "h1", "t-2": "new"},
        spec_changed=True,
    )
    text = refusal("s", c, "study.yaml")
    assert text.splitlines()[0] == (
        "study s changed since it was submitted (trial.image): "
        "1 of 2 trial(s) in the cluster would run with a different spec."
    )
    assert "stratctl submit study.yaml --rerun-changed" in text and "new name" in text
    error = StudyChanged(text)
    assert error.exit_code == ExitCode.CONFLICT == 4


def test_the_spec_kept_in_the_record_is_what_the_file_sets_and_is_bounded(tmp_path):
    assert spec_text(load(tmp_path, MINIMAL)).startswith('{"name":"tiny","namespace":"ns","space":')
    huge = MINIMAL.replace("values: [16, 32]", f"values: {list(range(SPEC_LIMIT // 4))}")
    assert spec_text(load(tmp_path, huge)) == ""


@pytest.mark.parametrize("many", [12])
def test_more_than_a_few_fields_are_counted(many):
    c = compare({f"f{i}": 0 for i in range(many)}, {f"f{i}": 1 for i in range(many)}, {"t": "a"}, {"t": "b"}, True)
    assert "and 4 more" in summary("s", c)
