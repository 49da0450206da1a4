"""The one request path to an API server, which every call and watch of `Cluster` takes.

A request's URL and headers (with auth) are made once (`_prepare`); it is admitted by
`gate` (the throttle: token bucket + retries), counted per kind, timed so the controller
can read API latency as a pressure signal, and tells `outage` whether the server answered:
after `patience` seconds without an answer, requests give up (`Unreachable`) instead of
being retried for ever. An answer outside 2xx raises what `apierrors.error_for` maps it
to; a 401/403 on a request of a kind that worked moments before is `Unavailable`, as a
restarting API server refuses until its authorization has loaded (`grants`).

Every read has a deadline (`connections.SILENT`): a connection silent that long is dead,
and every idle one to the server is closed with it. While the server does not answer, the
outage's watchdog probes it on a new connection (`probe`); once it answers again, the
requests still waiting on connections lent before are cut and sent again at once
(`Reconnect`), so a network change costs seconds, not each request's deadline.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, Protocol, Self, TypeVar
from urllib.parse import urlencode

import urllib3

from stratctl.backends.kubernetes.api import connections
from stratctl.backends.kubernetes.api.answers import parse
from stratctl.backends.kubernetes.api.apierrors import error_for, unreached
from stratctl.backends.kubernetes.api.apimetrics import ApiMetrics
from stratctl.backends.kubernetes.api.connections import Connections
from stratctl.backends.kubernetes.api.grants import Grants, access
from stratctl.errors import Reconnect, Throttled, Unavailable
from stratctl.run.outage import Change, Outage

T = TypeVar("T")
Gate = Callable[..., T]  # gate(fn, mutating=bool) -> fn's result: admits (and retries) one request


class Api(Protocol):
    """What the request path uses of an API client: the Kubernetes client's `ApiClient`, or
    `transport.PlainApi`."""

    configuration: Any
    user_agent: str

    def update_params_for_auth(
        self,
        headers: dict[str, Any],
        queries: list[tuple[str, Any]] | None,
        auth_settings: list[str],
        resource_path: str,
        method: str,
        body: Any,
    ) -> None: ...

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, Any] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any: ...

    def close(self) -> None: ...


def _replaying(refused: Throttled, send: Callable[[], Any]) -> Callable[[], Any]:
    """`send`, its first call raising `refused` instead: the 429 just received, as the gate's
    first attempt, so that its pace sees it."""
    pending = [refused]

    def again() -> Any:
        if pending:
            raise pending.pop()
        return send()

    return again


def no_gate(fn: Callable[[], T], mutating: bool = False) -> T:
    """The gate that admits every request at once (no throttle)."""
    return fn()


class Channel:
    """Requests to one API server: prepared, admitted, counted, timed, and their answers
    or failures told to the outage account."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        gate: Gate[Any] = no_gate,
        outage: Outage | None = None,
        timeout: tuple[float, float] | None = None,
        client_errors: tuple[type[BaseException], ...] = (),
    ):
        self.api = api
        self.client_errors = client_errors  # what the Kubernetes client raises for a TLS failure
        self.namespace = namespace
        self.gate = gate
        self.metrics = ApiMetrics()
        self.grants = Grants()
        self.outage = outage or Outage()
        # (connect, read) of one request, cut to the outage's patience left
        self.timeout = timeout or (10.0, connections.SILENT)
        self.connections = Connections.of(api)  # shared by `with_gate`'s copies, as the outage is
        self.outage.listen(self._changed)
        self.outage.probe = self.probe

    # -- dead connections ---------------------------------------------------------------

    def _changed(self, change: Change) -> None:
        """The server answers again: cut the requests still waiting on connections lent
        before (they went dead with the network), so they go again at once."""
        if not change.down:
            self.sever()

    def sever(self) -> int:
        """Cut every request waiting on a connection lent until now; how many."""
        self.connections.drop_idle()
        return self.connections.sever(time.monotonic())

    def probe(self) -> bool:
        """Whether the server answers a new connection now (its readiness, etcd included):
        asked by the outage's watchdog while requests get no answer."""
        self.connections.drop_idle()
        url, headers = self._prepare("GET", "/readyz", None, None)
        try:
            wait = connections.PROBE_TIMEOUT
            response = self.api.call_api("GET", url, header_params=headers, _request_timeout=(wait, wait)).response
            response.read()
            status = response.status
        except Exception:  # no answer, whatever the reason: the outage goes on
            return False
        # not ready (a 5xx: etcd paused, shutting down) is no answer; a readiness this user
        # may not read (401/403/404) still says the server is reachable again
        return 200 <= status < 300 or status in (401, 403, 404)

    # -- the one request path ---------------------------------------------------------

    def _prepare(
        self, method: str, path: str, query: dict[str, Any] | None, body: Any, content_type: str = "application/json"
    ) -> tuple[str, dict[str, Any]]:
        """The URL (with its query) and the headers (with auth) of a request: made once here,
        for a call and a watch alike."""
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json", "Content-Type": content_type, "User-Agent": self.api.user_agent}
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        return url, headers

    def _send(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        what: str,
        content_type: str,
        stream: bool = False,
        timeout: tuple[float, float] | None = None,
        raw: bool = False,
    ) -> Any:
        """Send one request and return the JSON of a 2xx answer, or with `stream` the open
        response of a 200 (its body still unread, for `watch`). Every request is timed and
        tells the outage account whether the server answered; a failure to reach the server
        is `Unavailable` (`Unreachable` once the server has been silent past its patience),
        an answer outside 2xx its mapped error. `timeout` (connect, read) defaults to the
        cluster's, and is cut to the patience left."""
        url, headers = self._prepare(method, path, query, body, content_type)
        key, clock = access(method, path, query), self.outage.clock
        sent = clock()
        response, status, data = self._exchange(method, url, headers, path, query, body, what, stream, timeout, sent)
        if 200 <= status < 300:
            self.grants.allowed(key, clock())
            self.outage.answered()
            if stream and status == 200:
                return response
            if raw:  # a body that is not JSON: a container's log
                return data
            try:
                return parse(data) if data else None
            except ValueError:
                raise Unavailable(f"{what}: the API server answered {status} with a body that is not JSON") from None
        error = error_for(status, data, response.headers, what, self.grants.ago(key, clock()))
        if isinstance(error, Unavailable):  # no answer worth the name: a 5xx, or refused right after it worked
            raise self.outage.failed(error, sent)
        self.outage.answered()
        raise error

    def _exchange(
        self,
        method: str,
        url: str,
        headers: dict[str, Any],
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        what: str,
        stream: bool,
        timeout: tuple[float, float] | None,
        sent: float,
    ) -> tuple[Any, int, bytes]:
        """Send the request and read its answer: (response, status, body; b"" for a stream
        still open). Timed into the metrics; a server out of reach is told to the outage
        account (sent at `sent` on its clock) and raised."""
        started = time.monotonic()
        status, token = None, self.outage.sending(what)
        try:
            # the client's own call, unread underneath (what it hands back for _preload_content=False)
            response = self.api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                _request_timeout=self.outage.timeout(*(timeout or self.timeout)),
            ).response
            status = response.status
            data = b"" if stream and status == 200 else response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.connections.drop_idle()  # the connections went down together
            host = self.api.configuration.host
            if started <= self.connections.severed:  # cut once the server answered again: no outage, go again now
                raise Reconnect(f"{what}: its connection to {host} died; sending it again") from None
            down = Unavailable(f"{what}: cannot reach the API server at {host}: {unreached(exc)}")
            raise self.outage.failed(down, sent) from None
        except self.client_errors as exc:  # the Kubernetes client's TLS errors surface this way
            reason = getattr(exc, "reason", exc)
            raise self.outage.failed(Unavailable(f"{what}: {' '.join(str(reason).split())}"), sent) from None
        finally:
            self.outage.received(token)
            self.metrics.record(
                method,
                status,
                time.monotonic() - started,
                check=bool(query and query.get("dryRun")) or path.endswith("/selfsubjectaccessreviews"),
            )
        return response, status, data

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        what: str = "",
        content_type: str = "application/json",
    ) -> Any:
        what = what or f"{method} {path}"
        return self.gate(
            self._counted(what, lambda: self._send(method, path, query, body, what, content_type)),
            mutating=method != "GET",
        )

    def _counted(self, what: str, send: Callable[[], T]) -> Callable[[], T]:
        """`send`, counted per kind of request (the verb and kind `what` starts with) each
        time the gate sends it: what a study costs the API server, by kind."""
        kind = " ".join(what.split()[:2])

        def attempt() -> T:
            try:
                result = send()
            except Throttled:
                self.metrics.count(kind, refused=True)
                raise
            except BaseException:
                self.metrics.count(kind)
                raise
            self.metrics.count(kind)
            return result

        return attempt

    def with_gate(self, gate: Gate[Any]) -> Self:
        """This cluster (its connection, metrics, grants and outage account) with its requests
        admitted by `gate` instead."""
        other = copy.copy(self)
        other.gate = gate
        return other

    def reach(self, pause: float = 1.0) -> None:
        """Wait for the API server's first answer (GET /version), asking again every `pause`
        seconds, without the throttle's growing backoff: a server that cannot be reached is
        `Unreachable` once the outage's patience has passed, not a few backoffs later. A
        server that answers 429 is reached, and busy: the gate paces the request until it
        goes through, within the command's bound, as it paces every other."""
        what = "get /version"

        def send() -> Any:
            return self._send("GET", "/version", None, None, what, "application/json")

        while True:
            try:
                send()
                return
            except Unavailable:
                time.sleep(min(pause, max(0.0, self.outage.remaining())))
            except Throttled as exc:
                self.gate(self._counted(what, _replaying(exc, send)))
                return

    def close(self) -> None:
        self.outage.stop()
        self.api.close()
