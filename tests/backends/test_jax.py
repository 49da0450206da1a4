"""A real framework's multi-process rendezvous through the contract, on each batch
backend's real testbed: the tasks of a trial of 2 and of 3 join JAX's distributed runtime
with the MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK the backend gave them
(examples/rendezvous/jax_check.py, JAX's CPU build in a virtualenv cached under
~/.cache/stratctl/), then gather their ranks and sum an array held across the processes;
the trial succeeds only if both are right."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.jaxenv import JAX_VERSION, jax_python

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rendezvous"

# each backend's example study: its file, its name there, its command as shipped
SHIPPED = {
    "slurm": (
        "jax-slurm.yaml",
        "jax-rendezvous",
        '  command: ["python3", "examples/rendezvous/jax_check.py", "--timeout", "120"]\n',
    ),
    "yarn": (
        "jax-yarn.yaml",
        "jax-rendezvous-yarn",
        """  command: ["bash", "-c",\n"""
        """            'exec python3 "$STRATCTL_OUTPUT_DIR/../../../examples/rendezvous/jax_check.py" """
        """--timeout 120']\n""",
    ),
}


def test_every_task_of_trials_of_2_and_3_meets_in_jax_distributed(backend, tmp_path):
    """The example study as shipped, its command run by the cached virtualenv's python (this
    checkout's stratctl.trial on PYTHONPATH: the library needs nothing else)."""
    bed = backend.bed
    python = jax_python()
    file, shipped_name, command = SHIPPED[backend.name]
    name = f"jax-rdv-{backend.name}-{int(time.time()) % 100000}"
    text = (EXAMPLE / file).read_text().replace(f"name: {shipped_name}\n", f"name: {name}\n")
    if backend.name == "yarn":
        text = text.replace("http://127.0.0.1:28088", bed.rm)
    assert command in text and f"name: {name}\n" in text
    text = text.replace(
        command,
        f'  command: ["{python}", "{EXAMPLE / "jax_check.py"}", "--timeout", "60"]\n  env: {{PYTHONPATH: "{REPO}"}}\n',
    )
    path = tmp_path / "study.yaml"
    path.write_text(text)
    done = bed.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    logs = "".join(p.read_text()[-1500:] for p in (tmp_path / "stratctl-out").glob("*/*/*.log"))
    assert done.returncode == 0, done.stderr[-2000:] + logs
    progress = json.loads(done.stdout)
    assert progress["succeeded"] == 2 and progress["failed"] == 0, done.stderr[-2000:] + logs
    attempts = {trial: a[-1] for trial, a in backend.records(name).items()}
    addr_of = backend.addresses()
    sizes = set()
    for trial in (tmp_path / "stratctl-out" / name).glob("[!.]*"):  # the trials' directories, not the study's own
        result = json.loads((trial / "result.json").read_text())
        n = result["world_size"]
        sizes.add(n)
        assert result["rendezvous"] == "ok" and result["framework"] == f"jax {JAX_VERSION}", result
        assert result["ranks"] == list(range(n))  # every process once, each where the contract put it
        assert result["sum"] == n * (n + 1) // 2  # one CPU device a process, each holding rank + 1
        # JAX's coordinator on rank 0's node address (as the scheduler knows it) and the attempt's own port
        assert result["master"] == f"{addr_of[result['nodes'][0]]}:{backend.port(attempts[trial.name])}", result
        assert len(result["nodes"]) == n and set(result["nodes"]) <= set(addr_of), result
        if backend.name == "slurm" and n == 3:  # 3 CPUs a task on 8-CPU nodes: ranks 0 and 1 on one node
            assert result["nodes"][0] == result["nodes"][1] != result["nodes"][2], result
    assert sizes == {2, 3}
