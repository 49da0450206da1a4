"""A resource name a typo away from an accelerator's is said at `validate` (file, line,
field, the name meant), on every backend, and `plan` never counts it as 0 GPUs silently;
the names device plugins offer, and their variants, pass."""

from __future__ import annotations

import pytest

from stratctl.core.accelerators import misspelt, nearest
from stratctl.errors import ExitCode
from tests.unit.cli.test_cli import run
from tests.unit.core.test_capabilities import KUBERNETES, SLURM
from tests.unit.studies import write


@pytest.mark.parametrize(
    "name, meant",
    [
        ("nvidia.com/gpus", "nvidia.com/gpu"),
        ("nvida.com/gpu", "nvidia.com/gpu"),
        ("nvidia.com/GPU", "nvidia.com/gpu"),  # resource names are case-sensitive
        ("nvidia/gpu", "nvidia.com/gpu"),
        ("gpu", "nvidia.com/gpu"),  # Kubernetes wants the plugin's qualified name
        ("amd.com/gpus", "amd.com/gpu"),
        ("amd.con/gpu", "amd.com/gpu"),
        ("google.com/tpus", "google.com/tpu"),
        ("aws.amazon.com/neuroncores", "aws.amazon.com/neuroncore"),
    ],
)
def test_near_misses_of_accelerator_resources(name, meant):
    assert misspelt(name) == meant


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",
        "amd.com/gpu",
        "nvidia.com/gpu.shared",  # time-slicing, renamed
        "nvidia.com/gpumem",  # GPU-sharing plugins
        "nvidia.com/mig-1g.10gb",  # MIG profiles
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        "rdma/hca",
        "example.com/foo",
        "intel.com/qat",
    ],
)
def test_known_names_their_variants_and_unrelated_names_pass(name):
    assert misspelt(name) is None


def test_nearest_prefers_the_same_name_in_another_case_and_needs_a_close_one():
    assert nearest("Example.com/FPGA", ["example.com/fpga", "cpu"]) == "example.com/fpga"
    assert nearest("example.com/fpgas", ["example.com/fpga", "memory"]) == "example.com/fpga"
    assert nearest("example.com/fpga", ["cpu", "memory", "pods"]) is None


@pytest.mark.parametrize("study", [KUBERNETES, SLURM], ids=["kubernetes", "slurm"])
def test_validate_and_plan_name_the_field_and_the_resource_meant(tmp_path, study):
    text = study.replace("limits: {nvidia.com/gpu: 1}", "limits: {nvidia.com/gpus: 1}")
    path = write(tmp_path, text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "gpus" in t)
    expected = (
        f"{path}:{line}:74: trial.resources.limits.nvidia.com/gpus: unknown accelerator resource 'nvidia.com/gpus': "
        "did you mean 'nvidia.com/gpu'? (a pod asking for a resource no node offers never starts, and stratctl "
        "would count no GPU)"
    )
    for command in ("validate", "plan"):
        result = run(command, path)
        assert result.exit_code == ExitCode.INVALID_INPUT == 2
        # the one line: on Slurm not a second one saying the backend cannot give it
        assert result.stderr.splitlines() == [expected] and result.stdout == ""
