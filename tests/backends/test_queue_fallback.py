"""Queue fallback on the real testbeds: a study listing queues (`queue: [a, b]`) whose first
is full runs its trials in the second.

- Slurm: one multi-partition submission (`--partition=edge,research`): Slurm starts each
  job in whichever listed partition can start it first. The testbed's partition `edge` is
  one node (sn4), filled here by one job taking its 4 GPUs.
"""

from __future__ import annotations

import json
import time

STUDY = """\
name: {name}
backend: {backend}
queue: [{full}, {free}]
{options}
space:
  seed: {{type: int, low: 0, high: {last}, grid: true}}
strategy: {{kind: grid}}
trial:
  command: ["bash", "-c", "sleep 1; echo '{{\\"loss\\": 1}}' > \\"$STRATCTL_OUTPUT_DIR/result.json\\""]
  resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""


def test_slurm_trials_start_in_the_next_partition_while_the_first_is_full(slurm, tmp_path):
    name = f"qfb-{int(time.time()) % 100000}"
    blocker = slurm.run(
        "sbatch", "--parsable", "--partition=edge", "--gpus=4", "--job-name=edge-full", "--wrap", "sleep 300"
    ).stdout.strip()
    try:
        slurm.wait("edge full", lambda: _state(slurm, blocker) == "RUNNING", timeout=30)
        path = tmp_path / "study.yaml"
        text = STUDY.format(
            name=name, backend="slurm", full="edge", free="research", options="slurm: {time_limit: 5m}", last=2
        )
        path.write_text(text)
        done = slurm.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["succeeded"] == 3
        jobs = slurm.jobs(name)
        assert len(jobs) == 3 and {j["partition"] for j in jobs} == {"research"}, jobs
        rows = json.loads(slurm.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
        assert [r["queue"] for r in rows] == ["research"] * 3  # where each ran, not the list
        assert _state(slurm, blocker) == "RUNNING"  # edge stayed full throughout
    finally:
        slurm.run("scancel", blocker, check=False)


def _state(slurm, job: str) -> str:
    listed = json.loads(slurm.run("squeue", "--json", "--jobs", job).stdout)["jobs"]
    return str(listed[0]["job_state"]) if listed else ""
