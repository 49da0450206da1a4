"""Session fixture for the Slurm end-to-end tests: real Slurm daemons (munged, slurmctld,
four slurmd with four fake GPUs each, partitions research and prod, prod preempting
research by requeue) from testbed/slurm/, brought up here if needed. An existing Slurm
cluster can be used instead: STRATCTL_TEST_SLURM_CONF names its slurm.conf."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.support import StratctlRuns, testbed_up

REPO = Path(__file__).resolve().parents[2]


@dataclass
class SlurmBed(StratctlRuns):
    env: dict[str, str]  # the environment Slurm's commands need (SLURM_CONF)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60, check=check
        )

    def jobs(self, study: str) -> list[dict]:
        """The study's jobs the controller lists, ended ones included."""
        out = json.loads(self.run("squeue", "--json", "--all").stdout)["jobs"]
        return [j for j in out if str(j.get("comment") or "").startswith(f"stratctl:{study}/")]

    def wait_idle(self, timeout: float = 120.0) -> None:
        """Until no GPU of the cluster is taken: for the tests that fill the whole cluster
        (jobs another test left running end first)."""
        from stratctl.backends.slurm.scheduler import _gpus

        def idle():
            nodes = json.loads(self.run("sinfo", "--json").stdout)["nodes"]
            return nodes and all(_gpus(n.get("gres_used")) == 0 for n in nodes)

        self.wait("every GPU free", idle, timeout)


@pytest.fixture(scope="session")
def slurm() -> SlurmBed:
    given = os.environ.get("STRATCTL_TEST_SLURM_CONF")
    if given:
        return SlurmBed({"SLURM_CONF": given})
    subprocess.run(["bash", str(REPO / "testbed" / "slurm" / "packages.sh")], check=True)
    return SlurmBed(testbed_up(REPO / "testbed" / "slurm" / "up.sh"))
