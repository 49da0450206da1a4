"""Names a shell completes, read from the cluster within a budget of time.

A Tab must never hang the shell on a slow or unreachable cluster: the whole read (the
client's import included) runs in a background thread that gets `budget` seconds; past
them the completion offers nothing rather than wait.
"""

from __future__ import annotations

import threading
import time

from stratctl.engine.connect import Connection

BUDGET = 1.0  # seconds a Tab may take, all included


def within(work, budget: float = BUDGET) -> list[str]:
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


def study_names(connection: Connection, budget: float = BUDGET) -> list[str]:
    """The studies of the connection's namespace (their record ConfigMaps), in name order."""
    started = time.monotonic()

    def read() -> list[str]:
        from stratctl import labels
        from stratctl.kube.cluster import Cluster
        from stratctl.kube.outage import Outage
        from stratctl.kube.record import records

        left = max(0.05, budget - (time.monotonic() - started))
        cluster = Cluster.connect(connection.kubeconfig, connection.context, connection.namespace,
                                  pool_size=1, outage=Outage(left, first_patience=left))
        cluster.timeout = (left, left)
        try:
            found = records(cluster, cluster.namespace, None)
        finally:
            cluster.close()
        return sorted({(cm["metadata"].get("labels") or {}).get(labels.STUDY, "") for cm in found} - {""})

    return within(read, budget)
