"""What an API server's failed answer means: an HTTP status, body and headers mapped to the
`errors` hierarchy (`error_for`: 429/503 → Throttled with its Retry-After, 409 →
AlreadyExists, 404 → NotFound, other 4xx → Invalid, 5xx → Unavailable, a 401/403 on a
request that worked moments before → Unavailable), and one line of a watch stream read as
its event or its error (`watch_event`). Pure: tested without a server.
"""

from __future__ import annotations

import json
from typing import Any

from stratctl.backends.kubernetes.api.answers import parse
from stratctl.backends.kubernetes.api.grants import denial_is_transient
from stratctl.errors import AlreadyExists, ClusterError, Invalid, NotFound, Throttled, Unavailable
from stratctl.run.outage import duration


def _retry_after(headers: Any) -> float | None:
    value = (headers or {}).get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return 1.0  # an HTTP date: rare from the API server; wait the APF minimum


def _status_message(status: int, body: bytes) -> str:
    try:
        doc = json.loads(body)
        return doc.get("message") or doc.get("reason") or f"HTTP {status}"
    except (ValueError, AttributeError):
        text = body.decode("utf-8", "replace").strip()
        return text[:500] or f"HTTP {status}"


def unreached(exc: BaseException) -> str:
    """What went wrong reaching the server, without urllib3's pool and object names:
    `Failed to establish a new connection: [Errno 111] Connection refused`."""
    text = str(exc)
    _, sep, reason = text.partition("): ")
    return reason if sep and reason else text


def error_for(status: int, body: bytes, headers: Any, what: str, allowed_ago: float | None = None) -> ClusterError:
    """Map an HTTP failure to the error hierarchy (pure; tested without a server).

    `allowed_ago`: seconds since a request of the same verb and resource last succeeded
    (None: never), which makes a 401/403 transient when recent (`grants`)."""
    message = f"{what}: {_status_message(status, body)}"
    if allowed_ago is not None and denial_is_transient(status, allowed_ago):
        return Unavailable(
            f"{what}: {'forbidden' if status == 403 else 'unauthorized'} although the same request worked "
            f"{duration(allowed_ago)} ago: the API server is probably restarting ({_status_message(status, body)})",
            status=status,
            reason="Forbidden" if status == 403 else "Unauthorized",
        )
    if status == 429 or (status == 503 and _retry_after(headers) is not None):
        return Throttled(message, status=status, retry_after=_retry_after(headers))
    if status == 409:
        return AlreadyExists(message)
    if status == 404:
        return NotFound(message)
    if status >= 500 or status in (408,):
        return Unavailable(message, status=status)
    reason = {401: "Unauthorized", 403: "Forbidden", 410: "Expired", 422: "Invalid", 400: "BadRequest"}.get(status)
    return Invalid(message, status=status, reason=reason)


def watch_event(line: bytes, what: str) -> tuple[str, dict[str, Any]]:
    """One line of a watch stream as (type, object); an ERROR event raises the error of its
    Status, anything but a watch event raises `Unavailable` (pure; tested without a server)."""
    try:
        event = parse(line)
        kind, obj = event["type"], event.get("object") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise Unavailable(f"{what}: not a watch event: {line[:200]!r}") from None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise Unavailable(f"{what}: not a watch event: {line[:200]!r}")
    if kind == "ERROR":
        code = obj.get("code")
        raise error_for(code if isinstance(code, int) else 500, json.dumps(obj).encode(), {}, what)
    return kind, obj
