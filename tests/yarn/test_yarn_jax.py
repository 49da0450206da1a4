"""A real framework's multi-process rendezvous through the contract, on a real
ResourceManager and real NodeManagers: the containers of a trial of 2 and of 3 join JAX's
distributed runtime with the MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK the gang AM gave
them (examples/rendezvous/jax_check.py, JAX's CPU build in a virtualenv cached under
~/.cache/stratctl/), then gather their ranks and sum an array held across the processes;
the trial succeeds only if both are right."""

from __future__ import annotations

import json
import time
from pathlib import Path

from stratctl import rendezvous
from tests.jaxenv import JAX_VERSION, jax_python

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rendezvous"


def test_every_container_of_trials_of_2_and_3_meets_in_jax_distributed(yarn, tmp_path):
    """The example study as shipped, its command run by the cached virtualenv's python (this
    checkout's stratctl.trial on PYTHONPATH: the library needs nothing else)."""
    python = jax_python()
    name = f"jax-rdv-yarn-{int(time.time()) % 100000}"
    text = (EXAMPLE / "jax-yarn.yaml").read_text().replace("name: jax-rendezvous-yarn", f"name: {name}")
    text = text.replace("http://127.0.0.1:28088", yarn.rm)
    command = (
        """  command: ["bash", "-c",\n"""
        """            'exec python3 "$STRATCTL_OUTPUT_DIR/../../../examples/rendezvous/jax_check.py" """
        """--timeout 120']\n"""
    )
    assert command in text
    text = text.replace(
        command,
        f'  command: ["{python}", "{EXAMPLE / "jax_check.py"}", "--timeout", "60"]\n  env: {{PYTHONPATH: "{REPO}"}}\n',
    )
    path = tmp_path / "study.yaml"
    path.write_text(text)
    done = yarn.stratctl("submit", str(path), "--poll-interval", "0.5", "-o", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["succeeded"] == 2 and json.loads(done.stdout)["failed"] == 0, done.stderr[-2000:]
    apps = {
        next(t.split(":", 1)[1] for t in a["applicationTags"].split(",") if t.startswith("stratctl-trial:")): a
        for a in yarn.apps(name)
    }
    hosts = {n["nodeHostName"] for n in yarn.get("nodes")["nodes"]["node"]}
    sizes = set()
    for trial in (tmp_path / "stratctl-out" / name).iterdir():
        result = json.loads((trial / "result.json").read_text())
        n = result["world_size"]
        sizes.add(n)
        assert result["rendezvous"] == "ok" and result["framework"] == f"jax {JAX_VERSION}", result
        assert result["ranks"] == list(range(n))  # every container once, each where the contract put it
        assert result["sum"] == n * (n + 1) // 2  # one CPU device a process, each holding rank + 1
        # JAX's coordinator on rank 0's NodeManager host and the application's own port
        host, port = result["master"].rsplit(":", 1)
        assert host in hosts and int(port) == rendezvous.derived_port(int(apps[trial.name]["id"].rsplit("_", 1)[1]))
        assert len(result["nodes"]) == n and set(result["nodes"]) <= hosts, result
    assert sizes == {2, 3}
