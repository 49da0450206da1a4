"""The Kubernetes API adapter: the only module that imports `kubernetes`.

Objects go in and come out as plain dicts (the manifests `render` produced, the JSON the
server returned); HTTP failures come out as the `errors` hierarchy (429/503 → Throttled
with its Retry-After, 409 → AlreadyExists, 404 → NotFound, other 4xx → Invalid,
connection errors and 5xx → Unavailable). Every request passes through `gate`, a
callable that admits it (the throttle: token bucket + retries), and is timed so the
controller can read API latency as a pressure signal.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from stratctl.errors import AlreadyExists, ClusterError, Invalid, NotFound, Throttled, Unavailable, UsageError

T = TypeVar("T")
Gate = Callable[[Callable[[], T]], T]

FIELD_MANAGER = "stratctl"

# (apiVersion, kind) -> (plural, namespaced). Only what stratctl reads or writes.
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("batch.volcano.sh/v1alpha1", "Job"): ("jobs", True),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): ("podgroups", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Event"): ("events", True),
    ("v1", "Node"): ("nodes", False),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
}

VOLCANO_JOB = ("batch.volcano.sh/v1alpha1", "Job")
BATCH_JOB = ("batch/v1", "Job")
PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")
CONFIGMAP = ("v1", "ConfigMap")
POD = ("v1", "Pod")
NODE = ("v1", "Node")
PRIORITY_CLASS = ("scheduling.k8s.io/v1", "PriorityClass")
EVENT = ("v1", "Event")


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


def error_for(status: int, body: bytes, headers: Any, what: str) -> ClusterError:
    """Map an HTTP failure to the error hierarchy (pure; tested without a server)."""
    message = f"{what}: {_status_message(status, body)}"
    if status == 429 or (status == 503 and _retry_after(headers) is not None):
        return Throttled(message, status=status, retry_after=_retry_after(headers))
    if status == 409:
        return AlreadyExists(message)
    if status == 404:
        return NotFound(message)
    if status >= 500 or status in (408,):
        return Unavailable(message, status=status)
    reason = {401: "Unauthorized", 403: "Forbidden", 422: "Invalid", 400: "BadRequest"}.get(status)
    return Invalid(message, status=status, reason=reason)


@dataclass
class ApiMetrics:
    """Client-side view of the API server: request counts and recent latencies."""

    requests: int = 0
    writes: int = 0
    throttled: int = 0  # 429s received (before retries)
    errors: int = 0
    latencies: deque = field(default_factory=lambda: deque(maxlen=512))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, method: str, status: int | None, seconds: float) -> None:
        with self._lock:
            self.requests += 1
            if method in ("POST", "PUT", "PATCH", "DELETE"):
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


def _no_gate(fn: Callable[[], T]) -> T:
    return fn()


class Cluster:
    """Plain-dict CRUD, list and watch against one API server, in one default namespace."""

    def __init__(self, api: k8s_client.ApiClient, namespace: str, gate: Gate = _no_gate):
        self.api = api
        self.namespace = namespace
        self.gate = gate
        self.metrics = ApiMetrics()

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        gate: Gate = _no_gate,
        pool_size: int = 32,
    ) -> Cluster:
        """Load credentials the way kubectl does (KUBECONFIG, ~/.kube/config, in-cluster)."""
        configuration = k8s_client.Configuration()
        default_ns = "default"
        try:
            path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
            if path is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.path.exists(
                os.path.expanduser("~/.kube/config")
            ):
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
        return cls(api, namespace or default_ns, gate)

    # -- the one request primitive -------------------------------------------------

    def _send(self, method: str, path: str, query: dict | None, body: Any, what: str, content_type: str) -> Any:
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json", "Content-Type": content_type, "User-Agent": self.api.user_agent}
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        started = time.monotonic()
        status = None
        try:
            response = self.api.rest_client.request(method, url, headers=headers, body=body, _request_timeout=(10, 60))
            status = response.status
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{what}: cannot reach the API server at {self.api.configuration.host}: {exc}") from None
        except k8s_client.ApiException as exc:  # TLS errors surface this way
            raise Unavailable(f"{what}: {exc.reason}") from None
        finally:
            self.metrics.record(method, status, time.monotonic() - started)
        if 200 <= status < 300:
            return json.loads(data) if data else None
        raise error_for(status, data, response.getheaders(), what)

    def request(
        self,
        method: str,
        path: str,
        query: dict | None = None,
        body: Any = None,
        what: str = "",
        content_type: str = "application/json",
    ) -> Any:
        return self.gate(lambda: self._send(method, path, query, body, what or f"{method} {path}", content_type))

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
            "PATCH", path, {"fieldManager": FIELD_MANAGER}, patch, f"patch {kind[1]} {name}", "application/merge-patch+json"
        )

    def list(
        self,
        kind: tuple[str, str],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        all_namespaces: bool = False,
    ) -> tuple[list[dict], str]:
        """Every matching object, fetched in pages; returns (items, resourceVersion)."""
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
            items.extend(page.get("items") or [])
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
        """Stream (type, object) events after `resource_version` until the server ends the watch.

        A 410 Gone (resource version too old) comes out as `Invalid` with status 410; the
        caller relists.
        """
        path = resource_path(*kind, None if all_namespaces else self._ns(namespace))
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "labelSelector": label_selector,
            "timeoutSeconds": timeout_seconds,
        }
        url = self.api.configuration.host + path + "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json", "User-Agent": self.api.user_agent}
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, "GET", None)

        def open_stream():
            started = time.monotonic()
            try:
                response = self.api.rest_client.pool_manager.request(
                    "GET", url, headers=headers, preload_content=False, timeout=urllib3.Timeout(connect=10, read=timeout_seconds + 10)
                )
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                self.metrics.record("GET", None, time.monotonic() - started)
                raise Unavailable(f"watch {kind[1]}: {exc}") from None
            self.metrics.record("GET", response.status, time.monotonic() - started)
            if response.status != 200:
                raise error_for(response.status, response.read(), response.headers, f"watch {kind[1]}")
            return response

        response = self.gate(open_stream)
        buffer = b""
        try:
            for chunk in response.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        code = obj.get("code", 500)
                        raise error_for(code, json.dumps(obj).encode(), {}, f"watch {kind[1]}")
                    yield event["type"], obj
        except (urllib3.exceptions.HTTPError, OSError):
            return  # the stream ended; the caller resumes from its last resourceVersion
        finally:
            response.release_conn()

    def close(self) -> None:
        self.api.close()
