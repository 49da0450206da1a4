"""The Kubernetes API adapter: the only module that imports `kubernetes`.

Objects go in and come out as plain dicts (the manifests `render` produced, the JSON the
server returned); HTTP failures come out as the `errors` hierarchy (429/503 → Throttled
with its Retry-After, 409 → AlreadyExists, 404 → NotFound, other 4xx → Invalid,
connection errors and 5xx → Unavailable; 410 Gone → Invalid with status 410). A 401/403
on a request of a kind that worked moments before is Unavailable too: a restarting API
server refuses until its authorization has loaded (`grants`). A call and a watch share
one request path (`_prepare`, `_send`). Every request passes through `gate`, a callable
that admits it (the throttle: token bucket + retries), is timed so the controller can
read API latency as a pressure signal, and tells `outage` whether the server answered:
after `patience` seconds without an answer, requests give up (`Unreachable`) instead of
being retried for ever.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

import urllib3

from stratctl.backends.kubernetes.answers import parse
from stratctl.backends.kubernetes.credentials import Unsupported, static_credentials
from stratctl.backends.kubernetes.grants import Grants, access, denial_is_transient
from stratctl.errors import AlreadyExists, ClusterError, Invalid, NotFound, Throttled, Unavailable, UsageError
from stratctl.run.outage import Outage, duration

if TYPE_CHECKING:
    from kubernetes import client as k8s_client

    from stratctl.backends.kubernetes.transport import PlainApi

T = TypeVar("T")
Gate = Callable[..., T]  # gate(fn, mutating=bool) -> fn's result: admits (and retries) one request

FIELD_MANAGER = "stratctl"

# (apiVersion, kind) -> (plural, namespaced). Only what stratctl reads or writes.
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("batch.volcano.sh/v1alpha1", "Job"): ("jobs", True),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): ("podgroups", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Service"): ("services", True),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Event"): ("events", True),
    ("v1", "Node"): ("nodes", False),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("v1", "Namespace"): ("namespaces", False),
    ("scheduling.volcano.sh/v1beta1", "Queue"): ("queues", False),
    ("topology.volcano.sh/v1alpha1", "HyperNode"): ("hypernodes", False),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): ("selfsubjectaccessreviews", False),
}

VOLCANO_JOB = ("batch.volcano.sh/v1alpha1", "Job")
BATCH_JOB = ("batch/v1", "Job")
PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")
CONFIGMAP = ("v1", "ConfigMap")
SERVICE = ("v1", "Service")
POD = ("v1", "Pod")
NODE = ("v1", "Node")
PRIORITY_CLASS = ("scheduling.k8s.io/v1", "PriorityClass")
EVENT = ("v1", "Event")
NAMESPACE = ("v1", "Namespace")
QUEUE = ("scheduling.volcano.sh/v1beta1", "Queue")
HYPERNODE = ("topology.volcano.sh/v1alpha1", "HyperNode")
ACCESS_REVIEW = ("authorization.k8s.io/v1", "SelfSubjectAccessReview")


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    try:
        plural, namespaced = RESOURCES[(api_version, kind)]
    except KeyError:
        raise Invalid(f"stratctl does not manage objects of kind {kind} ({api_version})") from None
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = root
    if namespaced and namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{plural}"
    if name:
        path += f"/{quote(name, safe='')}"
    return path


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


def _unreached(exc: BaseException) -> str:
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


def watch_event(line: bytes, what: str) -> tuple[str, dict]:
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


@dataclass
class ApiMetrics:
    """Client-side view of the API server: request counts and recent latencies."""

    requests: int = 0
    writes: int = 0  # writes the server stored: creates, patches, deletes answered 2xx
    checks: int = 0  # writes it stored nothing for: access reviews and dry runs
    throttled: int = 0  # 429s received (before retries)
    errors: int = 0
    latencies: deque = field(default_factory=lambda: deque(maxlen=512))
    sent: dict[str, int] = field(default_factory=dict)  # requests sent per kind ("create Job"), retries included
    refused: dict[str, int] = field(default_factory=dict)  # of those, answered 429, per kind
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, kind: str, refused: bool = False) -> None:
        """One request of `kind` (the verb and kind its `what` starts with) went out."""
        with self._lock:
            self.sent[kind] = self.sent.get(kind, 0) + 1
            if refused:
                self.refused[kind] = self.refused.get(kind, 0) + 1

    def record(self, method: str, status: int | None, seconds: float, check: bool = False) -> None:
        """One request answered with `status` (None: no answer); `check`: one the server
        stores nothing for (an access review, a dry run), even when it is a POST."""
        with self._lock:
            self.requests += 1
            if method in ("POST", "PUT", "PATCH", "DELETE") and status is not None and 200 <= status < 300:
                if check:
                    self.checks += 1
                else:
                    self.writes += 1
            if status == 429:
                self.throttled += 1
            elif status is None or status >= 400:
                self.errors += 1
            self.latencies.append(seconds)

    def latency_quantile(self, q: float) -> float | None:
        with self._lock:
            data = sorted(self.latencies)
        if not data:
            return None
        return data[min(len(data) - 1, int(q * len(data)))]


def _replaying(refused: Throttled, send: Callable[[], Any]) -> Callable[[], Any]:
    """`send`, its first call raising `refused` instead: the 429 just received, as the gate's
    first attempt, so that its pace sees it."""
    pending = [refused]

    def again() -> Any:
        if pending:
            raise pending.pop()
        return send()

    return again


def _no_gate(fn: Callable[[], T], mutating: bool = False) -> T:
    return fn()


class Cluster:
    """Plain-dict CRUD, list and watch against one API server, in one default namespace."""

    def __init__(
        self,
        api: k8s_client.ApiClient | PlainApi,
        namespace: str,
        gate: Gate = _no_gate,
        outage: Outage | None = None,
        timeout: tuple[float, float] = (10, 60),
        client_errors: tuple[type[BaseException], ...] = (),
    ):
        self.api = api
        self.client_errors = client_errors  # what the Kubernetes client raises for a TLS failure
        self.namespace = namespace
        self.gate = gate
        self.metrics = ApiMetrics()
        self.grants = Grants()
        self.outage = outage or Outage()
        self.timeout = timeout  # (connect, read) of one request, cut to the outage's patience left

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        gate: Gate = _no_gate,
        pool_size: int = 32,
        outage: Outage | None = None,
    ) -> Cluster:
        """Load credentials the way kubectl does (KUBECONFIG, ~/.kube/config, in-cluster).
        A token or a client certificate needs urllib3 alone (`transport`); plugins and
        in-cluster credentials load the Kubernetes client."""
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        in_cluster = (
            path is None
            and os.environ.get("KUBERNETES_SERVICE_HOST")
            and not os.path.exists(os.path.expanduser("~/.kube/config"))
        )
        if path is not None and not os.path.exists(os.path.expanduser(path)):
            origin = "--kubeconfig" if kubeconfig else "$KUBECONFIG"
            raise UsageError(f"the kubeconfig file {path} ({origin}) does not exist")
        if not in_cluster:
            try:
                credentials = static_credentials(os.path.expanduser(path or "~/.kube/config"), context)
            except Unsupported:
                pass
            else:
                from stratctl.backends.kubernetes.transport import PlainApi

                plain = PlainApi(credentials, pool_size)
                plain.user_agent = f"stratctl/{__import__('stratctl').__version__}"
                cluster = cls(plain, namespace or credentials.namespace or "default", gate, outage)
                cluster.outage.watch()
                return cluster
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
        from kubernetes.config.config_exception import ConfigException

        configuration = k8s_client.Configuration()
        default_ns = "default"
        try:
            if in_cluster:
                k8s_config.load_incluster_config(client_configuration=configuration)
                ns_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
                if os.path.exists(ns_file):
                    default_ns = open(ns_file).read().strip() or default_ns
            else:
                path = path or os.path.expanduser("~/.kube/config")
                k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
                contexts, active = k8s_config.list_kube_config_contexts(config_file=path)
                chosen = next((c for c in contexts if c["name"] == context), active) if context else active
                default_ns = (chosen or {}).get("context", {}).get("namespace") or default_ns
        except (ConfigException, OSError, TypeError) as exc:
            raise UsageError(f"cannot load Kubernetes credentials: {exc}") from None
        configuration.connection_pool_maxsize = pool_size
        configuration.retries = False  # stratctl's throttle owns retries
        api = k8s_client.ApiClient(configuration)
        api.user_agent = f"stratctl/{__import__('stratctl').__version__}"
        cluster = cls(api, namespace or default_ns, gate, outage, client_errors=(k8s_client.ApiException,))
        cluster.outage.watch()  # a request hung on a stalled server is told before it times out
        return cluster

    # -- the one request path ---------------------------------------------------------

    def _prepare(
        self, method: str, path: str, query: dict | None, body: Any, content_type: str = "application/json"
    ) -> tuple[str, dict]:
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
        query: dict | None,
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
        started, sent = time.monotonic(), clock()
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
            unreached = Unavailable(
                f"{what}: cannot reach the API server at {self.api.configuration.host}: {_unreached(exc)}"
            )
            raise self.outage.failed(unreached, sent) from None
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

    def request(
        self,
        method: str,
        path: str,
        query: dict | None = None,
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

    # -- verbs ------------------------------------------------------------------------

    def _ns(self, manifest_or_ns: dict | str | None) -> str:
        if isinstance(manifest_or_ns, dict):
            return manifest_or_ns.get("metadata", {}).get("namespace") or self.namespace
        return manifest_or_ns or self.namespace

    def create(self, manifest: dict, dry_run: bool = False) -> dict:
        meta = manifest.get("metadata", {})
        ns = self._ns(manifest)
        path = resource_path(manifest["apiVersion"], manifest["kind"], ns)
        query = {"fieldManager": FIELD_MANAGER, "dryRun": "All" if dry_run else None}
        what = f"create {manifest['kind']} {ns}/{meta.get('name')}"
        return self.request("POST", path, query, manifest, what)

    def get(self, kind: tuple[str, str], name: str, namespace: str | None = None) -> dict:
        path = resource_path(*kind, self._ns(namespace), name)
        return self.request("GET", path, what=f"get {kind[1]} {name}")

    def delete(self, kind: tuple[str, str], name: str, namespace: str | None = None) -> None:
        path = resource_path(*kind, self._ns(namespace), name)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.request("DELETE", path, body=body, what=f"delete {kind[1]} {name}")
        except NotFound:
            pass

    def patch(self, kind: tuple[str, str], name: str, patch: dict, namespace: str | None = None) -> dict:
        path = resource_path(*kind, self._ns(namespace), name)
        return self.request(
            "PATCH",
            path,
            {"fieldManager": FIELD_MANAGER},
            patch,
            f"patch {kind[1]} {name}",
            "application/merge-patch+json",
        )

    def list(
        self,
        kind: tuple[str, str],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        all_namespaces: bool = False,
        transform: Callable[[dict], dict] | None = None,
    ) -> tuple[list[dict], str]:
        """Every matching object, fetched in pages; returns (items, resourceVersion).

        `transform` trims each object as its page arrives, so a list of 100,000 jobs never
        holds them whole at once: only one page of them, and what the transform keeps."""
        path = resource_path(*kind, None if all_namespaces else self._ns(namespace))
        items: list[dict] = []
        token = None
        while True:
            query = {
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
                "limit": page_size,
                "continue": token,
            }
            page = self.request("GET", path, query, what=f"list {kind[1]}")
            batch = page.pop("items", None) or []
            items.extend(map(transform, batch) if transform else batch)
            token = page.get("metadata", {}).get("continue")
            if not token:
                return items, page.get("metadata", {}).get("resourceVersion", "")

    def watch(
        self,
        kind: tuple[str, str],
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 30,
        all_namespaces: bool = False,
    ) -> Iterator[tuple[str, dict]]:
        """Stream (type, object) events after `resource_version`, through the same request
        path as every call.

        A normal end: the server closes the watch after `timeoutSeconds` (or sooner, when it
        shuts down cleanly); the generator returns and the caller watches again from the last
        resourceVersion it saw. Everything else raises, so no failure looks like a quiet
        watch: a connection reset, a protocol error, a read timeout or a line that is not a
        watch event raise `Unavailable`; an ERROR event raises the error of its Status code
        (410 Gone, the version is too old: `Invalid` with status 410, and the caller must
        relist, not watch again from that version); an answer other than 200 raises what
        `error_for` maps it to.
        """
        path = resource_path(*kind, None if all_namespaces else self._ns(namespace))
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "labelSelector": label_selector,
            "timeoutSeconds": timeout_seconds,
        }
        what = f"watch {kind[1]}"
        # the read timeout outlasts the server's own end of the watch, so only a stalled stream trips it
        response = self.gate(
            self._counted(
                what,
                lambda: self._send(
                    "GET", path, query, None, what, "application/json", stream=True, timeout=(10, timeout_seconds + 10)
                ),
            )
        )
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

    def pod_log(
        self,
        name: str,
        namespace: str | None = None,
        container: str | None = None,
        tail: int | None = None,
        follow: bool = False,
        timestamps: bool = False,
        since_time: str | None = None,
    ) -> Iterator[bytes]:
        """A container's log (pods/log, which the API server reads from the node's kubelet),
        line by line; with `follow`, the lines keep coming until the container ends or the
        caller stops reading."""
        path = resource_path(*POD, self._ns(namespace), name) + "/log"
        query = {
            "container": container,
            "tailLines": tail,
            "follow": "true" if follow else None,
            "timestamps": "true" if timestamps else None,
            "sinceTime": since_time,
        }
        what = f"log Pod {name}" + (f"/{container}" if container else "")
        if not follow:
            data = self.gate(
                self._counted(what, lambda: self._send("GET", path, query, None, what, "application/json", raw=True))
            )
            yield from data.splitlines(keepends=True)
            return
        response = self.gate(
            self._counted(
                what,
                lambda: self._send("GET", path, query, None, what, "application/json", stream=True, timeout=(10, 3600)),
            )
        )
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

    def with_gate(self, gate: Gate) -> Cluster:
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
