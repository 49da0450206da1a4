"""Network topology of a trial: where in the cluster's switch tree its gang may land.

Volcano describes the network as a tree of `HyperNode`s (tier 1: the nodes under one
leaf switch; higher tiers: the switches above). A trial with `network_topology` is
rendered with Volcano's `networkTopology` (on the Volcano Job, or on the PodGroup of a
batch/v1 Job): `mode: hard` keeps every pod of the gang inside one HyperNode of at most
`highest_tier`, `mode: soft` only prefers one.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, model_validator

from stratctl.core.model import Model, invalid


class NetworkTopology(Model):
    """`mode: hard` needs `highest_tier` (1: one leaf switch); `soft` may leave it out."""

    mode: Literal["hard", "soft"] = "hard"
    highest_tier: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _tier(self) -> Self:
        if self.mode == "hard" and self.highest_tier is None:
            raise invalid(
                "highest_tier",
                "mode 'hard' needs highest_tier: the highest HyperNode tier a gang may "
                "span (1: the nodes under one leaf switch)",
            )
        return self

    @property
    def hard(self) -> bool:
        return self.mode == "hard"

    def manifest(self) -> dict[str, Any]:
        """Volcano's `networkTopology` (Job and PodGroup spell it alike)."""
        out: dict[str, Any] = {"mode": self.mode}
        if self.highest_tier is not None:
            out["highestTierAllowed"] = self.highest_tier
        return out
