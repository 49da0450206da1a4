"""Shedding: the submit loop drains its study while etcd is in trouble (`throttle.on_breaker: drain`).

**Which breaker drains.** Only the etcd-latency breaker (etcd's p99 latency, as the API server sees it, from
Prometheus). It speaks for the control plane that every client of the cluster shares, and
running gangs keep it busy (pod status updates, leases, events, the scheduler's binds, the
job controller's writes): suspending non-critical trials takes load off it for the work
that matters, as the design's "pause non-critical search" asks. The API stall (nothing of
ours accepted, our requests refused with 429) only holds new trials, whatever the setting:
it says the user's own API quota is spent, which running trials do not use, and draining
them would spend that quota on deletes now and creates later.

**How.** When the breaker trips (`run/breaker.py`: hysteresis, so it neither trips on a
spike nor flaps on a noisy recovery), the loop sets a flag of its own in the study record
(`breaker`, beside a user's `drained`) and suspends the study's running and pending
attempts with `drain.suspend`, the machinery of `stratctl drain` (marks in the record, then
the jobs deleted, each mark saying `by: breaker`). While the flag is up the loop admits
nothing and `requeue` holds the suspended trials; trials that run anyway (a user's `resume`
while the breaker holds) are suspended too. When it clears the loop lowers its flag and
`requeue` brings each trial back as its next attempt, resuming from its checkpoint, unless a
user's `drain` holds the study: the loop never touches that flag, and a user's `resume`
leaves the breaker's marks to the loop. A flag left by a loop that stopped is lowered by
the next loop on its first cycle (its breaker starts closed) or by `resume`.

Critical studies are never drained: their loop holds new trials, as with `hold`. With `hold`
(the default) nothing here acts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stratctl.backends.kubernetes.api.cluster import CONFIGMAP
from stratctl.backends.kubernetes.objects.record import BREAKER_KEY, breaker_value, job_kinds, parse_record, record_name
from stratctl.backends.kubernetes.verbs.drain import BREAKER, suspend
from stratctl.core.spec import Study
from stratctl.run import breaker
from stratctl.run.breaker import BreakerConfig, BreakerState
from stratctl.run.policy import Observed

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster


class Shedding:
    """The breaker drain of one submit loop; `step` once per cycle."""

    def __init__(
        self,
        cluster: Cluster,
        study: Study,
        say: Callable[[str], None],
        clock: Callable[[], float],
        wall: Callable[[], float],
        config: BreakerConfig = BreakerConfig(),
    ):
        self.cluster = cluster
        self.study = study
        self.say = say
        self.clock = clock  # the loop's clock: the breaker's streaks
        self.wall = wall  # the record's times and the marks' accounting, compared with the API server's
        self.config = config
        self.enabled = study.throttle.on_breaker == "drain"
        self.state = BreakerState()
        self.reason = ""  # the record's breaker flag as this loop knows it ("" when lowered)
        self.at: float | None = None  # wall time it was raised
        self._latency: float | None = None
        self._read = False  # whether the record's flag was read (a flag an earlier loop left)

    def step(self, observed: Observed, record: dict[str, Any] | None) -> Observed:
        """Feed the breaker this cycle's etcd reading; drain or resume the study when it moves.
        What the policy then sees: drained while the breaker holds the study."""
        if not self.enabled:
            return observed
        now, self._latency = self.clock(), observed.etcd_p99
        was = self.state.tripped
        self.state = breaker.step(self._latency, self.config, self.state, now)
        if self.study.critical:
            if self.state.tripped and not was:
                self.say(
                    f"etcd breaker tripped ({self._ms()} above {self.config.high * 1000:.0f}ms for "
                    f"{self.config.persist:.0f}s): study {self.study.name} is critical, not drained; "
                    "new trials held while etcd is slow"
                )
            return observed
        if not self._read and record is not None:
            self._read = True
            left = parse_record(record)
            self.reason, self.at = left.breaker, left.breaker_at
        if self.state.tripped and not self.reason:
            self._trip()
        elif not self.state.tripped and self.reason:
            self._clear(was, record is not None and parse_record(record).drained)
        elif self.reason and observed.in_flight:
            self._suspend()  # trials that started while the breaker holds the study
        if not self.reason or observed.drained:  # a user's drain says why itself
            return observed
        return replace(observed, drained=True, drained_by=f"etcd breaker: {self.reason}")

    def panel(self) -> str:
        """The breaker's line in the live panel: '' while it is closed and nothing moves it."""
        if not self.enabled:
            return ""
        where = breaker.describe(self._latency, self.config, self.state, self.clock())
        if self.study.critical:
            return where and f"{where} (critical: holds, never drains)"
        return where

    def _ms(self) -> str:
        return "no reading" if self._latency is None else f"etcd p99 {self._latency * 1000:.0f}ms"

    def _flag(self, reason: str, at: float | None) -> None:
        self.cluster.patch(
            CONFIGMAP,
            record_name(self.study.name),
            {"data": {BREAKER_KEY: breaker_value(reason, at)}},
            self.study.namespace,
        )
        self.reason, self.at = reason, at

    def _suspend(self) -> list[str]:
        cm = self.cluster.get(CONFIGMAP, record_name(self.study.name), self.study.namespace)
        return suspend(
            self.cluster,
            self.study.namespace,
            self.study.name,
            job_kinds(parse_record(cm).source),
            self.wall(),
            by=BREAKER,
        )

    def _trip(self) -> None:
        # the flag before the marks before the deletes: a loop that sees a job gone sees why
        self._flag(
            f"{self._ms()} above {self.config.high * 1000:.0f}ms for {self.config.persist:.0f}s, "
            "non-critical trials drained",
            self.wall(),
        )
        suspended = self._suspend()
        self.say(
            f"etcd breaker tripped ({self.reason}): suspended {len(suspended)} trial(s) of "
            f"{self.study.name}; they resume from their checkpoints when it clears"
        )

    def _clear(self, was: bool, drained: bool) -> None:
        self._flag("", None)
        then = (
            f"the study stays drained by `stratctl drain` until `stratctl resume {self.study.name}`"
            if drained
            else f"suspended trials of {self.study.name} resume"
        )
        if was:
            self.say(
                f"etcd breaker cleared ({self._ms()}, below {self.config.low * 1000:.0f}ms for "
                f"{self.config.clear:.0f}s): {then}"
            )
        else:
            self.say(f"etcd breaker flag left by an earlier run lowered (this loop's breaker is closed): {then}")
