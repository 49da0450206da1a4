"""A submit loop's heartbeat, the same on every backend: a marker it rewrites while it runs
(Kubernetes: in the study's record; Slurm and YARN: in the study directory), read by `wait`
and `delete` to tell whether anything still follows the study."""

from __future__ import annotations

from typing import Any


def live(marker: object, now: float, stale: float) -> dict[str, Any] | None:
    """The marker, if it says a loop was running no more than `stale` seconds before wall
    time `now`; else None (no marker, a loop that said it stopped, or one gone quiet)."""
    if not isinstance(marker, dict) or marker.get("running") is not True:
        return None
    at = marker.get("at")
    if isinstance(at, bool) or not isinstance(at, int | float) or now - at > stale:
        return None
    return marker
