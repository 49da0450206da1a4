"""Names a shell completes, read from the cluster within a budget of time.

A Tab must never hang the shell on a slow or unreachable cluster: the whole read (the
client's import included) runs in a background thread that gets what is left of `budget`
seconds since `started`; past them the completion offers nothing rather than wait. With
the interpreter's start and exit, a Tab on a silent server takes about a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

BUDGET = 0.8  # seconds a completion callback may take, imports included


def within(work: Callable[[], Iterable[str]], budget: float = BUDGET) -> list[str]:
    """`work()`'s names if it returns within `budget` seconds, else none; never raises."""
    names: list[str] = []

    def run() -> None:
        try:
            names.extend(work())
        except Exception:  # a completion says nothing rather than print an error into the shell
            pass

    thread = threading.Thread(target=run, name="complete", daemon=True)
    thread.start()
    thread.join(budget)
    return [] if thread.is_alive() else list(names)


def study_names(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    budget: float = BUDGET,
    started: float | None = None,
) -> list[str]:
    """The studies of the namespace (their record ConfigMaps), in name order, if read within
    `budget` seconds from `started` (default: now)."""
    started = time.monotonic() if started is None else started

    def read() -> list[str]:
        from stratctl import labels
        from stratctl.backends.kubernetes.api.cluster import Cluster
        from stratctl.backends.kubernetes.objects.record import records
        from stratctl.run.outage import Outage

        left = max(0.05, budget - (time.monotonic() - started))
        cluster = Cluster.connect(kubeconfig, context, namespace, pool_size=1, outage=Outage(left, first_patience=left))
        cluster.timeout = (left, left)
        try:
            found = records(cluster, cluster.namespace, None)
        finally:
            cluster.close()
        return sorted({(cm["metadata"].get("labels") or {}).get(labels.STUDY, "") for cm in found} - {""})

    return within(read, max(0.0, budget - (time.monotonic() - started)))
