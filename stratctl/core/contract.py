"""The rendezvous contract's step in rendering, as a backend hands it to the Renderer.

Where a trial's processes learn about their peers from the manifests themselves (Kubernetes:
the names its objects give the pods, backends/kubernetes/rendering/rendezvous.py), the
backend hands the Renderer a `Rendezvous`, and the Renderer stamps what it says on every
attempt. Where the backend gives its processes the contract where they run (Slurm's script,
YARN's application master), it hands none. Which backend hands which is decided in one
place, `stratctl.backends.rendezvous_for`: the core imports no backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from stratctl.core.spec import Study
    from stratctl.errors import Problem


class Layout(Protocol):
    """A trial's pods as the contract reads them from its rendered manifests."""

    @property
    def job(self) -> str:
        """The workload object's name as rendered."""
        ...

    def keys(self) -> list[str]:
        """The names of `values`: what changes with the attempt's job name (stamped once per
        study as placeholders, filled in per attempt)."""
        ...

    def values(self, job: str) -> dict[str, str]:
        """The contract's strings that name the attempt's job."""
        ...

    def stamp(self, study: Study, docs: list[dict[str, Any]], values: Mapping[str, str]) -> None:
        """Make the contract true in `docs` (in place), with `values` (or their placeholders);
        StudyError when the study's tasks cannot carry it."""
        ...


class Rendezvous(Protocol):
    """A backend's way of stamping the contract on the manifests of a study's attempts."""

    def problems(self, study: Study) -> list[Problem]:
        """The study's fields the contract cannot carry (names too long for its addresses)."""
        ...

    def layout(self, study: Study, docs: list[dict[str, Any]]) -> Layout | None:
        """The trial's pods in `docs`, None when the manifests hold no workload; ValueError
        when a count of pods is not a number yet (a placeholder in a study's skeleton)."""
        ...
