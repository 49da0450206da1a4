"""The study names of a namespace, read with the standard library alone, for a shell's Tab.

Loading the Kubernetes client costs about 0.3 s, more than a Tab may take. A kubeconfig
whose user authenticates with a token, a token file or a client certificate (what most
clusters and kind give) needs only an HTTPS GET, which this module makes with
`http.client` and the credentials `kube.credentials` reads: the list of the study records
(ConfigMaps labelled managed-by=stratctl). A kubeconfig it cannot follow (an exec or
auth-provider plugin, a proxy) gives None, and the completion goes the client's way
(`engine.names`).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

from stratctl import labels
from stratctl.backends.kubernetes.api.credentials import Unsupported, static_credentials
from stratctl.backends.kubernetes.api.kubeconfig import UnknownContext, kubeconfig_path


def study_names(kubeconfig: str | None, context: str | None, namespace: str | None, timeout: float) -> list[str] | None:
    """The studies of the namespace in name order; None when the kubeconfig needs the client."""
    try:
        credentials = static_credentials(kubeconfig_path(kubeconfig), context)
    except Unsupported:
        return None
    except UnknownContext:  # no studies to offer; the command itself says why
        return []
    url = urllib.parse.urlsplit(credentials.server)
    if url.hostname is None:  # no server to ask
        return None
    ns = namespace or credentials.namespace or "default"
    query = urllib.parse.urlencode({"labelSelector": f"{labels.MANAGED_BY}={labels.MANAGED_BY_VALUE}"})
    request_path = f"{url.path.rstrip('/')}/api/v1/namespaces/{urllib.parse.quote(ns)}/configmaps?{query}"
    connection: http.client.HTTPConnection
    if url.scheme == "https":
        connection = http.client.HTTPSConnection(
            url.hostname, url.port or 443, timeout=timeout, context=credentials.tls
        )
    else:
        connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    token = credentials.token
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        connection.request("GET", request_path, headers=headers)
        answer = connection.getresponse()
        if answer.status != 200:
            return []
        items = json.loads(answer.read()).get("items") or []
    finally:
        connection.close()
    return sorted(
        {
            (cm["metadata"].get("labels") or {}).get(labels.STUDY, "")
            for cm in items
            if cm["metadata"]["name"].startswith(labels.RECORD_PREFIX)
        }
        - {""}
    )
