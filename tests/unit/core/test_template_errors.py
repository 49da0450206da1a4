"""Template mistakes reported like every other problem: located, with a suggestion, and
without the renderer building anything huge."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from stratctl.cli.main import app
from stratctl.core import sandbox
from stratctl.core.space import expand
from stratctl.core.spec import load_study
from stratctl.errors import StudyError
from tests.unit.rendering import Renderer, validate
from tests.unit.studies import MINIMAL, problems, write

ARGS = '  args: ["--lr={{ params.lr }}"]'


def _with_args(*args: str, text: str = MINIMAL) -> str:
    assert ARGS in text
    return text.replace(ARGS, "  args: [" + ", ".join(f'"{a}"' for a in args) + "]")


def _render_problem(tmp_path, *args: str) -> str:
    path = write(tmp_path, _with_args(*args))
    with pytest.raises(StudyError) as e:
        validate(path)
    [p] = e.value.problems
    return str(p).replace(str(path), "study.yaml")


def test_unknown_filter_and_test_are_located_with_a_suggestion_among_the_other_problems(tmp_path):
    text = _with_args("--lr={{ params.lr | rount(3) }}", "{{ params.bs is od }}").replace("name: tiny", "name: Tiny")
    found = problems(tmp_path, text)
    assert found[0].startswith("study.yaml:1:7: name: study name 'Tiny' is not a DNS-1123 label")
    assert found[1:] == [
        "study.yaml:9:10: trial.args.0: unknown filter 'rount' (did you mean 'round'?)",
        "study.yaml:9:45: trial.args.1: unknown test 'od' (did you mean 'odd'?)",
    ]


def test_unknown_filter_exits_2_not_as_an_internal_error(tmp_path):
    path = write(tmp_path, _with_args("--lr={{ params.lr | rount(3) }}"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"{path}:9:10: trial.args.0: unknown filter 'rount' (did you mean 'round'?)\n"


def test_unknown_filter_in_a_template_file_names_its_line(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "job.yaml.j2").write_text("kind: Job\nmetadata:\n  name: {{ job | uppr }}\n")
    path = write(tmp_path, MINIMAL + "  template: job.yaml.j2\ntemplates_dir: tpl\n")
    with pytest.raises(StudyError) as e:
        Renderer(load_study(path))
    assert str(e.value) == f"{tmp_path}/tpl/job.yaml.j2:3: unknown filter 'uppr' (did you mean 'upper'?)"


def test_a_template_failing_for_some_trials_names_the_file_line_column_and_trial(tmp_path):
    text = _with_args("--lr={{ params.lr }}", "--shards={{ 64 // (params.bs - 16) }}")
    path = write(tmp_path, text)
    study = load_study(path)
    first = next(t for t in expand(study) if t.params["bs"] == 16)
    assert first.index > 0  # so only rendering every trial finds it
    with pytest.raises(StudyError) as e:
        validate(path)
    assert [str(p) for p in e.value.problems] == [
        f"{path}:9:34: trial.args.1: rendering failed for trial {first.index} ({first.name}): "
        "integer division or modulo by zero"
    ]


def test_a_failing_checkpoint_location_is_located_too(tmp_path):
    path = write(tmp_path, MINIMAL + 'checkpoint: {location: "s3://b/{{ trial[100] }}"}\n')
    with pytest.raises(StudyError) as e:
        validate(path)
    [p] = e.value.problems
    assert (p.line, p.column) == (14, 24)
    assert p.message.startswith("checkpoint.location: rendering failed for trial 0 (tiny-")


@pytest.mark.parametrize(
    "expression, limit",
    [
        ("'x' * 10**8", "1,000,000 characters"),
        ("10**8 * 'x'", "1,000,000 characters"),
        ("[0] * 10**8", "1,000,000 items"),
        ("7 ** (7 ** 7)", "16,384 bits"),
        ("(10 ** 4000) * (10 ** 4000)", "16,384 bits"),
        ("'%0999999999d' % 1", "1,000,000 characters"),
        ("'%*d' % (5, 1)", "1,000,000 characters"),
        ("'x'.ljust(10**9)", "1,000,000 characters"),
        ("'x' | center(10**9)", "1,000,000 characters"),
        ("'x' | indent(10**9, true)", "1,000,000 characters"),
        ("'%0999999999d' | format(1)", "1,000,000 characters"),
    ],
)
def test_huge_results_are_refused_before_they_are_computed(tmp_path, expression, limit):
    start = time.perf_counter()
    message = _render_problem(tmp_path, f"--x={{{{ {expression} }}}}")
    assert time.perf_counter() - start < 1.0
    assert message.startswith("study.yaml:9:10: trial.args.0: rendering not allowed for trial 0 (tiny-")
    assert "refusing to compute" in message and message.endswith(f"the result would exceed {limit}")


def test_reasonable_arithmetic_still_renders(tmp_path):
    # Jinja's ** groups from the left: 7 ** 7 ** 7 is (7 ** 7) ** 7, a number of 42 digits
    exprs = ["'ab' * 3", "2 ** 10", "'%05d' % 3", "7 ** 7 ** 7", "'x' | center(5)", "2.5 ** 400 > 0"]
    path = write(tmp_path, _with_args(*(f"{{{{ {e} }}}}" for e in exprs)))
    study = load_study(path)
    [job] = Renderer(study).render(expand(study)[0])
    args = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["args"]
    assert args == ["ababab", "1024", "00003", str(7**49), "  x  ", "true"]


def test_booleans_are_substituted_as_true_and_false(tmp_path):
    text = MINIMAL.replace("  bs: {type: choice, values: [16, 32]}", "  warm: {type: choice, values: [true, false]}")
    text = _with_args(
        "--warm={{ params.warm }}",
        "--warm2={{ params.warm if params.warm else params.warm }}",
        "--resume={{ resume }}",
        text=text,
    )
    text = text.replace("  tasks:", '  env: {WARM: "{{ params.warm }}"}\n  tasks:')
    study = load_study(write(tmp_path, text))
    renderer = Renderer(study)
    seen = set()
    for trial in expand(study):
        [job] = renderer.render(trial, attempt=1, resume=True)
        container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
        word = "true" if trial.params["warm"] else "false"
        assert container["args"] == [f"--warm={word}", f"--warm2={word}", "--resume=true"]
        assert {"name": "WARM", "value": word} in container["env"]
        seen.add(word)
    assert seen == {"true", "false"}


def test_display_keeps_other_values():
    assert [sandbox.display(v) for v in (True, False, 1, 0, None, "True")] == ["true", "false", 1, 0, None, "True"]


def test_a_loop_cannot_repeat_output_past_the_limit(tmp_path):
    start = time.perf_counter()
    message = _render_problem(tmp_path, "{% for i in 'x' * 999999 %}{{ 'y' * 999999 }}{% endfor %}")
    assert time.perf_counter() - start < 1.0
    assert message.endswith("refusing to compute the template's output: the result would exceed 1,000,000 characters")
