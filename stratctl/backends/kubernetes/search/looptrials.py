"""The trials one Kubernetes submit loop runs: the study's, or those a closed-loop search
(closedloop.py) asks as it goes, with what the loop reads of each (its expected seconds,
its shape) and the shape the cluster's signals count whole gangs of."""

from __future__ import annotations

from typing import Any

from stratctl.core import shape
from stratctl.core.render import Renderer
from stratctl.core.space import Trial
from stratctl.core.spec import Study


class LoopTrials:
    """`by_name` and `order` are shared, by reference, with the parts of the loop that make
    next attempts (requeue, salvage) and with the search (searching.py), so a trial the
    search asks is theirs at once."""

    def __init__(
        self, study: Study, trials: list[Trial], renderer: Renderer, manifests: dict[str, list[dict[str, Any]]] | None
    ):
        self.study, self.renderer = study, renderer
        self.search = None
        if study.strategy.closed_loop:  # its modules (samplers, results, pruning) load for such a study alone
            from stratctl.backends.kubernetes.search.closedloop import ClosedLoop

            self.search = ClosedLoop(study)
        # with a search, `trials` are the first it would ask, rendered already (what a dry run sends)
        self.first = list(trials)
        self.by_name: dict[str, Trial] = {t.name: t for t in trials} if self.search is None else {}
        self.order: list[str] = [t.name for t in trials] if self.search is None else []
        self.manifests = manifests or {}  # first attempts rendered up front (launch.prepare)
        # each trial's expected seconds, when the study states them (backfill picks by them)
        self.expected: dict[str, float] = {}
        # each trial's shape, when the study's trials differ in shape: admitted by packing them
        # into the free GPUs (run/packing.py)
        self.shapes: dict[str, tuple[int, ...]] = {}
        for trial in trials:
            self._read(trial)

    def _read(self, trial: Trial) -> None:
        if self.renderer is not None and self.renderer.states_duration:
            self.expected[trial.name] = self.renderer.expected_seconds(trial)
        if self.renderer is not None and self.study.varying_shape:
            self.shapes[trial.name] = self.renderer.shape(trial)

    def register(self, trial: Trial) -> None:
        """A trial of a closed-loop search joins the loop's trials."""
        self.by_name[trial.name] = trial
        self.order.append(trial.name)
        self._read(trial)

    @property
    def budget(self) -> int:
        """Trials the study will run: the search's budget, or the study's trials."""
        return self.search.remaining if self.search is not None else len(self.order)

    def largest(self) -> Study:
        """The study as its largest trial runs it (its own shape when trials share one)."""
        if not self.shapes:
            return self.study
        largest = max(self.first, key=lambda t: sum(self.shapes[t.name]))
        return self.renderer.study_for(largest)

    def reference_shape(self) -> list[int]:
        """The shape the cluster's signals count whole gangs of: the study's, or its largest
        trial's when trials differ (packing then decides per trial)."""
        if self.shapes:
            largest: tuple[int, ...] = max(self.shapes.values(), key=lambda s: (sum(s), max(s, default=0), len(s)))
            return list(largest)
        return list(shape.gang(self.study))
