"""Merged submissions in the Kubernetes cycle (blocks.py has what a block is): first
attempts go to the cluster as blocks, one Indexed Job (and the ConfigMap of its trials'
scripts) for many trials, whose `parallelism` keeps the study's trials in flight to the
adaptive target.

- A block is written when the decision admits at least one more trial and no earlier block
  still holds trials back: it carries the first attempts due (as many as one object may
  hold), its parallelism the room the decision leaves. Its trials without a pod yet are
  queued: not in flight, waiting for the policy (so a block is never a wall of pending
  pods: the job controller makes at most `parallelism` of them).
- Each cycle every unfinished block's parallelism follows the target (less the study's
  trials in flight outside it), written only when it changes: one write per change, not
  per trial; never below its live pods (a pod deleted before it ended would count against
  its index's retries).
- Exactly once: block N is named `<study>-block-N` and its objects carry a spec hash that
  leaves out `parallelism`: a rerun, or a send whose answer was lost, finds them (409,
  same hash) instead of writing a second block; a send that failed is sent again, the
  same block, next cycle.
- Next attempts (a trial whose index failed) are Jobs of their own, as without merging.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from stratctl import labels
from stratctl.backends.kubernetes.api.cluster import BATCH_JOB, POD
from stratctl.backends.kubernetes.attempts.requeue import create_attempt
from stratctl.backends.kubernetes.blocks.blockmanifests import block_manifests, part_of
from stratctl.backends.kubernetes.blocks.blocks import (
    LIVE_PODS,
    Block,
    block_name,
    block_number,
    blocks_of,
    expand,
    parallelism_for,
)
from stratctl.errors import ClusterError, transient
from stratctl.run.cycle import Capability
from stratctl.run.policy import Decision, Observed
from stratctl.trialstate import TrialState

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.loop.view import LoopView
    from stratctl.core.space import Trial


class Merged(Capability):
    name = "merged submissions"
    needs = "merge"

    def __init__(self, loop: LoopView, size: int, say: Callable[[str], None]):
        self.loop, self.size, self.say = loop, size, say
        self.blocks: list[Block] = []  # as last observed
        self.queued: set[str] = set()  # trials in a block without a pod yet: not in flight
        self.room = 1  # trials the decision lets into flight now: a new block's parallelism
        self.next = 0  # the number of the next block
        self.set: dict[str, int] = {}  # block -> the parallelism last written
        self.unsent: tuple[list[dict[str, Any]], list[str]] | None = None  # a block whose send failed, and its trials
        self.flying: dict[str, int] = {}  # block ('' outside any) -> its trials in flight
        self.observed: Observed | None = None  # what the decision was made on, as this capability counts

    # -- what the loop reads ------------------------------------------------------------

    def expand(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The study's jobs with each block read as its trials' views (blocks.expand), its
        live pods listed once a cycle while any block has trials left."""
        blocks = blocks_of(jobs, [])
        if not blocks:
            self.blocks, self.queued = [], set()
            return jobs
        # the loop's watch of pods, when it has one, holds ended pods too: a trial's GPU time
        # ends with its pod, not with its block
        mirrored = self.loop.mirrored()[0]
        pods = mirrored if mirrored is not None else self._live_pods() if any(b.unfinished() for b in blocks) else []
        jobs, self.blocks = expand(jobs, pods)
        self.queued = {name for block in self.blocks for name in block.queued()}
        self.next = max(self.next, 1 + max(block_number(b.name) for b in self.blocks))
        return jobs

    def _live_pods(self) -> list[dict[str, Any]]:
        study = self.loop.study
        try:
            pods, _ = self.loop.throttle.call(
                lambda: self.loop.cluster.list(
                    POD,
                    study.namespace,
                    label_selector=f"{labels.STUDY}={study.name},{labels.BLOCK}",
                    field_selector=LIVE_PODS,
                )
            )
        except ClusterError:
            # without the pods, a block's trials that started read as queued for this cycle
            return []
        return pods

    # -- the cycle's hooks --------------------------------------------------------------

    def pressure(self, observed: Observed, states: dict[str, TrialState]) -> Observed:
        """The trials a block holds back wait; the others in flight are counted per block."""
        self.flying = {}
        for name, state in states.items():
            if state.owed:  # its next attempt is a Job of its own, outside any block: its place is held there
                self.flying[""] = self.flying.get("", 0) + 1
            elif state.in_flight and name not in self.queued:
                job = self.loop.latest.get(name) or {}
                block = ((job.get("metadata") or {}).get("labels") or {}).get(labels.IN_BLOCK, "")
                self.flying[block] = self.flying.get(block, 0) + 1
        self.observed = replace(observed, waiting=observed.waiting + len(self.queued))
        return self.observed

    def decided(self, decision: Decision) -> None:
        """Every unfinished block's parallelism follows the target. A block lets in no more
        new trials a cycle than the decision admits (as many as trials of their own would be
        created), and each new pod is a write the job controller makes for the study: it
        takes a token of the study's bucket, as a create would."""
        total = sum(self.flying.values())
        admit = decision.admit(self.observed) if self.observed is not None else 0
        study = self.loop.study
        for block in self.blocks:
            if not block.unfinished() or block.suspended:
                continue
            current = block.parallelism
            want = min(
                parallelism_for(block, decision.target, total - self.flying.get(block.name, 0)),
                max(current, block.left()),  # no room kept for trials it does not hold
            )
            if want > current:
                grow = self.loop.throttle.bucket.take(min(want - current, admit))
                admit -= grow
                want = current + grow
            if want == current or self.set.get(block.name) == want:
                continue
            patch = {"spec": {"parallelism": want}}
            try:
                self.loop.throttle.call(
                    partial(self.loop.cluster.patch, BATCH_JOB, block.name, patch, study.namespace), mutating=True
                )
            except ClusterError as exc:
                self.say(f"{block.name}: parallelism not changed this cycle ({exc}); trying again")
                continue
            self.set[block.name] = want
            self.say(f"{block.name}: at most {want} of its trials at once")
        self.room = max(1, admit)  # a new block's parallelism

    def order(self, waiting: list[str], decision: Decision) -> list[str]:
        """First attempts first, as one block (none while a block still holds trials back),
        then next attempts."""
        latest = self.loop.latest
        first = [n for n in waiting if n not in latest]
        again = [n for n in waiting if n in latest]
        if self.loop.detach:  # nothing follows the blocks after it: every first attempt goes now
            return first + again
        if self.queued or not first:
            return again
        return first[: self.size] + again

    def admits(self, admit: int, waiting: list[str]) -> int:
        if admit <= 0:
            return 0
        first = sum(1 for n in waiting if n not in self.loop.latest)
        return first + min(admit, len(waiting) - first)

    # -- sending a block ----------------------------------------------------------------

    def admit(self, first: list[str]) -> list[str]:
        """Send these first attempts as a block; the trials sent (none when it failed: a
        refusal is each of its trials' verdict, anything else is tried again next cycle)."""
        try:
            if not self.loop.detach:
                return self.send(first)
            # `--detach`: every block now, the room shared among them (nothing changes their
            # parallelism afterwards but a submit that follows the study again)
            blocks = -(-len(first) // self.size)
            share, sent = max(1, self.room // blocks), list[str]()
            while len(sent) < len(first):
                sent += self.send(first[len(sent) :], share)
            return sent
        except ClusterError as exc:
            if not transient(exc):
                self.loop.progress.errors.update(dict.fromkeys(first, str(exc)))
            self.say(f"a block of {len(first)} trials: not submitted this cycle ({exc})")
            return []

    def send(self, names: list[str], parallelism: int | None = None) -> list[str]:
        """One block of these trials' first attempts (as many as one object holds), sent
        exactly once; the trials it carries. ClusterError when it could not be sent: a
        block whose send failed on the way is the one sent next, under its own name."""
        loop = self.loop
        if self.unsent is None:
            trials = [loop.trials[n] for n in names[: self.size]]

            def rendered(t: Trial) -> list[dict[str, Any]]:
                return loop.given.manifests.get(t.name) or loop.renderer.render(t, attempt=0)

            parts = [loop.parts.get(t.name) or part_of(t, rendered(t)) for t in trials]
            # its pods are writes too (but `--detach`'s share: nothing would raise it later)
            given = parallelism or max(1, loop.throttle.bucket.take(self.room))
            docs, listed = block_manifests(loop.study, self.next, rendered(trials[0]), parts, given)
            self.unsent = docs, [t.name for t in listed]
        docs, carried = self.unsent
        outcome = loop.throttle.call(
            lambda: create_attempt(loop.cluster, docs, loop.study.namespace, created=loop._seen), mutating=True
        )
        name = block_name(loop.study.name, self.next)
        self.unsent, self.next = None, self.next + 1
        given = int(docs[1]["spec"]["parallelism"])
        self.set[name] = given
        self.queued |= set(carried[given:])
        if outcome == "existing":
            loop.progress.existing += len(carried)
        else:
            loop.progress.created += len(carried)
        self.say(f"{name}: {len(carried)} trials submitted as one Indexed Job, at most {given} at once")
        return carried
