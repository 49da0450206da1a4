"""A real framework's multi-process rendezvous through the contract, on real Slurm daemons:
the tasks of a trial of 2 and of 3 tasks join JAX's distributed runtime with MASTER_ADDR,
MASTER_PORT, WORLD_SIZE and RANK (examples/rendezvous/jax_check.py, JAX's CPU build in a
virtualenv cached under ~/.cache/stratctl/), then gather their ranks and sum an array held
across the processes; the trial succeeds only if both are right."""

from __future__ import annotations

import json
import time
from pathlib import Path

from stratctl import rendezvous
from tests.jaxenv import JAX_VERSION, jax_python

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rendezvous"


def node_addrs(slurm) -> dict[str, str]:
    """Each node's NodeAddr, as Slurm knows it."""
    return {n["name"]: n["address"] for n in json.loads(slurm.run("sinfo", "--json").stdout)["nodes"]}


def job_ids(slurm, name) -> dict[str, int]:
    """trial -> its job's id."""
    return {j["comment"].split("/")[1]: j["job_id"] for j in slurm.jobs(name)}


def test_every_task_of_trials_of_2_and_3_tasks_meets_in_jax_distributed(slurm, tmp_path):
    """The example study as shipped, its command run by the cached virtualenv's python (this
    checkout's stratctl.trial on PYTHONPATH: the library needs nothing else)."""
    python = jax_python()
    name = f"jax-rdv-{int(time.time()) % 100000}"
    text = (EXAMPLE / "jax-slurm.yaml").read_text().replace("name: jax-rendezvous", f"name: {name}")
    command = '  command: ["python3", "examples/rendezvous/jax_check.py", "--timeout", "120"]\n'
    assert command in text
    text = text.replace(
        command,
        f'  command: ["{python}", "{EXAMPLE / "jax_check.py"}", "--timeout", "60"]\n  env: {{PYTHONPATH: "{REPO}"}}\n',
    )
    path = tmp_path / "study.yaml"
    path.write_text(text)
    done = slurm.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    logs = "".join(p.read_text()[-1500:] for p in (tmp_path / "stratctl-out").glob("*/*/*.log"))
    assert done.returncode == 0, done.stderr[-2000:] + logs
    assert json.loads(done.stdout)["succeeded"] == 2 and json.loads(done.stdout)["failed"] == 0, logs
    ids, addr_of = job_ids(slurm, name), node_addrs(slurm)
    sizes = set()
    for trial in (tmp_path / "stratctl-out" / name).iterdir():
        result = json.loads((trial / "result.json").read_text())
        n = result["world_size"]
        sizes.add(n)
        assert result["rendezvous"] == "ok" and result["framework"] == f"jax {JAX_VERSION}", result
        assert result["ranks"] == list(range(n))  # every process once, each where the contract put it
        assert result["sum"] == n * (n + 1) // 2  # one CPU device a process, each holding rank + 1
        # JAX's coordinator on rank 0's node address (as Slurm knows it) and the job's own port
        assert result["master"] == f"{addr_of[result['nodes'][0]]}:{rendezvous.derived_port(ids[trial.name])}"
        assert len(result["nodes"]) == n and set(result["nodes"]) <= set(addr_of)
        if n == 3:  # 3 CPUs a task on 8-CPU nodes: ranks 0 and 1 on one node, rank 2 on another
            assert result["nodes"][0] == result["nodes"][1] != result["nodes"][2], result
    assert sizes == {2, 3}
