"""One driver per study: the mark a submit loop holds while it drives a study, on every
backend (Kubernetes: a Lease; Slurm and YARN: a file in the study's directory).

A loop takes the mark before its first cycle and renews it as it cycles; a second `submit`
of a study whose mark is live is refused at once (exit 4), naming the holder and since
when. `--take-over` asks the holder to hand over: the holder reads the request at the start
of its next cycle, writes the mark over to the new driver and ends (exit 0, saying where the
study went), and only then does the new one cycle. The two never cycle at the same time, so
the trials are created once, the cap holds and a search asks no trial twice. A holder that
stopped renewing (killed, its laptop asleep) is taken over once its mark expires: `ttl`
seconds after its last renewal (`expiry(poll_interval)`: 30 s, or three cycles when a cycle
is longer), or at once when it was a process of this machine that no longer exists (a
submit killed with -9 and run again). A holder that comes back after that finds the mark
gone to another and ends.

The decisions are here; the backends keep the mark (`MarkStore`: read, compare-and-swap
write, remove), and the time comes from the caller's clock.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from stratctl.errors import ClusterError, ExitCode, StratctlError

TTL = 30.0  # seconds a mark lives without a renewal, at least
CYCLES = 3  # ... or this many cycles, when a cycle is longer
ASK_EVERY = 0.5  # seconds between two looks at the mark while a take-over waits for the holder
SLURM_JOB = "slurm job "  # how the mark names a driver that runs in a Slurm job
RACES = 20  # writes of the mark lost in a row to other writers before `acquire` gives up


def expiry(poll_interval: float) -> float:
    """How long a mark lives without a renewal, for a loop that cycles every `poll_interval` s."""
    return max(TTL, CYCLES * poll_interval)


def identity(env: dict[str, str] | None = None) -> str:
    """Who this driver is, as the mark names it: its pod and node when it runs in one (set by
    the driver's Job from the downward API); its Slurm job and node when it runs in one
    (`slurm job 812 on gpu-3`: a job Slurm requeued and started again on the same node is
    the same driver, and the scheduler tells whether that job still runs); else its host
    and process."""
    env = dict(os.environ) if env is None else env
    pod = env.get("STRATCTL_DRIVER_POD")
    if pod:
        node = env.get("STRATCTL_DRIVER_NODE")
        return f"pod {pod}" + (f" on {node}" if node else "")
    job, node = env.get("SLURM_JOB_ID"), env.get("SLURMD_NODENAME")
    if job and node:
        return f"{SLURM_JOB}{job} on {node}"
    return f"{socket.gethostname()} pid {os.getpid()}"


def gone(holder: str) -> bool:
    """Whether the driver `holder` is known to be dead: a process of this host that no longer
    exists (a submit killed with -9 and run again in the same terminal need not wait for its
    mark to expire). Any other holder is alive until its mark expires."""
    host, _, pid = holder.rpartition(" pid ")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


@dataclass(frozen=True)
class Mark:
    """Who drives the study, since when, when it last said so, for how long that holds, and
    who asked to take over ("" when nobody did)."""

    holder: str
    since: float
    renewed: float
    ttl: float
    take_over: str = ""

    def live(self, now: float) -> bool:
        return now - self.renewed < self.ttl


class MarkStore(Protocol):
    """Where a backend keeps a study's mark."""

    where: str  # what it is, for messages ("Lease stratctl-driver-sweep in research")

    def read(self) -> tuple[Mark | None, str]:
        """The mark (None when there is none) and its version ("" when there is none)."""
        ...

    def write(self, mark: Mark, version: str) -> bool:
        """Write `mark` if the stored one is still `version` (create it when ""); False when
        another write came first."""
        ...

    def remove(self, version: str) -> None:
        """Remove the mark if it is still `version`."""
        ...


class StudyHeld(StratctlError):
    """Another live driver holds the study."""

    exit_code = ExitCode.CONFLICT


class Driver:
    """This loop's hold on its study's mark."""

    def __init__(
        self,
        store: MarkStore,
        study: str,
        me: str,
        ttl: float = TTL,
        take_over: bool = False,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        say: Callable[[str], None] = lambda line: None,
        dead: Callable[[str], bool] = gone,
    ):
        self.store, self.study, self.me, self.ttl, self.take_over = store, study, me, ttl, take_over
        self.wall, self.sleep, self.say, self.dead = wall, sleep, say, dead
        self.renewed = 0.0  # when this driver last wrote its mark

    def acquire(self) -> None:
        """Take the mark before the first cycle: at once when it is free, expired or ours; from
        its live holder with `take_over` (once the holder handed it over, or its mark
        expired); else StudyHeld."""
        asked, raced = False, 0
        while True:
            mark, version = self.store.read()
            now = self.wall()
            dead = mark is not None and mark.holder != self.me and self.dead(mark.holder)
            if mark is None or mark.holder == self.me or not mark.live(now) or dead:
                if self.store.write(Mark(self.me, now, now, self.ttl), version):
                    self.renewed = now
                    if mark is not None and mark.holder != self.me:
                        why = "has ended" if dead else f"stopped renewing its mark {now - mark.renewed:.0f} s ago"
                        self.say(f"{self.study}: its driver {mark.holder} {why}: this loop drives it now")
                    return
                raced += 1  # another write came first: look again
                if raced > RACES:
                    raise ClusterError(f"{self.store.where}: {RACES} writes in a row lost to another: not taken")
                continue
            if not self.take_over:
                raise StudyHeld(
                    f"study {self.study} is driven by {mark.holder} since {_when(mark.since)} "
                    f"(its mark renewed {max(0.0, now - mark.renewed):.0f} s ago, {self.store.where}). "
                    f"`stratctl status {self.study}` follows it; `submit --take-over` takes it over "
                    "(that driver stops at its next cycle); a driver that died is taken over "
                    f"{self.ttl:.0f} s after its last renewal"
                )
            if mark.take_over != self.me:
                if not self.store.write(replace(mark, take_over=self.me), version):
                    raced += 1
                    if raced > RACES:
                        raise ClusterError(f"{self.store.where}: {RACES} writes in a row lost to another: not taken")
                    continue
                if not asked:
                    self.say(f"{self.study}: asked {mark.holder} to hand the study over; waiting for its next cycle")
                asked = True
                continue
            self.sleep(ASK_EVERY)

    def renew(self) -> str | None:
        """At the start of a cycle: None to go on; else who drives the study now (this loop
        handed it over, or lost its mark while it could not renew it): the loop ends."""
        mark, version = self.store.read()
        now = self.wall()
        if mark is None or mark.holder != self.me:
            return mark.holder if mark is not None else "nobody (its mark was removed)"
        if mark.take_over:
            if self.store.write(Mark(mark.take_over, now, now, mark.ttl), version):
                return mark.take_over
            return None  # the mark changed meanwhile: read again next cycle
        if now - self.renewed >= self.ttl / CYCLES and self.store.write(replace(mark, renewed=now), version):
            self.renewed = now
        return None

    def release(self) -> None:
        """The loop ended (the study finished, or it was interrupted): the mark goes, if
        still this loop's, so that the next submit need not wait for it to expire; to the
        driver that asked for it, if one did."""
        mark, version = self.store.read()
        if mark is None or mark.holder != self.me:
            return
        if mark.take_over:
            now = self.wall()
            self.store.write(Mark(mark.take_over, now, now, mark.ttl), version)
        else:
            self.store.remove(version)


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(epoch))
