"""Grants: what this process was recently allowed to do, so a sudden 403 reads as a pause.

A restarted API server answers 401/403 for a few seconds, until its authorization
informers (RBAC roles and bindings) and token authenticators have loaded: requests that
worked a moment before are refused. A long-running loop must treat that as a pause, not a
verdict. So the request path remembers when each (verb, resource) last succeeded, and a
401/403 on one that succeeded within `RECENT` seconds is transient (retried); a 403 on
something that never worked is a real RBAC problem and stays permanent (fails fast).
"""

from __future__ import annotations

import threading
from typing import Any

RECENT = 600.0  # seconds: a grant used this recently is not revoked by a restart

VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def access(method: str, path: str, query: dict[str, Any] | None = None) -> tuple[str, str]:
    """The (verb, resource) RBAC authorizes a request by, from its method and URL path:
    `("list", "batch.volcano.sh/jobs in ns")`. Object names do not matter (stratctl's
    roles never name objects); namespaces do (roles are namespaced)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    else:
        group, rest = (parts[1] if len(parts) > 1 else ""), parts[3:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    named = len(rest) > 1
    if method == "GET":
        verb = "watch" if (query or {}).get("watch") else ("get" if named else "list")
    else:
        verb = VERBS.get(method, method.lower())
    where = f" in {namespace}" if namespace else ""
    return verb, f"{group + '/' if group else ''}{resource}{where}"


def denial_is_transient(status: int, allowed_ago: float | None, recent: float = RECENT) -> bool:
    """A 401/403 is a pause when the same (verb, resource) succeeded `allowed_ago` seconds
    ago, within `recent`; never-allowed (None) or long ago, it is a verdict (pure)."""
    return status in (401, 403) and allowed_ago is not None and 0 <= allowed_ago <= recent


class Grants:
    """When each (verb, resource) last succeeded in this process (thread-safe)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def allowed(self, key: tuple[str, str], now: float) -> None:
        with self._lock:
            self._last[key] = now

    def ago(self, key: tuple[str, str], now: float) -> float | None:
        """Seconds since `key` last succeeded; None when it never did."""
        with self._lock:
            last = self._last.get(key)
        return None if last is None else now - last
