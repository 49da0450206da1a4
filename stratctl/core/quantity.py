"""Kubernetes resource quantities ("500m", "4Gi", "2"): parsing, formatting, and the GPUs a
`resources` block asks for. The one place stratctl reads a quantity.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

GPU = "nvidia.com/gpu"

_SUFFIXES: dict[str, int | Decimal] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse(value: Any) -> Decimal | None:
    text = str(value).strip()
    for suffix, factor in _SUFFIXES.items():
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], Decimal(factor)
            break
    else:
        scale = Decimal(1)
    try:
        return Decimal(text) * scale
    except InvalidOperation:
        return None


def format_quantity(value: Decimal, binary: bool = False) -> str:
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    if binary:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if value >= _SUFFIXES[suffix] and value % _SUFFIXES[suffix] == 0:
                return f"{int(value / _SUFFIXES[suffix])}{suffix}"
    return str(int(value))


def whole_units(value: Any) -> int:
    """Whole units of an extended resource such as nvidia.com/gpu ("2", 2); 0 if not a number."""
    return 0 if value is None else _whole_units(str(value))


@lru_cache(maxsize=1024)  # a study's jobs repeat a few quantities thousands of times
def _whole_units(text: str) -> int:
    amount = parse(text)
    return int(amount) if amount is not None and amount >= 0 else 0


def gpus_of(resources: dict[str, Any] | None) -> int:
    """GPUs one container's `resources` ask for: the request, else the limit (for an extended
    resource Kubernetes takes the limit as the request when only the limit is given)."""
    resources = resources or {}
    value = (resources.get("requests") or {}).get(GPU)
    if value is None:
        value = (resources.get("limits") or {}).get(GPU)
    return whole_units(value)
