"""What a running submission reports: one `Progress` snapshot per cycle, to any `Reporter`.

The submit loop fills it; the live display, the CI log lines, the Prometheus exporter and
the final summary read it. Keeping it apart from the loop lets presentation depend on
this data alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from stratctl.run.pace import Pressure


@dataclass
class Progress:
    """Everything the live display, the log lines and the final summary show."""

    study: str
    total: int
    created: int = 0  # created by this run
    existing: int = 0  # found already submitted (rerun, or another launcher)
    pending: int = 0
    queued: int = 0  # sent in a block (merged submissions) and held back by its throttle: not in flight
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    pruned: int = 0  # stopped early by a closed-loop search's pruner
    waiting: int = 0
    target: int = 0
    wanted: int = 0  # trials this cycle's decision let in (the GPUs had room for them)
    hold: bool = False
    reason: str = ""
    throttle_waits: int = 0
    throttle_wait_seconds: float = 0.0
    throttled_429: int = 0
    backend: str = "kubernetes"  # where the trials run: kubernetes | slurm
    # on a batch scheduler (backends/batch/scheduler.py): the command that creates an attempt and what a
    # refusal to is called
    create_command: str = ""
    scheduler: str = ""  # its name in messages (`Slurm`)
    limit_words: str = ""
    calls_word: str = "commands"  # what its calls are (`commands` run, HTTP `requests`)
    api_writes: int = 0  # what the server stored (creates, patches, deletes)
    api_checks: int = 0  # writes it stored nothing for: access reviews, dry runs
    api_requests: int = 0
    api_sent: dict[str, int] = field(default_factory=dict)  # requests sent per kind ("create Job"), retries included
    api_refused: dict[str, int] = field(default_factory=dict)  # of those, refused with 429, per kind
    api: Pressure | None = None  # the request pace now (None before the first cycle)
    stuck: int = 0  # gangs pending longer than the grace period
    blocked: str = ""  # why they wait (the queue's state, the PodGroup's Unschedulable message); "" when none does
    free_gpus: int | None = None
    gangs_fit: int | None = None
    fragmentation: float | None = None
    latency_p90: float | None = None
    etcd_p99: float | None = None  # seconds, from --prometheus-url
    scheduling_latency_p90: float | None = None  # seconds, Volcano's e2e scheduling latency, from --prometheus-url
    breaker: str = ""  # where the etcd breaker of a study set to drain stands ("" while closed and quiet)
    watch_errors: int = 0  # failures of the loop's watches (jobs, nodes, pods, PodGroups) so far, recovered or not
    watch_problem: str | None = None  # which watch is broken now and why; None while every watch is healthy
    errors: dict[str, str] = field(default_factory=dict)  # trial -> why it could not be submitted
    conflicts: list[str] = field(
        default_factory=list
    )  # of those, trials whose objects in the cluster differ (spec hash)
    interrupted: bool = False
    handed_over: str = ""  # the driver this loop handed the study to (`submit --take-over`), or lost it to
    detached: bool = False
    timed_out: bool = False  # --timeout passed: the loop stopped, trials left running
    dry_run: str | None = None  # "client" | "server" when nothing was created

    @property
    def in_flight(self) -> int:
        return self.pending + self.running

    @property
    def done(self) -> bool:
        return self.succeeded + self.failed + self.pruned + len(self.errors) >= self.total

    @property
    def api_limited(self) -> bool:
        """The API quota, not the GPUs, limits the study now: the request pace is holding
        requests back (`Pressure.slowing`) while the GPUs have room for trials that wait
        (this cycle's decision let some in, or held them only because nothing is accepted)."""
        return bool(self.api and self.api.slowing and self.waiting and (self.wanted or self.api.stalled))

    @property
    def api_note(self) -> str | None:
        """`API quota: 12 × 429 in the last minute, pacing requests at 3/s, one request at a
        time; GPUs: target 16, in flight 9`, while the API quota pushes back; else None."""
        if not self.api or not self.api.tight:
            return None
        note = f"API quota: {self.api.describe()}; GPUs: target {self.target}, in flight {self.in_flight}"
        return note + (" — the API quota, not the GPUs, is the bottleneck" if self.api_limited else "")

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["in_flight"] = self.in_flight
        out["api"] = asdict(self.api) if self.api else None
        out["api_note"] = self.api_note
        return out


class Reporter(Protocol):
    def update(self, progress: Progress) -> None: ...

    def event(self, message: str) -> None: ...


class Silent:
    def update(self, progress: Progress) -> None:
        pass

    def event(self, message: str) -> None:
        pass


class Fanout:
    """Send every update and event to several reporters (display, metrics)."""

    def __init__(self, *reporters: Any) -> None:
        self.reporters = [r for r in reporters if r is not None]

    def update(self, progress: Progress) -> None:
        for r in self.reporters:
            r.update(progress)

    def event(self, message: str) -> None:
        for r in self.reporters:
            r.event(message)
