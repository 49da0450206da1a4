"""What `submit` was asked on its command line, and the in-flight policy it makes of it."""

from __future__ import annotations

from dataclasses import dataclass

from stratctl.core.spec import Study
from stratctl.run.policy import AdaptiveConfig, AdaptivePolicy, StaticPolicy


@dataclass(frozen=True)
class SubmitOptions:
    max_inflight: int | None = None  # None: the study's parallelism.max
    dry_run: str | None = None  # None | "client" | "server"
    detach: bool = False
    poll_interval: float = 2.0
    workers: int = 16
    parallelism: str = "adaptive"  # "adaptive" | "static"
    pending_grace: float = 5.0  # seconds a gang may wait for the scheduler before it counts as stuck
    prometheus_url: str | None = None  # etcd and Volcano scheduler metrics, when the cluster has Prometheus
    outage_timeout: float = 300.0  # seconds the API server may not answer before the loop gives up
    timeout: float | None = None  # seconds after which the loop stops, trials left running (--timeout)
    move_waiting: bool = False  # take not-started gangs out of a full queue into one of the study's with room
    take_over: bool = False  # ask the study's live driver to hand it over (run/driver.py)
    in_cluster: bool = False  # hand the study to a driver in the cluster (backends/incluster.py)
    storage: str | None = None  # an Optuna storage URL the closed-loop search is mirrored into (run/storage.py)

    def given(self) -> list[str]:
        """The options a backend may not support (core/capabilities.py OPTIONS) that are
        given, as the command line spells them."""
        return [
            option
            for option, on in (
                ("--storage", self.storage),
                ("--move-waiting", self.move_waiting),
                ("--dry-run=server", self.dry_run == "server"),
                ("--prometheus-url", self.prometheus_url),
                ("--in-cluster", self.in_cluster),
            )
            if on
        ]


def default_policy(study: Study, options: SubmitOptions, start_free: bool = False) -> StaticPolicy | AdaptivePolicy:
    """Adaptive within the study's parallelism bounds; `--max-inflight` caps it. `start_free`:
    the first target from the free GPUs when the study starts on an idle cluster (run/policy.py)."""
    bounds = study.throttle.parallelism
    cap = options.max_inflight or bounds.max
    if options.parallelism == "static":
        return StaticPolicy(cap)
    return AdaptivePolicy(
        AdaptiveConfig(min=min(bounds.min, cap), initial=min(bounds.initial, cap), max=cap, start_free=start_free)
    )
