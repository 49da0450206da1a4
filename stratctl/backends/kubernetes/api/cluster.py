"""The Kubernetes API adapter: the only module that imports `kubernetes`.

Objects go in and come out as plain dicts (the manifests `render` produced, the JSON the
server returned); HTTP failures come out as the `errors` hierarchy (429/503 → Throttled
with its Retry-After, 409 → AlreadyExists, 404 → NotFound, other 4xx → Invalid,
connection errors and 5xx → Unavailable; 410 Gone → Invalid with status 410). A 401/403
on a request of a kind that worked moments before is Unavailable too: a restarting API
server refuses until its authorization has loaded (`grants`). A call and a watch share
one request path (`channel.Channel`): every request passes through `gate`, a callable
that admits it (the throttle: token bucket + retries), is timed, and tells `outage`
whether the server answered. `Cluster.connect` loads credentials the way kubectl does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from stratctl.backends.kubernetes.api import connections
from stratctl.backends.kubernetes.api.apierrors import error_for
from stratctl.backends.kubernetes.api.apimetrics import ApiMetrics
from stratctl.backends.kubernetes.api.channel import Channel, Gate, no_gate
from stratctl.backends.kubernetes.api.connections import WATCH_SPAN
from stratctl.backends.kubernetes.api.credentials import Unsupported, static_credentials
from stratctl.backends.kubernetes.api.resources import (
    ACCESS_REVIEW,
    BATCH_JOB,
    CONFIGMAP,
    EVENT,
    HYPERNODE,
    NAMESPACE,
    NODE,
    POD,
    PODGROUP,
    PRIORITY_CLASS,
    QUEUE,
    RESOURCES,
    SERVICE,
    VOLCANO_JOB,
    resource_path,
)
from stratctl.backends.kubernetes.api.streams import log_lines, watch_events
from stratctl.errors import NotFound, Reconnect, Unavailable, UsageError
from stratctl.run.outage import Outage

if TYPE_CHECKING:
    from kubernetes import client as k8s_client


FIELD_MANAGER = "stratctl"

# what callers import from here, though kept in modules of their own (`resources`, `apierrors`, `channel`)
__all__ = ["Cluster", "FIELD_MANAGER", "Gate", "ApiMetrics", "error_for", "resource_path", "RESOURCES", "ACCESS_REVIEW"]
__all__ += ["BATCH_JOB", "CONFIGMAP", "EVENT", "HYPERNODE", "NAMESPACE", "NODE", "POD", "PODGROUP", "PRIORITY_CLASS"]
__all__ += ["QUEUE", "SERVICE", "VOLCANO_JOB"]


def _located(kubeconfig: str | None) -> tuple[str | None, bool]:
    """The kubeconfig file kubectl would read (--kubeconfig, the first of $KUBECONFIG; None:
    ~/.kube/config), and whether to use in-cluster credentials instead (in a pod, without
    either)."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    in_cluster = bool(
        path is None
        and os.environ.get("KUBERNETES_SERVICE_HOST")
        and not os.path.exists(os.path.expanduser("~/.kube/config"))
    )
    if path is not None and not os.path.exists(os.path.expanduser(path)):
        origin = "--kubeconfig" if kubeconfig else "$KUBECONFIG"
        raise UsageError(f"the kubeconfig file {path} ({origin}) does not exist")
    return path, in_cluster


def _client_api(
    path: str | None, context: str | None, in_cluster: bool, pool_size: int
) -> tuple[k8s_client.ApiClient, str, tuple[type[BaseException], ...]]:
    """The Kubernetes client for credentials only it can load (exec plugins, in-cluster):
    its API client, the namespace its context names, and the errors it raises for a TLS
    failure."""
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
    return api, default_ns, (k8s_client.ApiException,)


class Cluster(Channel):
    """Plain-dict CRUD, list and watch against one API server, in one default namespace."""

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        gate: Gate[Any] = no_gate,
        pool_size: int = 32,
        outage: Outage | None = None,
    ) -> Cluster:
        """Load credentials the way kubectl does (KUBECONFIG, ~/.kube/config, in-cluster).
        A token or a client certificate needs urllib3 alone (`transport`); plugins and
        in-cluster credentials load the Kubernetes client."""
        path, in_cluster = _located(kubeconfig)
        if not in_cluster:
            try:
                credentials = static_credentials(os.path.expanduser(path or "~/.kube/config"), context)
            except Unsupported:
                pass
            else:
                from stratctl.backends.kubernetes.api.transport import PlainApi

                plain = PlainApi(credentials, pool_size)
                plain.user_agent = f"stratctl/{__import__('stratctl').__version__}"
                cluster = cls(plain, namespace or credentials.namespace or "default", gate, outage)
                cluster.outage.watch()
                return cluster
        api, default_ns, client_errors = _client_api(path, context, bool(in_cluster), pool_size)
        cluster = cls(api, namespace or default_ns, gate, outage, client_errors=client_errors)
        cluster.outage.watch()  # a request hung on a stalled server is told before it times out
        return cluster

    # -- verbs ------------------------------------------------------------------------

    def _ns(self, manifest_or_ns: dict[str, Any] | str | None) -> str:
        if isinstance(manifest_or_ns, dict):
            return manifest_or_ns.get("metadata", {}).get("namespace") or self.namespace
        return manifest_or_ns or self.namespace

    def create(self, manifest: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        meta = manifest.get("metadata", {})
        ns = self._ns(manifest)
        path = resource_path(manifest["apiVersion"], manifest["kind"], ns)
        query = {"fieldManager": FIELD_MANAGER, "dryRun": "All" if dry_run else None}
        what = f"create {manifest['kind']} {ns}/{meta.get('name')}"
        created: dict[str, Any] = self.request("POST", path, query, manifest, what)
        return created

    def get(self, kind: tuple[str, str], name: str, namespace: str | None = None) -> dict[str, Any]:
        path = resource_path(*kind, self._ns(namespace), name)
        found: dict[str, Any] = self.request("GET", path, what=f"get {kind[1]} {name}")
        return found

    def delete(
        self, kind: tuple[str, str], name: str, namespace: str | None = None, resource_version: str | None = None
    ) -> None:
        """Delete an object (gone already: nothing to do); with `resource_version`, only while
        it is still that version (else AlreadyExists: the 409 of a failed precondition)."""
        path = resource_path(*kind, self._ns(namespace), name)
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if resource_version:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            self.request("DELETE", path, body=body, what=f"delete {kind[1]} {name}")
        except NotFound:
            pass

    def patch(
        self, kind: tuple[str, str], name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        path = resource_path(*kind, self._ns(namespace), name)
        patched: dict[str, Any] = self.request(
            "PATCH",
            path,
            {"fieldManager": FIELD_MANAGER},
            patch,
            f"patch {kind[1]} {name}",
            "application/merge-patch+json",
        )
        return patched

    def list(
        self,
        kind: tuple[str, str],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        all_namespaces: bool = False,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Every matching object, fetched in pages; returns (items, resourceVersion).

        `transform` trims each object as its page arrives, so a list of 100,000 jobs never
        holds them whole at once: only one page of them, and what the transform keeps."""
        path = resource_path(*kind, None if all_namespaces else self._ns(namespace))
        items: list[dict[str, Any]] = []
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
        timeout_seconds: int = WATCH_SPAN,
        all_namespaces: bool = False,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
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
        # the read deadline outlasts the server's own end of the watch by WATCH_GRACE: a watch
        # silent past it died (`connections`)
        deadline = timeout_seconds + connections.WATCH_GRACE
        opened = time.monotonic()
        response = self.gate(
            self._counted(
                what,
                lambda: self._send(
                    "GET", path, query, None, what, "application/json", stream=True, timeout=(10, deadline)
                ),
            )
        )
        try:
            yield from watch_events(response, what)
        except Unavailable as exc:
            self.connections.drop_idle()  # they went down together
            if opened <= self.connections.severed:  # cut as the server answers again: watch again now
                raise Reconnect(f"{what}: its connection died; watching again") from None
            raise exc

    def pod_log(
        self,
        name: str,
        namespace: str | None = None,
        container: str | None = None,
        tail: int | None = None,
        follow: bool = False,
        timestamps: bool = False,
        since_time: str | None = None,
        limit_bytes: int | None = None,
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
            "limitBytes": limit_bytes,
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
                lambda: self._send(
                    "GET", path, query, None, what, "application/json", stream=True, timeout=(10, connections.SILENT)
                ),
            )
        )
        yield from log_lines(response, what)
