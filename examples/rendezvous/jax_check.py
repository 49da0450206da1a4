"""Check stratctl's rendezvous contract with a real framework: JAX's multi-process runtime.

Run as the command of every task of a trial (`examples/rendezvous/jax-slurm.yaml`), in a
python with `jax[cpu]` (about 100 MB: no GPU needed) and stratctl. Each process reads its
place from the contract (`stratctl.trial.contract()`: MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK) and joins JAX's distributed runtime with it:

    jax.distributed.initialize(coordinator_address=f"{MASTER_ADDR}:{MASTER_PORT}",
                               num_processes=WORLD_SIZE, process_id=RANK)

Rank 0 runs the coordinator on MASTER_ADDR:MASTER_PORT; then every process takes part in
two computations across the processes: an all-gather of each one's rank and node (every
rank must appear exactly once, in order) and a sum over a global array of which each
process holds one row (`jnp.sum` of an array sharded over every process's devices: an
all-reduce). Rank 0 writes the outcome as the trial's result (`stratctl.trial.result`:
result.json on Slurm and YARN, the termination message on Kubernetes) and on stdout;
every process exits 0 only if both computations gave what the contract implies.

    python jax_check.py [--timeout 120]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

try:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
except ImportError:
    sys.exit(f"{sys.argv[0]}: JAX is not installed in {sys.executable}: pip install 'jax[cpu]'")
try:
    from stratctl import trial
except ImportError:
    sys.exit(f"{sys.argv[0]}: stratctl is not installed in {sys.executable}: pip install stratctl")


class Broken(Exception):
    """A computation across the processes did not give what the contract implies."""


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or os.environ.get("NM_HOST") or socket.gethostname()


def check(c: trial.Contract) -> dict:
    """The two computations across every process, checked; what rank 0 reports."""
    n = c.num_nodes
    if (jax.process_count(), jax.process_index()) != (n, c.rank):
        raise Broken(f"JAX says process {jax.process_index()} of {jax.process_count()}, stratctl rank {c.rank} of {n}")
    # every process's rank, and its node's name as bytes (padded): gathered on every process
    name = node_name().encode()[:64].ljust(64, b"\0")
    ranks = np.asarray(multihost_utils.process_allgather(jnp.array([c.rank], dtype=jnp.int32))).reshape(-1).tolist()
    names = np.asarray(multihost_utils.process_allgather(jnp.frombuffer(name, dtype=jnp.uint8)))
    nodes = [bytes(row).rstrip(b"\0").decode() for row in names.reshape(n, 64)]
    if ranks != list(range(n)):
        raise Broken(f"the all-gather of the ranks gave {ranks}, not {list(range(n))}")
    # a global array, one row of rank+1 per process, summed where the rows are: an all-reduce
    devices = np.array(jax.devices()).reshape(n, -1)  # one row of devices per process
    mesh = Mesh(devices, ("process", "local"))
    local = np.full((1, devices.shape[1]), c.rank + 1, dtype=np.int32)
    rows = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("process", "local")), local)
    total = int(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))(rows))
    want = devices.shape[1] * n * (n + 1) // 2
    if total != want:
        raise Broken(f"the sum across the processes gave {total}, not {want}")
    return {
        "rendezvous": "ok",
        "framework": f"jax {jax.__version__}",
        "world_size": n,
        "ranks": ranks,
        "nodes": nodes,
        "sum": total,
        "master": f"{c.master_addr}:{c.master_port}",
        "resumed": trial.resuming(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=int, default=120, help="seconds to wait for every process to join")
    args = parser.parse_args(argv)
    began = time.monotonic()
    try:
        c = trial.contract()
        jax.distributed.initialize(
            coordinator_address=f"{c.master_addr}:{c.master_port}",
            num_processes=c.num_nodes,
            process_id=c.rank,
            initialization_timeout=args.timeout,
        )
        try:
            outcome = check(c)
        finally:
            jax.distributed.shutdown()
    except (Broken, ValueError, RuntimeError) as exc:  # JAX's own failures to meet are RuntimeErrors
        print(f"jax_check (rank {os.environ.get('RANK', '?')}): {exc}", file=sys.stderr)
        return 1
    if c.rank == 0:
        outcome["seconds"] = round(time.monotonic() - began, 1)
        trial.result(**outcome)
        print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
