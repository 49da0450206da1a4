"""Accelerator resource names: the ones device plugins offer, and the near misses of them (pure).

Kubernetes takes any domain-qualified resource name in a pod's requests: a misspelt one
(`nvidia.com/gpus`) is accepted by the API server, counted as no GPU by every tally, and
leaves the pod pending for ever, since no node offers it. A name a typo or two away from a
known accelerator resource is said at `validate`, with the name meant; preflight names the
nearest resource the nodes do offer (`nearest`).

A name of a known domain whose name holds a known one is a variant, not a typo: GPU
sharing and MIG plugins offer `nvidia.com/gpu.shared`, `nvidia.com/gpumem`,
`nvidia.com/mig-1g.10gb`, ...; only the plural of a known name (`nvidia.com/gpus`) is taken
for a slip. A bare `gpu` is one too: Kubernetes wants the plugin's qualified name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# What the common device plugins advertise on a node's allocatable.
KNOWN = (
    "nvidia.com/gpu",  # NVIDIA device plugin
    "amd.com/gpu",  # AMD (ROCm) device plugin
    "gpu.intel.com/i915",  # Intel GPU plugin
    "gpu.intel.com/xe",
    "habana.ai/gaudi",  # Intel Gaudi
    "aws.amazon.com/neuron",  # AWS Inferentia / Trainium
    "aws.amazon.com/neuroncore",
    "aws.amazon.com/neurondevice",
    "google.com/tpu",  # GKE TPUs
)
VARIANT_PREFIXES = ("nvidia.com/mig-",)  # MIG profiles: nvidia.com/mig-<g>g.<mem>gb
CUTOFF = 0.8  # difflib's ratio for a near miss: nvidia/gpu (0.83), nvida.com/gpu (0.96)


def nearest(name: str, names: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The name of `names` that `name` is most likely a slip for (case aside), or None."""
    names = [n for n in names if n != name]
    lowered = {n.lower(): n for n in names}
    if name.lower() in lowered:  # resource names are case-sensitive: NVIDIA.com/GPU is another resource
        return lowered[name.lower()]
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[close[0]] if close else None


def misspelt(name: str) -> str | None:
    """The known accelerator resource `name` is a near miss of, or None (a known name, a
    variant of one, or nothing close)."""
    if name in KNOWN or name.startswith(VARIANT_PREFIXES):
        return None
    plural = next((known for known in KNOWN if name == known + "s"), None)
    if plural:
        return plural
    domain, _, local = name.rpartition("/")
    if not domain:  # `gpu`: Kubernetes wants the device plugin's domain-qualified name
        return next((known for known in KNOWN if known.rpartition("/")[2] == local.lower().rstrip("s")), None)
    if any(domain == k.rpartition("/")[0] and k.rpartition("/")[2] in local for k in KNOWN):
        return None  # a variant a sharing plugin offers (nvidia.com/gpu.shared, nvidia.com/gpumem)
    return nearest(name, KNOWN)


def misspelt_message(name: str, meant: str) -> str:
    """What validate says of a resource name that is a near miss of `meant`."""
    return (
        f"unknown accelerator resource {name!r}: did you mean {meant!r}? "
        "(a pod asking for a resource no node offers never starts, and stratctl would count no GPU)"
    )
