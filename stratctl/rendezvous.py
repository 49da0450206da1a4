"""The rendezvous contract: what every process of a trial learns about its peers, on every
backend (standard library only: the trial-side library reads it inside training scripts).

A trial of N nodes (pods, containers, Slurm tasks; one process per node) gives each of them:

- `STRATCTL_NUM_NODES`: N; `STRATCTL_NODE_RANK`: 0..N-1 over all tasks of the trial, in
  task order (the study's `trial.tasks`), then by index within the task;
- `STRATCTL_NODE_ADDRS`: every node's address, comma-separated, in rank order;
- `MASTER_ADDR` (rank 0's address) and `MASTER_PORT`, `WORLD_SIZE` (= N) and `RANK`
  (= the node rank), as torchrun and `torch.distributed` read them;
- `STRATCTL_TASK`: this process's role (its task's name), `STRATCTL_TASK_INDEX` its index
  within the role, `STRATCTL_TASKS` the roles in task order, and per role
  `STRATCTL_<ROLE>_HOSTS` (its nodes' addresses, comma-separated) and `STRATCTL_<ROLE>_NUM`,
  with `<ROLE>` the task name upper-cased, every character outside A-Z0-9 as `_`, so
  parameter-server and TF_CONFIG-style programs build their cluster spec from it.

`MASTER_PORT` is the trial's own: fixed (`FIXED_PORT`) where each pod has its own network
(Kubernetes), derived from the job's number where trials share a node's network (Slurm,
YARN: `derived_port`), so two trials on one node never collide.
"""

from __future__ import annotations

import re

NUM_NODES = "STRATCTL_NUM_NODES"
NODE_RANK = "STRATCTL_NODE_RANK"
NODE_ADDRS = "STRATCTL_NODE_ADDRS"
TASK = "STRATCTL_TASK"
TASK_INDEX = "STRATCTL_TASK_INDEX"
TASKS = "STRATCTL_TASKS"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
WORLD_SIZE = "WORLD_SIZE"
RANK = "RANK"

FIXED_PORT = 29500  # where every pod has its own network namespace (torchrun's default)
PORT_BASE = 20000  # derived ports: PORT_BASE .. PORT_BASE + PORT_SPAN - 1
PORT_SPAN = 20000


def role_key(role: str) -> str:
    """`parameter-server` -> `PARAMETER_SERVER`: the role's part of its variables' names."""
    return re.sub(r"[^A-Z0-9]", "_", role.upper())


def hosts_var(role: str) -> str:
    return f"STRATCTL_{role_key(role)}_HOSTS"


def num_var(role: str) -> str:
    return f"STRATCTL_{role_key(role)}_NUM"


def derived_port(job_number: int) -> int:
    """The rendezvous port of a job that shares its nodes' network with other jobs: one of
    PORT_SPAN ports, from the job's number (consecutive jobs get consecutive ports)."""
    return PORT_BASE + job_number % PORT_SPAN


def environment(roles: list[tuple[str, list[str]]], rank: int, port: int) -> dict[str, str]:
    """The whole contract for the node of rank `rank`, given each role's node addresses in
    task order (`[("ps", ["a", "b"]), ("worker", ["c"])]`) and the trial's port (pure: the
    backends that know every address before a task starts use it; the others compute the
    same variables in the job's own script)."""
    addrs = [addr for _, hosts in roles for addr in hosts]
    if not 0 <= rank < len(addrs):
        raise ValueError(f"rank {rank} outside 0..{len(addrs) - 1}")
    env = {
        NUM_NODES: str(len(addrs)),
        NODE_RANK: str(rank),
        NODE_ADDRS: ",".join(addrs),
        MASTER_ADDR: addrs[0],
        MASTER_PORT: str(port),
        WORLD_SIZE: str(len(addrs)),
        RANK: str(rank),
        TASKS: ",".join(role for role, _ in roles),
    }
    first = 0
    for role, hosts in roles:
        env[hosts_var(role)] = ",".join(hosts)
        env[num_var(role)] = str(len(hosts))
        if first <= rank < first + len(hosts):
            env[TASK], env[TASK_INDEX] = role, str(rank - first)
        first += len(hosts)
    return env
