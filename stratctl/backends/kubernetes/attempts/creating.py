"""Creating trials' first attempts on Kubernetes, exactly once, many at a time.

A create whose answer was lost may have gone through: its retry's 409, with the same
spec-hash label on the object there, counts as already submitted (requeue.create_attempt).
Creates go through a worker pool, a window of them at a time; with several Volcano queues
each first attempt is sent to the queue with room (placement.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from stratctl.backends.kubernetes.api.cluster import QUEUE, Cluster
from stratctl.backends.kubernetes.attempts.placement import Placer
from stratctl.backends.kubernetes.attempts.requeue import create_attempt
from stratctl.core.render import Renderer
from stratctl.core.space import Trial
from stratctl.errors import ClusterError, SpecConflict, Unreachable, transient
from stratctl.run.progress import Progress

WINDOW = 1024  # creates handed to the worker pool at a time, at least (8 per worker)


class Creating:
    """The trials' first attempts, created through the loop's worker pool. `trials` is the
    loop's own dict (a closed-loop search adds to it); `created` is told of each object
    made (the loop's mirror of jobs)."""

    def __init__(
        self,
        cluster: Cluster,
        renderer: Renderer,
        namespace: str,
        trials: dict[str, Trial],
        manifests: dict[str, list[dict[str, Any]]],
        placer: Placer | None,
        progress: Progress,
        say: Callable[[str], None],
        workers: int,
        created: Callable[[dict[str, Any]], None],
        queues: Callable[[], object | None],
    ):
        self.cluster, self.renderer, self.namespace = cluster, renderer, namespace
        self.trials, self.manifests, self.placer = trials, manifests, placer
        self.progress, self.say, self.workers, self.created = progress, say, workers, created
        self.queues = queues  # the loop's watch of Volcano queues, once it has one
        self._paused: set[str] = set()  # trials whose create failed transiently, already said

    def trial(self, trial: Trial, dry_run: bool = False, manifests: list[dict[str, Any]] | None = None) -> str:
        """Create every manifest of the trial's first attempt; 'created' or 'existing'.

        A 409 is success when the object there carries the same spec hash.
        """
        manifests = manifests or self.manifests.get(trial.name) or self.renderer.render(trial, attempt=0)
        return create_attempt(self.cluster, manifests, self.namespace, dry_run=dry_run, created=self.created)

    def queue_objects(self) -> dict[str, dict[str, Any]]:
        """The cluster's Volcano queues by name: as watched, else read now."""
        watched = self.queues()
        if watched is not None:
            items = watched.items()  # type: ignore[attr-defined]
        else:
            try:
                items, _ = self.cluster.list(QUEUE)
            except ClusterError:
                items = []
        return {q["metadata"]["name"]: q for q in items}

    def _placed(self, names: list[str], dry_run: bool) -> dict[str, list[dict[str, Any]] | None]:
        """The first attempts of these trials, each sent to its queue (in order: each choice
        counts the gangs placed before it); None: as rendered (one queue, or a dry run)."""
        if self.placer is None or dry_run:
            return {name: None for name in names}
        return {
            name: self.placer.place(
                name, self.manifests.get(name) or self.renderer.render(self.trials[name], attempt=0)
            )
            for name in names
        }

    def batch(self, names: list[str], pool: ThreadPoolExecutor, dry_run: bool = False) -> list[str]:
        """Create the trials' first attempts; the names submitted.

        A refusal (an invalid manifest, a 403 on creates that never worked, a spec conflict)
        is the trial's verdict, kept in `progress.errors`. A transient failure (the API
        server out or restarting) leaves the trial waiting for the next cycle: a create
        whose answer was lost may have gone through, and then the retry's 409 with the same
        spec hash counts it as submitted. When nothing got through, the cycle fails with
        the first such error, so the loop waits for the server (a server dry run, one pass,
        reports every failure per trial instead)."""
        placed = self._placed(names, dry_run)
        submitted: list[str] = []
        paused: dict[str, ClusterError | SpecConflict] = {}
        for name, future in self._sent(names, pool, dry_run, placed):
            try:
                outcome = future.result()
            except (ClusterError, SpecConflict) as exc:
                if isinstance(exc, Unreachable) or (transient(exc) and not dry_run):
                    paused[name] = exc
                    continue
                self.progress.errors[name] = str(exc)
                if isinstance(exc, SpecConflict):
                    self.progress.conflicts.append(name)
                self.say(f"trial {name}: {exc}")
                continue
            submitted.append(name)
            self._paused.discard(name)
            if outcome == "created":
                self.progress.created += 1
            else:
                self.progress.existing += 1
        gave_up = [e for e in paused.values() if isinstance(e, Unreachable)]
        if gave_up or (paused and not submitted):
            raise gave_up[0] if gave_up else next(iter(paused.values()))
        for name, error in paused.items():  # the others went through: say it, once per trial
            if name not in self._paused:
                self._paused.add(name)
                self.say(f"trial {name}: not created this cycle ({error}); trying again")
        return submitted

    def dry_run(self, names: list[str], mode: str) -> None:
        """`--dry-run=server`: every first attempt sent with dryRun=All; `client`: rendered,
        and so checked, by launch.prepare already."""
        self.progress.dry_run = mode
        if mode == "server":
            with ThreadPoolExecutor(self.workers) as pool:
                self.batch(names, pool, dry_run=True)
        else:
            self.progress.created = len(names)

    def _sent(
        self, names: list[str], pool: ThreadPoolExecutor, dry_run: bool, placed: dict[str, list[dict[str, Any]] | None]
    ) -> Iterator[tuple[str, Future[Any]]]:
        """(name, future) of each trial's create, in order, with at most WINDOW creates
        handed to the pool at a time: the pool's workers stay busy, and 100,000 trials are
        never 100,000 futures at once."""
        window = max(WINDOW, 8 * self.workers)
        queued: deque[tuple[str, Future[Any]]] = deque()
        for name in names:
            queued.append((name, pool.submit(self.trial, self.trials[name], dry_run, placed[name])))
            if len(queued) >= window:
                yield queued.popleft()
        while queued:
            yield queued.popleft()
