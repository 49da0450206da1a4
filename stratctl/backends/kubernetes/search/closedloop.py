"""The Kubernetes side of a closed-loop search (the shared part is run/closedloop.py): the
search's history read from the cluster alone — every trial's parameters and index from its
latest job's annotations, finished trials' values from their pods' results — and from the
study record's `told` key the trials whose jobs were cleaned up.

A trial's name and index are in the cluster as soon as its job is: a loop killed between
asking and creating loses only the ask, and the next one asks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stratctl.backends.kubernetes.objects.jobview import trial_of_job
from stratctl.backends.kubernetes.objects.state import classify
from stratctl.core.space import Trial
from stratctl.run import closedloop
from stratctl.run.closedloop import Seen


class ClosedLoop(closedloop.ClosedLoop):
    def rebuild_from_jobs(
        self,
        latest: Mapping[str, dict[str, Any]],
        results: Mapping[str, Mapping[str, Any]],
        told: Mapping[str, Mapping[str, Any]],
        marks: Mapping[str, Mapping[str, Any]] = {},
    ) -> list[Trial]:
        """`rebuild` from the trials' latest jobs (trial name -> job) and their results."""
        seen: Seen = {
            name: (trial, classify(job), results.get(name))
            for name, job in latest.items()
            if (trial := trial_of_job(job)) is not None
        }
        return self.rebuild(seen, told, marks)
