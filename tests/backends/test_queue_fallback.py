"""Queue fallback on the real testbeds: a study listing queues (`queue: [a, b]`) whose first
is full runs its trials in the second.

- Slurm: one multi-partition submission (`--partition=edge,research`): Slurm starts each
  job in whichever listed partition can start it first. The testbed's partition `edge` is
  one node (sn4), filled here by one job taking its 4 GPUs.
- YARN: the application starts in the first queue, and one whose trial has not started
  past the bound (the loop's pending grace, 5 s) is moved to the next queue (`PUT
  /ws/v1/cluster/apps/{id}/queue`). The testbed's queue `prod` is capped at half the
  cluster here (its capacity-scheduler.xml edited and refreshed, restored after) and
  filled by a gang of 4 GPUs.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from tests.backends.testbeds import REPO

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
    slurm.wait_idle()  # sn4's GPUs free for the job that fills edge
    blocker = slurm.run(
        "sbatch",
        "--parsable",
        "--partition=edge",
        "--gpus=4",
        "--job-name=edge-full",
        "--output=/dev/null",
        "--wrap",
        "sleep 300",
    ).stdout.strip()
    try:
        slurm.wait("edge full", lambda: _state(slurm, blocker) == "RUNNING", timeout=60)
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
    # squeue --json lists every job whatever --jobs says (Slurm 22.05): picked by id
    listed = [j for j in json.loads(slurm.run("squeue", "--json").stdout)["jobs"] if str(j.get("job_id")) == job]
    return str(listed[0]["job_state"]) if listed else ""


def test_yarn_a_waiting_application_moves_to_the_next_queue_and_runs(yarn, tmp_path):
    if not yarn.local:
        import pytest

        pytest.skip("edits the testbed's capacity-scheduler.xml: the local testbed only")
    name = f"qfy-{int(time.time()) % 100000}"
    conf = Path(yarn.env["STRATCTL_YARN_RUN"]) / "etc" / "capacity-scheduler.xml"
    original = conf.read_text()
    capped = re.sub(
        r"(<name>yarn.scheduler.capacity.root.prod.maximum-capacity</name><value>)100(</value>)", r"\g<1>50\2", original
    )
    assert capped != original
    blocker = ""
    try:
        _refresh(yarn, conf, capped)
        yarn.wait_idle()
        blocker = subprocess.run(
            ["bash", str(REPO / "testbed" / "yarn" / "gang.sh"), "-q", "prod", "-n", "4", "-g", "1", "--no-wait"]
            + ["--", "sleep 300"],
            env={**__import__("os").environ, **yarn.env},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()[0]
        yarn.wait("prod full", lambda: yarn.free_gpus() == 4, timeout=60)
        path = tmp_path / "study.yaml"
        options = f'yarn: {{resource_managers: ["{yarn.rm}"]}}'
        path.write_text(
            STUDY.format(name=name, backend="yarn", full="prod", free="research", options=options, last=1).replace(
                "limits: {nvidia.com/gpu: 1}", "requests: {memory: 256Mi}, limits: {nvidia.com/gpu: 1}"
            )
        )
        started = time.monotonic()
        done = yarn.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path, timeout=90)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["succeeded"] == 2, done.stdout
        assert "moved: queue prod → research" in done.stderr, done.stderr[-3000:]
        apps = yarn.apps(name)
        # the same applications, moved (the RM names a moved one's queue by its path)
        assert len(apps) == 2 and {a["queue"] for a in apps} == {"root.research"}, apps
        assert {a["finalStatus"] for a in apps} == {"SUCCEEDED"}
        rows = json.loads(yarn.stratctl("status", str(path), "-o", "json", cwd=tmp_path).stdout)["trials"]
        assert [r["queue"] for r in rows] == ["research"] * 2
        assert time.monotonic() - started < 60
    finally:
        if blocker:
            yarn.kill(blocker)
        _refresh(yarn, conf, original)


def _refresh(yarn, conf: Path, text: str) -> None:
    conf.write_text(text)
    subprocess.run(
        ["bash", str(REPO / "testbed" / "yarn" / "yarn.sh"), "rmadmin", "-refreshQueues"],
        env={**__import__("os").environ, **yarn.env},
        capture_output=True,
        timeout=60,
        check=True,
    )
