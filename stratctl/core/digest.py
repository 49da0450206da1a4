"""Canonical JSON and the short hashes made from it: a trial's parameter hash (its name),
a study's spec hash and an attempt's manifest hash. One encoding for all of them (sorted
keys, no spaces, ASCII escapes), so equal values always hash alike.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode


def hash_text(text: str, chars: int = 12) -> str:
    """The first `chars` hex digits of the SHA-256 of `text` (canonical JSON already)."""
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def digest(value: Any, chars: int = 12) -> str:
    """The short hash of `value`'s canonical JSON."""
    return hash_text(canonical(value), chars)


HASH_CHARS = 10  # 40 bits: a collision among 100,000 trials has odds of about 1 in 200


def param_hash(params: Mapping[str, Any]) -> str:
    """A trial's parameter hash, the end of its name (`<study>-<param hash>`)."""
    return digest(dict(params), HASH_CHARS)
