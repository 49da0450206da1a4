"""The kubernetes ApiClient at its HTTP boundary, answering from a script in virtual time:
for unit tests of `Cluster`'s request path (errors, grants, outages, timeouts)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from stratctl.backends.kubernetes.api.cluster import Cluster
from stratctl.run.outage import Outage

HOST = "https://k8s.test:6443"


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": code}
    ).encode()


class Answer:
    """One HTTP answer: a status, a body, headers."""

    def __init__(self, status: int = 200, body: bytes = b"{}", headers: dict | None = None):
        self.status, self.body, self.headers = status, body, headers or {}

    def read(self) -> bytes:
        return self.body

    def getheaders(self) -> dict:
        return self.headers


OK = Answer(200, b'{"kind": "ConfigMap", "metadata": {"name": "x"}}')


def forbidden(what: str = 'configmaps "x" is forbidden: User "alice" cannot get resource "configmaps"') -> Answer:
    return Answer(403, status_body(403, "Forbidden", what))


class FakeApi:
    """Answers requests from `script`: an `Answer`, an exception (raised as the connection
    would), or a number of seconds the request hangs before its read timeout (the clock
    moves by the read timeout when it is shorter, and urllib3's ReadTimeoutError is raised)."""

    def __init__(self, clock, *script):
        self.configuration = SimpleNamespace(host=HOST)
        self.user_agent = "stratctl/test"
        self.clock = clock
        self.script = list(script)
        self.requests: list[dict] = []
        self.rest_client = self

    def update_params_for_auth(self, headers, queries, auth_settings, resource_path, method, body):
        headers["Authorization"] = "Bearer s3cret"

    def _answer(self, method, url, timeout):
        from urllib3.exceptions import ReadTimeoutError

        self.requests.append({"method": method, "url": url, "timeout": timeout, "at": self.clock()})
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]  # the last one repeats
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, int | float):
            read = timeout[1] if isinstance(timeout, tuple) else timeout
            if read is not None and read < answer:
                self.clock.sleep(read)
                raise ReadTimeoutError(None, url, f"Read timed out. (read timeout={read})")
            self.clock.sleep(answer)
            return OK
        return answer

    def request(self, method, url, headers=None, body=None, _request_timeout=None, **_):  # rest_client.request
        return self._answer(method, url, _request_timeout)

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None, **_):
        answer = self._answer(method, url, _request_timeout)
        return SimpleNamespace(status=answer.status, response=answer)


def cluster(clock, *script, patience: float = 300.0, first_patience: float | None = None, gate=None) -> Cluster:
    """A Cluster over a scripted API, its outage account on the virtual clock."""
    kwargs = {"gate": gate} if gate is not None else {}
    made = Cluster(FakeApi(clock, *script), "ns", outage=Outage(patience, first_patience, clock=clock), **kwargs)
    return made
