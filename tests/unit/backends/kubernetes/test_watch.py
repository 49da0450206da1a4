"""`Cluster.watch` against fake HTTP answers: how a watch stream ends, normally or not, and
that a call and a watch go out through the same request path (URL, headers, auth)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from stratctl.backends.kubernetes.api.cluster import POD, Cluster
from stratctl.errors import Invalid, Unavailable

HOST = "https://k8s.test:6443"


def line(kind: str, name: str, version: str) -> bytes:
    obj = {"kind": "Pod", "metadata": {"namespace": "ns", "name": name, "resourceVersion": version}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


class FakeResponse:
    """An HTTP answer as urllib3 hands it over unread: a status, headers, a body to stream
    in chunks (an exception among them is raised there, as a broken connection would)."""

    def __init__(self, status: int = 200, chunks=(), body: bytes = b"", headers: dict | None = None):
        self.status = status
        self.chunks = list(chunks)
        self.body = body
        self.headers = headers or {}
        self.streamed = self.released = self.closed = False

    def stream(self, amt):
        self.streamed = True
        for chunk in self.chunks:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk

    def read(self) -> bytes:
        return self.body

    def release_conn(self) -> None:
        self.released = True

    def close(self) -> None:
        self.closed = True


class FakeApi:
    """The kubernetes ApiClient at its HTTP boundary: bearer auth, and `call_api` answering
    from a script; every request is recorded as it went out."""

    def __init__(self, *responses):
        self.configuration = SimpleNamespace(host=HOST)
        self.user_agent = "stratctl/test"
        self.responses = list(responses)
        self.requests: list[dict] = []

    def update_params_for_auth(self, headers, queries, auth_settings, resource_path, method, body):
        assert auth_settings == ["BearerToken"]
        headers["Authorization"] = "Bearer s3cret"

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        self.requests.append(
            {"method": method, "url": url, "headers": dict(header_params), "body": body, "timeout": _request_timeout}
        )
        answer = self.responses.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return SimpleNamespace(status=answer.status, response=answer)  # what the client wraps it in


def watching(*responses):
    api = FakeApi(*responses)
    return Cluster(api, "ns"), api


def test_a_watch_streams_events_across_chunks_and_returns_when_the_server_ends_it():
    added, bookmark, modified = line("ADDED", "a", "11"), line("BOOKMARK", "", "12"), line("MODIFIED", "a", "13")
    response = FakeResponse(chunks=[added[:9], added[9:] + b"\n" + bookmark[:-1], bookmark[-1:] + modified[:-1]])
    cluster, api = watching(response)
    events = list(cluster.watch(POD, "10"))
    assert [(kind, obj["metadata"]["resourceVersion"]) for kind, obj in events] == [
        ("ADDED", "11"),
        ("BOOKMARK", "12"),
        ("MODIFIED", "13"),
    ]  # the last event came without its newline
    [request] = api.requests
    assert request["url"] == (
        f"{HOST}/api/v1/namespaces/ns/pods?watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=8"
    )
    # the server ends the watch after 8 s; a read waits 2 s more: a watch silent for 10 s is dead
    assert request["timeout"] == (10, 10)
    assert response.released and not response.closed  # a clean end: the connection goes back to the pool
    assert cluster.metrics.requests == 1 and cluster.metrics.errors == 0


def test_a_call_and_a_watch_go_out_with_the_same_host_auth_and_headers():
    cluster, api = watching(
        FakeResponse(body=b'{"items": [], "metadata": {"resourceVersion": "10"}}'),
        FakeResponse(chunks=[line("ADDED", "a", "11")]),
    )
    assert cluster.list(POD, label_selector="app=x") == ([], "10")
    assert [kind for kind, _ in cluster.watch(POD, "10", label_selector="app=x")] == ["ADDED"]
    listed, watched = api.requests
    assert listed["url"] == f"{HOST}/api/v1/namespaces/ns/pods?labelSelector=app%3Dx&limit=500"
    assert watched["url"].startswith(f"{HOST}/api/v1/namespaces/ns/pods?watch=1&resourceVersion=10")
    assert "labelSelector=app%3Dx" in watched["url"]
    assert (
        listed["headers"]
        == watched["headers"]
        == {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": "stratctl/test",
            "Authorization": "Bearer s3cret",
        }
    )


@pytest.mark.parametrize(
    "bad", [b"<html>502 Bad Gateway</html>", b'{"type": "ADDED", "obj', b'["ADDED"]', b'{"object": {}}']
)
def test_a_line_that_is_not_a_watch_event_raises_unavailable_after_the_events_before_it(bad):
    response = FakeResponse(chunks=[line("ADDED", "a", "11"), bad + b"\n", line("ADDED", "b", "12")])
    cluster, _ = watching(response)
    stream = cluster.watch(POD, "10")
    assert next(stream)[1]["metadata"]["name"] == "a"
    with pytest.raises(Unavailable, match="watch Pod: not a watch event"):
        next(stream)
    assert response.closed and response.released  # a half-read stream is not reused


@pytest.mark.parametrize(
    "broken",
    [
        ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')"),
        ConnectionResetError(104, "Connection reset by peer"),
        ReadTimeoutError(None, None, "Read timed out."),
    ],
    ids=["protocol-error", "connection-reset", "read-timeout"],
)
def test_a_stream_that_breaks_midway_raises_unavailable_instead_of_ending_quietly(broken):
    response = FakeResponse(chunks=[line("ADDED", "a", "11"), broken])
    cluster, _ = watching(response)
    events = []
    with pytest.raises(Unavailable, match="watch Pod: the stream broke"):
        for event in cluster.watch(POD, "10"):
            events.append(event)
    assert [obj["metadata"]["name"] for _, obj in events] == ["a"]
    assert response.closed and response.released


def test_an_error_event_410_raises_an_error_with_status_410_so_the_caller_relists():
    gone = json.dumps({"type": "ERROR", "object": status(410, "Expired", "too old resource version: 10 (42)")})
    response = FakeResponse(chunks=[line("ADDED", "a", "11"), gone.encode() + b"\n", line("ADDED", "b", "12")])
    cluster, _ = watching(response)
    events = []
    with pytest.raises(Invalid) as raised:
        for event in cluster.watch(POD, "10"):
            events.append(event)
    assert len(events) == 1
    assert (raised.value.status, raised.value.reason) == (410, "Expired")
    assert str(raised.value) == "watch Pod: too old resource version: 10 (42)"
    assert response.closed and response.released


def test_an_error_event_of_a_server_failure_raises_unavailable():
    failed = json.dumps({"type": "ERROR", "object": status(500, "InternalError", "etcd leader changed")})
    cluster, _ = watching(FakeResponse(chunks=[failed.encode() + b"\n"]))
    with pytest.raises(Unavailable, match="watch Pod: etcd leader changed") as raised:
        list(cluster.watch(POD, "10"))
    assert raised.value.status == 500


@pytest.mark.parametrize(
    "code, reason, cls", [(410, "Expired", Invalid), (500, "InternalError", Unavailable), (403, "Forbidden", Invalid)]
)
def test_an_answer_other_than_200_raises_its_mapped_error_before_any_event(code, reason, cls):
    body = json.dumps(status(code, reason, f"no watch for you ({code})")).encode()
    response = FakeResponse(status=code, body=body, chunks=[line("ADDED", "a", "11")])
    cluster, _ = watching(response)
    with pytest.raises(cls, match=rf"watch Pod: no watch for you \({code}\)") as raised:
        list(cluster.watch(POD, "10"))
    assert type(raised.value) is cls and raised.value.status == code
    assert not response.streamed  # its body was read as an error, never taken for events
    assert cluster.metrics.errors == 1


def test_a_server_out_of_reach_raises_unavailable_for_a_watch_as_for_a_call():
    cluster, _ = watching(
        ConnectionRefusedError(111, "Connection refused"), ConnectionRefusedError(111, "Connection refused")
    )
    with pytest.raises(Unavailable, match=f"watch Pod: cannot reach the API server at {HOST}"):
        list(cluster.watch(POD, "10"))
    with pytest.raises(Unavailable, match=f"list Pod: cannot reach the API server at {HOST}"):
        cluster.list(POD)


def test_a_call_answered_200_with_a_body_that_is_not_json_raises_unavailable():
    cluster, _ = watching(FakeResponse(body=b"<html>captive portal</html>"))
    with pytest.raises(Unavailable, match="list Pod: the API server answered 200 with a body that is not JSON"):
        cluster.list(POD)
