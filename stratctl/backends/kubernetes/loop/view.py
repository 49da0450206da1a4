"""What the Kubernetes loop's capabilities (features.py, merged.py) read of the loop: its
`Submitter` (controller.py) as they see it. The capabilities depend on this view, not on the
controller that builds them, so the controller imports them and nothing imports it back."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from stratctl.backends.kubernetes.api.cluster import Cluster
    from stratctl.backends.kubernetes.attempts.placement import Placer
    from stratctl.backends.kubernetes.blocks.blockmanifests import Part
    from stratctl.backends.kubernetes.loop.keeper import RecordKeeper
    from stratctl.backends.kubernetes.loop.pressure import Pressure
    from stratctl.backends.kubernetes.objects.record import StudyRecord
    from stratctl.backends.kubernetes.search.looptrials import LoopTrials
    from stratctl.core.render import Renderer
    from stratctl.core.space import Trial
    from stratctl.core.spec import Study
    from stratctl.run.options import SubmitOptions
    from stratctl.run.progress import Progress, Reporter
    from stratctl.run.storage import StorageMirror
    from stratctl.run.throttle import Throttle
    from stratctl.trialstate import TrialState


class Expanding(Protocol):
    """Merged submissions as the loop's picture needs them: each block read as its trials."""

    def expand(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


class LoopView(Protocol):
    """The loop as a capability reads it, each cycle anew: the study and its trials, the
    cluster and the throttle in front of it, what the last observe saw, the record."""

    @property
    def study(self) -> Study: ...
    @property
    def namespace(self) -> str: ...
    @property
    def kind(self) -> tuple[str, str]: ...  # the study's job kind (controller.py `job_kind`)
    @property
    def cluster(self) -> Cluster: ...
    @property
    def throttle(self) -> Throttle: ...
    @property
    def options(self) -> SubmitOptions: ...
    @property
    def policy(self) -> object: ...
    @property
    def reporter(self) -> Reporter: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def detach(self) -> bool: ...
    @property
    def renderer(self) -> Renderer: ...

    # the trials
    @property
    def given(self) -> LoopTrials: ...
    @property
    def trials(self) -> dict[str, Trial]: ...
    @property
    def order(self) -> list[str]: ...
    @property
    def parts(self) -> dict[str, Part]: ...

    # what the last observe saw, and what the loop reads of the cluster
    @property
    def latest(self) -> dict[str, dict[str, Any]]: ...
    @property
    def every_job(self) -> list[dict[str, Any]]: ...
    @property
    def reading(self) -> Pressure: ...
    @property
    def progress(self) -> Progress: ...
    @property
    def placer(self) -> Placer | None: ...
    @property
    def storage(self) -> StorageMirror | None: ...
    @property
    def merged(self) -> Expanding | None: ...

    # the study record
    @property
    def record(self) -> StudyRecord: ...
    @property
    def keeper(self) -> RecordKeeper: ...

    def listed(self) -> list[dict[str, Any]]: ...
    def mirrored(self) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]: ...
    def waiting(self, states: dict[str, TrialState]) -> list[str]: ...
    def _seen(self, obj: dict[str, Any]) -> None: ...
