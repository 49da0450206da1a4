"""Reading a streamed answer of the API server line by line: a watch's events and a
followed container log. The response is open (`Cluster._send` with `stream`); every
failure while reading raises `Unavailable`, so no broken stream looks like a quiet one,
and the connection is never handed back to the pool half read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import urllib3

from stratctl.backends.kubernetes.api.apierrors import watch_event
from stratctl.errors import Unavailable


def watch_events(response: Any, what: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (type, object) events of a watch's open response, until the server ends it."""
    clean = False
    try:
        buffer = b""
        for chunk in response.stream(65536):
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                if line.strip():
                    yield watch_event(line, what)
        if buffer.strip():
            yield watch_event(buffer, what)  # a last event without its newline: whole, or not JSON
        clean = True
    except (
        urllib3.exceptions.HTTPError,
        OSError,
    ) as exc:  # urllib3 wraps resets as ProtocolError; not all paths do
        raise Unavailable(f"{what}: the stream broke: {exc}") from None
    finally:
        if not clean:
            response.close()  # a half-read stream must not go back to the pool as a reusable connection
        response.release_conn()


def log_lines(response: Any, what: str) -> Iterator[bytes]:
    """The lines of a followed container log, each with its newline (the last may have
    none), until the container ends or the caller stops reading."""
    try:
        buffer = b""
        for chunk in response.stream(4096, decode_content=True):
            *lines, buffer = (buffer + chunk).split(b"\n")
            yield from (line + b"\n" for line in lines)
        if buffer:
            yield buffer
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise Unavailable(f"{what}: the stream broke: {exc}") from None
    finally:
        response.close()
        response.release_conn()
