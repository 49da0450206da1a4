"""The framework examples as a user meets them before any cluster: each study file of the
PyTorch DDP example (one per backend) and of the JAX rendezvous check is valid, with trials
of the size it says; a python without the framework gets one line saying what to install,
not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stratctl.cli.main import app
from stratctl.core.spec import load_study

EXAMPLES = Path(__file__).parents[3] / "examples"
DDP_STUDIES = sorted((EXAMPLES / "ddp").glob("*.yaml"))


def test_the_ddp_example_has_a_study_per_backend_each_valid_with_trials_of_2_nodes_and_the_jax_studies_are_valid():
    assert [p.name for p in DDP_STUDIES] == ["kubernetes.yaml", "slurm.yaml", "yarn.yaml"]
    jax = [str(EXAMPLES / "rendezvous" / f"jax-{backend}.yaml") for backend in ("slurm", "yarn")]
    result = CliRunner().invoke(app, ["validate", *map(str, DDP_STUDIES), *jax])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count(": valid: study ") == 5 and result.stdout.count("4 trials") == 3
    for path in DDP_STUDIES:
        study = load_study(path)
        assert [(t.name, t.replicas) for t in study.trial.tasks] == [("worker", 2)], path
        assert "train.py" in " ".join(study.trial.command), path


@pytest.mark.parametrize(
    "script, module, says",
    [
        (EXAMPLES / "ddp" / "train.py", "torch", "PyTorch is not installed"),
        (EXAMPLES / "rendezvous" / "jax_check.py", "jax", "JAX is not installed"),
    ],
)
def test_without_its_framework_an_example_says_what_to_install_in_one_line(script, module, says):
    hide = (
        f"import sys, runpy; sys.modules[{module!r}] = None; sys.argv = [{str(script)!r}]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and says in done.stderr and "pip install" in done.stderr, done.stderr
    assert done.stdout == ""
