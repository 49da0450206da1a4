"""The trial-side library: what a training script imports to take part in a stratctl study,
with the standard library alone (it never loads the CLI's dependencies).

    from stratctl import trial

    c = trial.contract()              # rank, num_nodes, master_addr:master_port, roles...
    last = trial.latest()             # the latest checkpoint, or None
    state = last.load() if last else new_state()
    trial.on_preempt(lambda: trial.save(state, state["step"]))  # SIGTERM: save, exit 143
    ...
    trial.report(step, loss=loss)     # for the study's pruner
    trial.result(loss=loss)           # the trial's result, where its backend reads it

Run by hand, outside any study, it behaves as one node of rank 0 on this machine.
"""

from stratctl.trial.checkpoint import (
    Checkpoints,
    Saved,
    atomic_write,
    checkpoint_dir,
    checkpoint_location,
    latest,
    resuming,
    save,
)
from stratctl.trial.contract import Contract, Role, backend, contract, params
from stratctl.trial.metrics import report, result
from stratctl.trial.preempt import on_preempt, preempted

__all__ = [
    "Checkpoints",
    "Contract",
    "Role",
    "Saved",
    "atomic_write",
    "backend",
    "checkpoint_dir",
    "checkpoint_location",
    "contract",
    "latest",
    "on_preempt",
    "params",
    "preempted",
    "report",
    "resuming",
    "result",
    "save",
]
