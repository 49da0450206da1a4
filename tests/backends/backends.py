"""Each batch backend over its real testbed, as the shared end-to-end suite sees it: how a
study file names it, where its attempts are (Slurm's jobs, YARN's applications, each
trial's oldest first), and where the two truly differ, a parameter saying how:

- `preemption`: "requeue" (Slurm requeues the preempted job itself: the same job runs
  again, its restart count up) or "next attempt" (YARN: the gang AM ends the attempt, the
  trial's next attempt, a new application, resumes);
- `drain`: "hold" (Slurm holds each job and releases it on resume, the same job) or
  "kill" (YARN cannot hold: drain kills each application, resume submits the next
  attempt);
- what it calls a finished attempt (`done`), its controller in messages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stratctl import rendezvous


@dataclass
class Slurm:
    bed: Any
    name = "slurm"
    title = "Slurm"
    controller = "Slurm controller"
    preemption = "requeue"
    drain = "hold"
    done = "COMPLETED"  # squeue's job_state of a job that succeeded
    stopped = "CANCELLED"  # of one the pruner stopped (scancel)

    def header(self, queue: str = "research", extra: str = "") -> str:
        return f"backend: slurm\nslurm: {{partition: {queue}, time_limit: 5m{extra}}}\n"

    requests = ""  # what each task asks besides GPUs (YARN's containers need memory)

    def records(self, study: str) -> dict[str, list[dict]]:
        """trial -> its jobs, oldest first."""
        out: dict[str, list[dict]] = {}
        for job in sorted(self.bed.jobs(study), key=lambda j: j["job_id"]):
            out.setdefault(job["comment"].split("/")[1], []).append(job)
        return out

    @staticmethod
    def attempt_of(record: dict) -> int:
        return int(record["comment"].split("/")[2])

    @staticmethod
    def state(record: dict) -> str:
        return record["job_state"]

    def running(self, study: str) -> int:
        return sum(j["job_state"] == "RUNNING" for j in self.bed.jobs(study))

    def full(self) -> bool:
        """Every GPU of the testbed taken (Slurm: the jobs running on every node say so)."""
        return True

    @staticmethod
    def seconds(record: dict) -> float:
        """How long the attempt ran, in the scheduler's own times."""
        return record["end_time"] - record["start_time"]

    @staticmethod
    def port(record: dict) -> int:
        """The rendezvous port stratctl derives for the attempt: from its job id."""
        return rendezvous.derived_port(record["job_id"])

    def addresses(self) -> dict[str, str]:
        """Each node's name -> its address, as the scheduler knows it (Slurm's NodeAddr)."""
        nodes = json.loads(self.bed.run("sinfo", "--json").stdout)["nodes"]
        return {n["name"]: n["address"] for n in nodes}

    def preempt(self, tmp_path, study: str, node: str | None = None) -> None:
        """Higher-tier work that takes GPUs back: a prod job asking for a whole node's 4 GPUs."""
        prod = self.bed.run(
            "sbatch",
            "--parsable",
            "-p",
            "prod",
            "--gres=gpu:4",
            *([f"--nodelist={node}"] if node else []),
            "--job-name=prod-urgent",
            "--output=/dev/null",
            "--wrap",
            "sleep 2",
        ).stdout.strip()
        assert prod.isdigit(), prod


@dataclass
class Yarn:
    bed: Any
    name = "yarn"
    title = "YARN"
    controller = "YARN ResourceManager"
    preemption = "next attempt"
    drain = "kill"
    done = "FINISHED"  # the RM's state of an application that ended (finalStatus SUCCEEDED)
    stopped = "KILLED"  # of one the pruner stopped (killed through the RM)

    def header(self, queue: str = "research", extra: str = "") -> str:
        return f'backend: yarn\nyarn: {{resource_managers: ["{self.bed.rm}"], queue: {queue}{extra}}}\n'

    requests = "requests: {memory: 256Mi}, "

    def records(self, study: str) -> dict[str, list[dict]]:
        """trial -> its applications, oldest first."""
        out: dict[str, list[dict]] = {}
        for app in self.bed.apps(study):
            out.setdefault(tag(app, "trial"), []).append(app)
        return out

    @staticmethod
    def attempt_of(record: dict) -> int:
        return int(tag(record, "n"))

    @staticmethod
    def state(record: dict) -> str:
        return record["state"]

    def running(self, study: str) -> int:
        """Applications whose whole gang runs (the gang AM's progress at 50% or more)."""
        return sum(a["state"] == "RUNNING" and a["progress"] >= 50 for a in self.bed.apps(study))

    def full(self) -> bool:
        """Every GPU of the testbed taken."""
        return self.bed.free_gpus() == 0

    @staticmethod
    def seconds(record: dict) -> float:
        return (record["finishedTime"] - record["launchTime"]) / 1000

    @staticmethod
    def port(record: dict) -> int:
        """The rendezvous port stratctl derives for the attempt: from its application's sequence number."""
        return rendezvous.derived_port(int(record["id"].rsplit("_", 1)[1]))

    def addresses(self) -> dict[str, str]:
        """Each NodeManager's host, as the RM reports it (the address of a node in the contract)."""
        return {n["nodeHostName"]: n["nodeHostName"] for n in self.bed.get("nodes")["nodes"]["node"]}

    def preempt(self, tmp_path, study: str, node: str | None = None) -> None:
        """Higher-tier work that takes GPUs back: a 4-GPU study in the prod queue, submitted and run to its end."""
        path = tmp_path / "prod.yaml"
        path.write_text(
            f"name: prod-{study}\n"
            + self.header("prod")
            + "space:\n  seed: {type: int, low: 0, high: 0, grid: true}\nstrategy: {kind: grid}\n"
            + 'trial:\n  command: ["sleep", "1"]\n'
            + "  resources: {requests: {memory: 256Mi}, limits: {nvidia.com/gpu: 4}}\n"
        )
        prod = self.bed.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
        assert prod.returncode == 0 and json.loads(prod.stdout)["succeeded"] == 1, prod.stderr[-2000:]


def tag(app: dict, key: str) -> str:
    return next(t.split(":", 1)[1] for t in app["applicationTags"].split(",") if t.startswith(f"stratctl-{key}:"))


BACKENDS = {"slurm": Slurm, "yarn": Yarn}
