"""Property-based: whatever a study document holds, the commands answer with exit 0 or 2
and a message, never a traceback."""

from __future__ import annotations

import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stratctl.cli.main import app

runner = CliRunner()

KEYS = [
    "name",
    "namespace",
    "queue",
    "space",
    "strategy",
    "trial",
    "type",
    "low",
    "high",
    "values",
    "grid",
    "step",
    "kind",
    "seed",
    "trials",
    "image",
    "args",
    "env",
    "tasks",
    "replicas",
    "min_available",
    "resources",
    "limits",
    "nvidia.com/gpu",
    "cost",
    "expected_duration",
    "template",
    "workload",
    "checkpoint",
    "location",
    "x",
    "lr",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(string.printable, max_size=12),
    st.sampled_from(
        [
            "choice",
            "uniform",
            "loguniform",
            "int",
            "grid",
            "random",
            "quasi-random",
            "{{ params.lr }}",
            "{{ x.__class__ }}",
            "{% for %}",
            "demo",
            "1h",
            "batch",
            "../x",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
    max_leaves=25,
)

VALID = {
    "name": "p",
    "space": {"lr": {"type": "uniform", "low": 0, "high": 1}},
    "strategy": {"kind": "random", "seed": 1, "trials": 3},
    "trial": {"image": "busybox"},
}


def _check(tmp_path, text: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    for command in (["validate"], ["plan", "-o", "json"], ["render"]):
        result = runner.invoke(app, [*command, str(path)])
        assert result.exit_code in (0, 2), (command, text, result.stderr, result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        if result.exit_code == 2:
            assert result.stderr.strip(), "exit 2 must say why"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=values)
def test_random_documents_never_crash(tmp_path, doc):
    _check(tmp_path, yaml.safe_dump(doc))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    patch=st.dictionaries(st.sampled_from(KEYS), values, max_size=3),
    where=st.sampled_from([(), ("trial",), ("strategy",), ("space",), ("space", "lr")]),
)
def test_mutated_valid_studies_never_crash(tmp_path, patch, where):
    doc = yaml.safe_load(yaml.safe_dump(VALID))
    target = doc
    for key in where:
        target = target[key]
    target.update(patch)
    _check(tmp_path, yaml.safe_dump(doc))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(string.printable, max_size=200))
def test_arbitrary_text_never_crashes(tmp_path, text):
    _check(tmp_path, text)
