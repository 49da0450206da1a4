"""One attempt of one trial as a batch scheduler shows it, the same on every backend that
runs an attempt as one scheduler job (Slurm, YARN): each backend reads it from its own
objects and the shared attempt loop (backends/batch/loop.py) decides on it alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from stratctl.trialstate import TrialState


@dataclass(frozen=True)
class Attempt:
    trial: str
    attempt: int  # 0 for the first; each failure or preemption that needs a new job adds one
    state: TrialState
    job: str = ""  # the scheduler's id of it (a Slurm job id, a YARN application id)
    native_state: str = ""  # the scheduler's own word for its state (squeue's job_state)
    reason: str = ""  # why a pending attempt waits, in the scheduler's words
    restarts: int = 0  # times the scheduler itself requeued it (preemptions): never failures
    spec_hash: str = ""
    exit_code: int | None = None
    waits_for_capacity: bool = False  # pending for GPUs (resources, priority), not for a limit or a hold
    waits_for_limits: bool = False  # pending for a quota or submit limit the scheduler enforces
    started: float | None = None  # wall time its current run started (None before it runs)
    ended: float | None = None  # wall time it ended (None while pending or running)
    earlier_seconds: float = 0.0  # run time of the trial's earlier attempts (each failed or was lost)
    # of the earlier attempts, how many failed (None: all of them, as where a preemption
    # requeues the same job and only a failure makes a new attempt: Slurm) and how many
    # were preempted (where a preemption ends the attempt and the next one resumes: YARN)
    failures_before: int | None = None
    preempted_before: int = 0
    # merged submissions (core/merging.py): the block (a Slurm job array) that carries the
    # trial's first attempt, and whether the block's own throttle still holds it back
    # (queued: not in flight, not due either)
    block: str = ""
    queued: bool = False
    # where it waits or ran: a Slurm job's partition (the one it started in, of a study's list
    # of partitions), a YARN application's queue; "" when the scheduler does not say
    queue: str = ""

    @property
    def failures(self) -> int:
        """Failed attempts of the trial before this one."""
        return self.attempt if self.failures_before is None else self.failures_before

    @property
    def preemptions(self) -> int:
        """Times the trial was preempted, this attempt included."""
        return self.restarts + self.preempted_before + (self.state is TrialState.PREEMPTED)

    def run_seconds(self, now: float) -> float:
        """How long this attempt has run (its current run, to `now` while it runs)."""
        if self.started is None:
            return 0.0
        return max(0.0, (self.ended if self.ended is not None else now) - self.started)


DRAINED = "drained"  # the study's drained flag: a file in its output directory
RESULT = "result.json"  # what a trial's attempt writes as its result, in the trial's directory
GIVEN_UP = "given-up"  # a trial recovery gave up (run/recovery.py): a file in its directory, saying why


class StudyFiles:
    """What a study on a batch scheduler keeps in its output directory (`output`, the
    directory of its trials' directories): the drained flag `stratctl drain` sets and
    `resume` clears, and each trial's result."""

    output: Path

    def result(self, trial: str) -> dict[str, Any] | None:
        try:
            value = json.loads((self.output / trial / RESULT).read_text())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def given_up(self) -> dict[str, str]:
        """The trials recovery gave up (preempted or failed more often than allowed) -> why."""
        out = {}
        for mark in self.output.glob(f"*/{GIVEN_UP}"):
            try:
                out[mark.parent.name] = mark.read_text().strip()
            except OSError:
                continue
        return out

    def mark_given_up(self, trial: str, reason: str) -> None:
        """Record that recovery gave the trial up: no later run submits it again."""
        (self.output / trial).mkdir(parents=True, exist_ok=True)
        (self.output / trial / GIVEN_UP).write_text(f"{reason}\n")

    def drained(self) -> bool:
        return (self.output / DRAINED).exists()

    def set_drained(self, on: bool) -> None:
        if on:
            self.output.mkdir(parents=True, exist_ok=True)
            (self.output / DRAINED).write_text("drained by stratctl drain; `stratctl resume` removes this file\n")
        else:
            (self.output / DRAINED).unlink(missing_ok=True)


class Counting(Protocol):
    """A scheduler's client, counting what it sends."""

    calls: int  # calls made
    sent: dict[str, int]  # calls made, by kind
    refused: dict[str, int]  # of those, refused as pressure


class Counted:
    """A scheduler's counters for the submit summary, kept by its client (`client`)."""

    client: Counting

    @property
    def calls(self) -> int:
        return self.client.calls

    @property
    def sent(self) -> dict[str, int]:
        return self.client.sent

    @property
    def refused(self) -> dict[str, int]:
        return self.client.refused
