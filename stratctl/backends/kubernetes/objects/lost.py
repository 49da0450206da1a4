"""Lost jobs: a trial's Volcano Job that the job controller will never give pods.

Volcano's job controller creates a job's PodGroup as soon as it sees the job, and the
job's pods as soon as the scheduler has admitted the PodGroup (phase Inqueue). A gang
waiting for GPUs is normal, for hours: job Pending, PodGroup Pending, no pods. Not
normal: a job still Pending without a single pod a minute after its PodGroup was
admitted, or still without a PodGroup a minute after the loop first saw it. The
controller lost it (seen when the API server restarted under it) and nothing will happen
to it again; the submit loop replaces it with the trial's next attempt (salvage.py).

Pure: `symptom(job, podgroup, pods)` says what looks wrong now, `is_lost(job, podgroup,
pods, since, now)` whether it has looked so for long enough. Attempts of one trial lost
in a row (a controller that is down, not forgetful) are given twice as long each time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stratctl import labels
from stratctl.backends.kubernetes.objects.state import volcano_phase

LOST_AFTER = 60.0  # seconds a job may show a symptom before it counts as lost
LOST_AFTER_MAX = 960.0
LOST_BY_CONTROLLER = "lost by the job controller"
WAITING_PHASES = ("Pending", "Inqueue")  # a Volcano job's phases before any pod runs


def symptom(job: dict[str, Any], podgroup: dict[str, Any] | None, pods: list[dict[str, Any]]) -> str | None:
    """What says the job controller dropped this job, now: None for anything normal."""
    if not (job.get("apiVersion") or "").startswith("batch.volcano.sh/"):
        return None
    if volcano_phase(job) not in WAITING_PHASES or pods:
        return None
    if podgroup is None:
        return "no PodGroup"
    if ((podgroup.get("status") or {}).get("phase")) == "Inqueue":
        return "PodGroup Inqueue"
    return None  # Pending: the gang waits for the queue to admit it, as long as it takes


def losses(job: dict[str, Any]) -> int:
    """Attempts of the job's trial lost in a row before this one."""
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(labels.LOST, "0")
    return int(value) if str(value).isdigit() else 0


def patience(job: dict[str, Any]) -> float:
    """How long the job may show a symptom: LOST_AFTER, doubled per loss in a row before it."""
    return min(LOST_AFTER * (1 << min(losses(job), 10)), LOST_AFTER_MAX)


def is_lost(
    job: dict[str, Any], podgroup: dict[str, Any] | None, pods: list[dict[str, Any]], since: float | None, now: float
) -> bool:
    """The job shows a symptom and has since `since` (None: not seen before), for its patience."""
    return symptom(job, podgroup, pods) is not None and since is not None and now - since >= patience(job)


class Sightings:
    """Since when each job (by uid) has shown a symptom, on the loop's clock."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def update(self, showing: Iterable[str], now: float) -> dict[str, float]:
        """The jobs showing a symptom now: new ones from `now`; the others are forgotten."""
        self._since = {uid: self._since.get(uid, now) for uid in showing}
        return dict(self._since)

    def restart(self, uid: str, now: float) -> None:
        """Watch it again from `now` (a closer look found it well)."""
        if uid in self._since:
            self._since[uid] = now

    def reset(self) -> None:
        """Forget everything: while the API server was out nobody could create pods."""
        self._since.clear()
