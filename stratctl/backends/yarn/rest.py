"""The ResourceManager's REST API (`/ws/v1/cluster/...`), as the YARN backend speaks it.

One `ResourceManager` is a YARN cluster seen through its RM web addresses: the first that
answers as the active RM is used until it stops answering. An HA pair's standby redirects
to the active one (HTTP 307) or says it is the standby: either way the next address is
tried, and the one that answers is remembered.

An answer is sorted the way the API server's are: no answer (refused, reset, timed out) or
every RM a standby is `Unavailable`, to back off from and retry; 429 and 503 are
`Throttled`, pressure (with the RM's Retry-After); a 4xx is `Invalid`, the verdict on that
one request, with the RM's own message (its RemoteException) in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3

from stratctl.errors import Invalid, NotFound, Throttled, Unavailable, Unreachable

API = "/ws/v1/cluster"


def _message(body: bytes) -> str:
    """The RM's own words for a refusal: its RemoteException's message, else the body."""
    try:
        remote = json.loads(body).get("RemoteException") or {}
        text = remote.get("message") or remote.get("exception") or ""
    except (ValueError, AttributeError):
        text = ""
    return " ".join((text or body.decode("utf-8", "replace")).split())[:400]


@dataclass
class ResourceManager:
    urls: list[str]
    user: str | None = None  # user.name of every request (simple authentication)
    timeout: float = 10.0  # a read: the RM answers in milliseconds; longer is a pause to back off from
    pool: urllib3.PoolManager | None = None
    calls: int = 0  # requests made, for the loop's counters
    sent: dict[str, int] = field(default_factory=dict)  # by kind: `submissions`, `list`, `kill`...
    refused: dict[str, int] = field(default_factory=dict)  # of those, refused as pressure (429/503)
    _active: int = 0
    _answered: bool = False  # some RM has answered this command once

    def __post_init__(self) -> None:
        self.pool = self.pool or urllib3.PoolManager(
            maxsize=8, retries=False, timeout=urllib3.Timeout(connect=5.0, read=self.timeout)
        )

    @property
    def url(self) -> str:
        """The address answering as the active RM (the first until one has answered)."""
        return self.urls[self._active]

    def request(
        self,
        kind: str,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        query: dict[str, Any] | None = None,
        api: str = API,
    ) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        answer = self._send(kind, method, api + path, query, data)
        return self._answer(kind, method, path, answer)

    def _send(
        self, kind: str, method: str, path: str, query: dict[str, Any] | None, data: bytes | None, proxied: bool = False
    ) -> urllib3.BaseHTTPResponse:
        """One request to the active RM (the next address when one does not answer as it).
        `proxied`: through the RM's web proxy, where a redirect without a standby's words is
        the proxy's own answer for an application that has ended, not the RM's."""
        self.calls += 1
        self.sent[kind] = self.sent.get(kind, 0) + 1
        params = {**(query or {}), **({"user.name": self.user} if self.user else {})}
        target = path + (f"?{urlencode(params)}" if params else "")
        headers = {"Accept": "application/json", **({"Content-Type": "application/json"} if data else {})}
        said = []
        order = [self._active] + [i for i in range(len(self.urls)) if i != self._active]
        for i in order:
            base = self.urls[i]
            assert self.pool is not None  # made at construction
            try:
                answer = self.pool.request(method, base + target, body=data, headers=headers, redirect=False)
            except urllib3.exceptions.HTTPError as exc:
                said.append(f"{base}: {_reason(exc)}")
                continue
            # an AM's answer through the proxy is the AM's text: only the standby RM's own words count there
            standby = (b"this is standby rm" if proxied else b"standby") in answer.data[:400].lower()
            if (answer.status in (301, 302, 307, 308) and not proxied) or standby:
                located = answer.headers.get("Location") or ""
                said.append(
                    f"{base}: a standby ResourceManager" + (f" (the active one: {_origin(located)})" if located else "")
                )
                continue
            self._active, self._answered = i, True
            return answer
        if not self._answered and not any("standby" in s for s in said):
            # never reached at all: a setup to fix (an address, the RM not started), not a pause to wait out
            raise Unreachable(
                "no ResourceManager answers (" + "; ".join(said) + "): check yarn.resource_managers "
                "in the study (the local testbed's is http://127.0.0.1:28088: `make yarn-up`)"
            )
        raise Unavailable("no ResourceManager answers as the active one: " + "; ".join(said))

    def _answer(self, kind: str, method: str, path: str, answer: urllib3.BaseHTTPResponse) -> dict[str, Any]:
        status = answer.status
        if status in (429, 503):
            self.refused[kind] = self.refused.get(kind, 0) + 1
            retry = answer.headers.get("Retry-After")
            raise Throttled(
                f"ResourceManager: {method} {path}: HTTP {status}: {_message(answer.data)}",
                status=status,
                retry_after=float(retry) if retry and retry.replace(".", "", 1).isdigit() else None,
            )
        if status == 404:
            raise NotFound(f"ResourceManager: {method} {path}: {_message(answer.data)}")
        if status >= 500:
            raise Unavailable(f"ResourceManager: {method} {path}: HTTP {status}: {_message(answer.data)}")
        if status >= 400:
            raise Invalid(f"ResourceManager: {method} {path}: HTTP {status}: {_message(answer.data)}", status=status)
        if not answer.data.strip():
            return {}
        try:
            parsed: dict[str, Any] = json.loads(answer.data)
        except ValueError:
            raise Unavailable(f"ResourceManager: {method} {path}: not JSON: {answer.data[:200]!r}") from None
        return parsed

    # -- what the backend asks -----------------------------------------------------------

    def new_application(self) -> str:
        return str(self.request("new-application", "POST", "/apps/new-application")["application-id"])

    def submit(self, body: dict[str, Any]) -> None:
        self.request("submissions", "POST", "/apps", body)

    def apps(self, tag: str, application_type: str | None = None) -> list[dict[str, Any]]:
        """Every application the RM remembers with this tag (tags are lowercase in YARN)."""
        query = {"applicationTags": tag.lower(), **({"applicationTypes": application_type} if application_type else {})}
        answer = self.request("list", "GET", "/apps", query=query)
        apps = (answer.get("apps") or {}) if isinstance(answer, dict) else {}
        listed = apps.get("app") if isinstance(apps, dict) else None
        return listed if isinstance(listed, list) else []

    def proxied(self, app_id: str, path: str) -> str | None:
        """What a running application's AM serves at `path` of its tracking URL, through the
        RM's web proxy (`/proxy/<app>/<path>`): the submitting machine reaches only the RM.
        None when the proxy does not forward (it redirects for an application that has
        ended, or one whose AM gave no tracking URL); NotFound for an application the RM
        does not know; Unavailable when the AM does not answer the proxy."""
        answer = self._send("proxy", "GET", f"/proxy/{app_id}/{path}", None, None, proxied=True)
        if answer.status in (301, 302, 303, 307, 308):
            return None
        if answer.status == 200:
            return answer.data.decode("utf-8", "replace")
        self._answer("proxy", "GET", f"/proxy/{app_id}/{path}", answer)  # raises: the status's class
        return None  # a 2xx without content: nothing served

    def kill(self, app_id: str) -> None:
        self.request("kill", "PUT", f"/apps/{app_id}/state", {"state": "KILLED"})

    def move(self, app_id: str, queue: str) -> None:
        """Move an application to another queue (the Cluster Application Queue API)."""
        self.request("move", "PUT", f"/apps/{app_id}/queue", {"queue": queue})

    def nodes(self) -> list[dict[str, Any]]:
        answer = self.request("nodes", "GET", "/nodes")
        nodes = (answer.get("nodes") or {}) if isinstance(answer, dict) else {}
        listed = nodes.get("node") if isinstance(nodes, dict) else None
        return listed if isinstance(listed, list) else []

    def scheduler(self) -> dict[str, Any]:
        """The scheduler's view: queues with their capacities, use and applications."""
        return self.request("scheduler", "GET", "/scheduler")

    def conf(self, name: str) -> str | None:
        """One value of the RM's configuration (its /conf servlet, which answers
        `{"property": {"key": …, "value": …}}`, or 404 for a name it does not hold), None
        when not set."""
        try:
            said = self.request("conf", "GET", "/conf", query={"name": name}, api="")
        except NotFound:
            return None
        properties = [said.get("property") or {}] + list(said.get("properties") or [])
        return next((p.get("value") for p in properties if isinstance(p, dict) and p.get("key") == name), None)


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "no answer (timed out)"
    return " ".join(text.split())[:200]


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else url
