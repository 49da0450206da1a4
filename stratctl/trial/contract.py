"""What a running trial is told: its place in the gang (the rendezvous contract of
stratctl/rendezvous.py, read back as one object), its parameters, and which backend runs it.

Every reader takes the environment as an argument (default: the process's own), so a test
or a launcher can ask about another process's environment. Absent variables mean a script
run by hand: one node of rank 0 on this machine, which is what a single-node program needs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stratctl import labels, rendezvous

LOCAL_ADDR = "127.0.0.1"  # rank 0's address when nothing says otherwise: a script run by hand
OUTPUT_DIR = "STRATCTL_OUTPUT_DIR"  # the trial's directory on Slurm and YARN (their job scripts set it)
DEFAULT_TASK = "worker"  # the task of a study that names none (core/spec.py)


@dataclass(frozen=True)
class Role:
    """One task of the trial (workers, parameter servers, ...) and its nodes' addresses."""

    name: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Contract:
    """This process's place in its trial: N nodes, one process per node, ranks 0..N-1 over
    the roles in task order. `master_addr:master_port` is where rank 0 listens."""

    num_nodes: int = 1
    rank: int = 0
    addrs: tuple[str, ...] = (LOCAL_ADDR,)
    master_addr: str = LOCAL_ADDR
    master_port: int = rendezvous.FIXED_PORT
    task: str = DEFAULT_TASK
    task_index: int = 0
    roles: tuple[Role, ...] = field(default=(Role(DEFAULT_TASK, (LOCAL_ADDR,)),))

    @property
    def is_master(self) -> bool:
        return self.rank == 0

    def hosts(self, role: str) -> tuple[str, ...]:
        """The addresses of a role's nodes (empty for a role the trial does not have)."""
        return next((r.hosts for r in self.roles if r.name == role), ())


def contract(env: Mapping[str, str] | None = None) -> Contract:
    """The rendezvous contract from the environment; ValueError, naming the variable, when
    a variable is malformed or contradicts another (a backend's bug, never to guess around)."""
    env = os.environ if env is None else env
    num = _int(env, rendezvous.NUM_NODES, 1)
    rank = _int(env, rendezvous.NODE_RANK, 0)
    master = env.get(rendezvous.MASTER_ADDR) or None
    addrs = _list(env.get(rendezvous.NODE_ADDRS))
    if not addrs:
        if num > 1:
            raise ValueError(f"{rendezvous.NUM_NODES}={num} but {rendezvous.NODE_ADDRS} is not set")
        addrs = (master or LOCAL_ADDR,)
    if len(addrs) != num:
        raise ValueError(f"{rendezvous.NODE_ADDRS} lists {len(addrs)} addresses for {rendezvous.NUM_NODES}={num}")
    if not 0 <= rank < num:
        raise ValueError(f"{rendezvous.NODE_RANK}={rank} outside 0..{num - 1}")
    names = _list(env.get(rendezvous.TASKS))
    task = env.get(rendezvous.TASK) or (names[0] if names else DEFAULT_TASK)
    if names:
        roles = tuple(Role(name, _list(env.get(rendezvous.hosts_var(name)))) for name in names)
    else:  # one role holding every node: what a single-task trial is
        roles = (Role(task, addrs),)
    return Contract(
        num_nodes=num,
        rank=rank,
        addrs=addrs,
        master_addr=master or addrs[0],
        master_port=_int(env, rendezvous.MASTER_PORT, rendezvous.FIXED_PORT),
        task=task,
        task_index=_int(env, rendezvous.TASK_INDEX, 0),
        roles=roles,
    )


def params(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The trial's parameters (`{"lr": 0.01, ...}`); empty when run by hand."""
    env = os.environ if env is None else env
    text = env.get(labels.ENV_PARAMS)
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{labels.ENV_PARAMS} is not a JSON object: {text[:80]!r}")
    return value


def backend(env: Mapping[str, str] | None = None) -> str:
    """Which backend runs this process: "kubernetes", "slurm", "yarn", or "local" (no trial:
    a script run by hand)."""
    env = os.environ if env is None else env
    if env.get(OUTPUT_DIR):  # only the Slurm and YARN job scripts set it
        # every Slurm job step has SLURM_JOB_ID; a YARN container has none
        return "slurm" if env.get("SLURM_JOB_ID") else "yarn"
    if env.get(labels.ENV_TRIAL):  # stamped on every trial's containers; on Kubernetes alone without an output dir
        return "kubernetes"
    return "local"


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number") from None


def _list(text: str | None) -> tuple[str, ...]:
    return tuple(part for part in (text or "").split(",") if part)
