"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float, interval: float = 0.5, message: str = "condition"):
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")
