"""Connecting commands to the cluster: the gate every request passes, and how long a
command waits for an API server that does not answer or throttles its user.

`submit` runs for hours, so it rides out an API server restart or a paused etcd: its
requests keep being retried until the server has been silent for `--outage-timeout`
(`SubmitOptions.outage_timeout`, 5 minutes by default). `status`, `drain` and `resume` are
one-shot, with someone waiting at a terminal: they retry for `ONE_SHOT_PATIENCE` seconds, then say the server is
unreachable (exit 3). Either way a command that never reached the server at all (a wrong
kubeconfig, a server down from the start) gives up after `ONE_SHOT_PATIENCE`.

A server that answers 429 to every request (API Priority and Fairness throttling this
user: another tenant's storm, or the user's own other processes) is waited out with the
same bound, from the command's first request on (`/version`, the access reviews, the
record): one line says the server is throttling this user and for how long the command
waits; past the bound the command ends with one line that says so (exit 3).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stratctl.errors import Throttled
from stratctl.run.outage import Outage, duration
from stratctl.run.throttle import Backoff, Throttle

if TYPE_CHECKING:  # the client's modules (urllib3, its TLS): loaded by the commands that connect, not by
    # every one that names a Connection (a Slurm or YARN submit: about 40 ms)
    from stratctl.backends.kubernetes.api.cluster import Cluster

ONE_SHOT_PATIENCE = 25.0  # seconds without an answer before status, drain or resume give up
# seconds `submit` waits for the API server's first answer (its preflight is the first contact):
# a server that cannot be reached at the start is reported at once; once it has answered, an
# outage is a pause (`--outage-timeout`)
START_PATIENCE = 8.0
# one-shot retries: short waits, and as many as fit in the patience (the outage ends them)
ONE_SHOT_BACKOFF = Backoff(base=0.5, cap=4.0, max_attempts=1000)


def throttling_notice(error: Throttled, patience: float) -> str:
    """The line said when every request starts being refused: who throttles, and for how long
    the command waits."""
    after = f", Retry-After {error.retry_after:g}s" if error.retry_after is not None else ""
    return (
        f"the API server is throttling this user (HTTP {error.status}{after}); waiting for it, "
        f"up to {duration(patience)}"
    )


QUIET = 30.0  # seconds after a throttling notice during which another episode's start is not told


def tell_throttling(throttle: Throttle, say: Callable[[str], None]) -> Throttle:
    """`throttle`, saying through `say` when requests start being refused: once, then again
    only after QUIET seconds, however choppy the storm (a storm refuses, lets one request
    through, refuses again). Throttles given its `on_throttled` (the preflight's) share that."""
    told = [float("-inf")]

    def tell(error: Throttled) -> None:
        now = throttle.clock()
        if now - told[0] >= QUIET:
            told[0] = now
            say(throttling_notice(error, throttle.patience))

    throttle.on_throttled = tell
    return throttle


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Connection:
    """Where to submit: kubectl's flags."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None


def connect(
    connection: Connection,
    namespace: str | None,
    throttle: Throttle,
    patience: float,
    pool_size: int = 32,
    first_patience: float | None = None,
) -> Cluster:
    """The cluster of a command, each request admitted by `throttle`, giving up after
    `patience` seconds without an answer (`first_patience`, default ONE_SHOT_PATIENCE, if it
    never had one)."""
    from stratctl.backends.kubernetes.api.cluster import Cluster

    first = ONE_SHOT_PATIENCE if first_patience is None else first_patience
    return Cluster.connect(
        connection.kubeconfig,
        connection.context,
        namespace,
        gate=throttle.call,
        pool_size=pool_size,
        outage=Outage(patience, first_patience=first),
    )


def one_shot(connection: Connection, pool_size: int = 8) -> Cluster:
    """The cluster of a command that reads or writes a few objects and exits: transient
    failures are retried, but after ONE_SHOT_PATIENCE seconds without an answer from the
    API server its requests raise `Unreachable`."""
    throttle = tell_throttling(Throttle(qps=0, burst=1, backoff=ONE_SHOT_BACKOFF, patience=ONE_SHOT_PATIENCE), _stderr)
    return connect(connection, connection.namespace, throttle, ONE_SHOT_PATIENCE, pool_size)


def preflight_gated(cluster: Cluster, throttle: Throttle) -> Cluster:
    """`cluster` for `submit`'s preflight: its few reads go at once (the study's request pace is
    for its loop) and are retried as a one-shot command's, within the loop's bound, their
    retries and 429s counted with the loop's (`throttle.stats`) and told as the loop's."""
    checker = Throttle(qps=0, burst=1, backoff=ONE_SHOT_BACKOFF, patience=throttle.patience)
    checker.stats = throttle.stats
    checker.on_throttled = throttle.on_throttled
    return cluster.with_gate(checker.call)
