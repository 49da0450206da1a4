"""The Slurm and YARN testbeds, as session fixtures (`slurm`, `yarn`) for the suites that
run against them (tests/backends, tests/install).

- Slurm: real Slurm daemons (munged, slurmctld, four slurmd with four fake GPUs each,
  partitions research and prod, prod preempting research by requeue) from testbed/slurm/,
  brought up here if needed. An existing Slurm cluster can be used instead:
  STRATCTL_TEST_SLURM_CONF names its slurm.conf.
- YARN: a real ResourceManager (Capacity Scheduler, queues prod and research, preemption
  on) and two NodeManagers of 4 GPUs each, Hadoop's MiniYARNCluster in one local JVM from
  testbed/yarn/, brought up here if needed, with stratctl's gang AM built (yarn-am/). An
  existing YARN cluster can be used instead: STRATCTL_TEST_YARN_RM names its
  ResourceManager's web address, STRATCTL_YARN_AM_JAR the AM jar on a file system its
  NodeManagers read."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import time
import urllib.request
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

    @property
    def local(self) -> bool:
        """The testbed of this repo (its slurmctld may be stopped and continued)."""
        return self._pid_file().is_file()

    def _pid_file(self) -> Path:
        return Path(self.env.get("STRATCTL_SLURM_RUN", "")) / "run" / "slurmctld.pid"

    def pause(self, seconds: float) -> None:
        """Stop slurmctld (SIGSTOP) for a while, then continue it."""
        pid = int(self._pid_file().read_text().split()[0])
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="session")
def slurm() -> SlurmBed:
    given = os.environ.get("STRATCTL_TEST_SLURM_CONF")
    if given:
        return SlurmBed({"SLURM_CONF": given})
    subprocess.run(["bash", str(REPO / "testbed" / "slurm" / "packages.sh")], check=True)
    bed = SlurmBed(testbed_up(REPO / "testbed" / "slurm" / "up.sh"))
    # the controller keeps its jobs across a restart: none of an earlier session (one killed
    # mid-test; a study's driver job, which requeues itself) may hold GPUs or run a loop here
    bed.run("scancel", "--full", "--quiet", f"--user={getpass.getuser()}", check=False)
    bed.wait_idle()
    return bed


@dataclass
class YarnBed(StratctlRuns):
    rm: str  # the ResourceManager's web address
    env: dict[str, str]  # what the testbed's env file exports (STRATCTL_YARN_AM_JAR, ...)
    local: bool  # the testbed of this repo (its JVM may be stopped and continued)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.rm}/ws/v1/cluster/{path}", timeout=30) as answer:
            return json.loads(answer.read())

    def apps(self, study: str) -> list[dict]:
        """The study's applications the RM remembers, ended ones included."""
        listed = (self.get(f"apps?applicationTags=stratctl-study:{study}").get("apps") or {}).get("app") or []
        return sorted(listed, key=lambda a: a["id"])

    def kill(self, app_id: str) -> None:
        request = urllib.request.Request(
            f"{self.rm}/ws/v1/cluster/apps/{app_id}/state",
            method="PUT",
            data=b'{"state": "KILLED"}',
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=30).close()

    def free_gpus(self) -> int:
        nodes = self.get("nodes")["nodes"]["node"]
        return sum(
            i["value"]
            for n in nodes
            for i in n["availableResource"]["resourceInformations"]["resourceInformation"]
            if i["name"] == "yarn.io/gpu"
        )

    def wait_idle(self, timeout: float = 120.0) -> None:
        """Until every GPU of the cluster is free: for the tests that fill the whole cluster."""
        total = sum(
            i["value"]
            for n in self.get("nodes")["nodes"]["node"]
            for i in n["totalResource"]["resourceInformations"]["resourceInformation"]
            if i["name"] == "yarn.io/gpu"
        )
        self.wait("every GPU free", lambda: self.free_gpus() == total, timeout)

    def pause(self, seconds: float) -> None:
        """Stop the testbed's JVM (ResourceManager and NodeManagers) for a while, then continue it."""
        pid = int((Path(self.env["STRATCTL_YARN_RUN"]) / "pids" / "miniyarn.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="session")
def yarn() -> YarnBed:
    given = os.environ.get("STRATCTL_TEST_YARN_RM")
    if given:
        return YarnBed(given.rstrip("/"), {}, local=False)
    env = testbed_up(REPO / "testbed" / "yarn" / "up.sh")
    return YarnBed(env["STRATCTL_YARN_RM"], env, local=True)
