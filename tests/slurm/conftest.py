"""Session fixture for the Slurm end-to-end tests: real Slurm daemons (munged, slurmctld,
four slurmd with four fake GPUs each, partitions research and prod, prod preempting
research by requeue) from testbed/slurm/, brought up here if needed. An existing Slurm
cluster can be used instead: STRATCTL_TEST_SLURM_CONF names its slurm.conf."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.support import wait_until

REPO = Path(__file__).resolve().parents[2]


@dataclass
class SlurmBed:
    env: dict[str, str]  # the environment Slurm's commands need (SLURM_CONF)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=60, check=check)

    def jobs(self, study: str) -> list[dict]:
        """The study's jobs the controller lists, ended ones included."""
        out = json.loads(self.run("squeue", "--json", "--all").stdout)["jobs"]
        return [j for j in out if str(j.get("comment") or "").startswith(f"stratctl:{study}/")]

    def stratctl(self, *args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "stratctl", *args], cwd=cwd, env={**os.environ, **self.env},
                              capture_output=True, text=True, timeout=timeout)

    def start(self, *args: str, cwd: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "stratctl", *args], cwd=cwd, env={**os.environ, **self.env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, what: str, condition, timeout: float = 90.0):
        return wait_until(condition, timeout, message=what)

    def wait_idle(self, timeout: float = 120.0) -> None:
        """Until no GPU of the cluster is taken: for the tests that fill the whole cluster
        (jobs another test left running end first)."""
        from stratctl.slurm.scheduler import _gpus

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
    out = subprocess.run(["bash", str(REPO / "testbed" / "slurm" / "up.sh")], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    env_file = Path(out.strip().splitlines()[-1])
    env = {}
    for line in env_file.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export "):].split("=", 1)
            env[key] = value
    return SlurmBed(env)
