"""Building blocks of the study models: a frozen, key-strict pydantic base, errors that
point at a given field, DNS names and durations."""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_BATCH_QUEUE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a Slurm partition, a YARN queue


def batch_queue(value: str, what: str, limit: int = 128) -> str:
    """A Slurm partition's or YARN queue's name: letters, digits, '_', '-' and '.' (never a
    comma or a space, which would split a multi-partition submission)."""
    _within(value, what, limit)
    if not _BATCH_QUEUE.match(value):
        raise invalid(
            "queue_name",
            "{what} {value!r} is not a partition or queue name (letters, digits, '_', '-' and '.', "
            "starting with a letter, digit or '_')",
            what=what,
            value=value,
        )
    return value


def _within(value: str, what: str, limit: int) -> None:
    if len(value) > limit:
        raise invalid(
            "name_too_long",
            "{what} {value!r} is {n} characters; at most {limit} allowed",
            what=what,
            value=value,
            n=len(value),
            limit=limit,
        )


def invalid(code: str, message: str, field: str | None = None, **ctx: Any) -> PydanticCustomError:
    """A validation error; `field` (dotted, relative) moves its location onto that field."""
    # Formatted here: pydantic's templating knows no `!r`. It substitutes only the keys
    # of its context, so braces in the values shown stay as they are.
    text = message.format(**ctx) if ctx else message
    return PydanticCustomError(code, text, {"field": field} if field else None)


def dns_label(value: str, what: str, limit: int = 63) -> str:
    _within(value, what, limit)
    if not _DNS_LABEL.match(value):
        raise invalid(
            "dns_label",
            "{what} {value!r} is not a DNS-1123 label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit)",
            what=what,
            value=value,
        )
    return value


def parse_duration(value: float | int | str) -> float:
    """Seconds from a number of seconds or a duration like "2h", "1h30m", "45s"."""
    if isinstance(value, bool):
        raise ValueError("expected seconds or a duration like '2h'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        parts = _DURATION.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"{value!r} is not a duration (examples: 45s, 90m, 2h, 1h30m)")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("the duration must be positive")
    return seconds


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
