import json

import pytest

from stratctl.backends.kubernetes.api.apierrors import error_for
from stratctl.errors import AlreadyExists, Invalid, NotFound, Throttled, Unavailable


def status(message, code):
    return json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": code}).encode()


def test_429_becomes_throttled_with_retry_after():
    err = error_for(
        429, status("Too many requests, please try again later.", 429), {"Retry-After": "3"}, "create Job ns/a"
    )
    assert isinstance(err, Throttled)
    assert err.retry_after == 3.0
    assert str(err) == "create Job ns/a: Too many requests, please try again later."


def test_503_with_retry_after_is_throttling_and_without_is_transient():
    assert isinstance(error_for(503, b"", {"Retry-After": "1"}, "x"), Throttled)
    err = error_for(503, b"", {}, "x")
    assert isinstance(err, Unavailable) and not isinstance(err, Throttled)


@pytest.mark.parametrize(
    "code, cls",
    [
        (409, AlreadyExists),
        (404, NotFound),
        (422, Invalid),
        (403, Invalid),
        (400, Invalid),
        (500, Unavailable),
        (504, Unavailable),
    ],
)
def test_statuses_map_to_error_classes(code, cls):
    err = error_for(code, status(f"boom {code}", code), {}, "create Job ns/a")
    assert type(err) is cls
    assert f"boom {code}" in str(err)


def test_non_json_body_is_kept_readable():
    err = error_for(502, b"<html>bad gateway</html>", {}, "list Job")
    assert "bad gateway" in str(err)
