"""The study names of a namespace, read with the standard library alone, for a shell's Tab.

Loading the Kubernetes client costs about 0.3 s, more than a Tab may take. A kubeconfig
whose user authenticates with a token, a token file or a client certificate (what most
clusters and kind give) needs only an HTTPS GET, which this module makes with
`http.client` and `ssl`: the list of the study records (ConfigMaps labelled
managed-by=stratctl). A kubeconfig it cannot follow (an exec or auth-provider plugin, a
proxy) gives None, and the completion goes the client's way (`engine.names`).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse

import yaml

from stratctl import labels
from stratctl.kube.kubeconfig import kubeconfig_path


class Unsupported(Exception):
    """The kubeconfig needs more than a token or a client certificate."""


def _named(items, name):
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    raise Unsupported(f"no entry {name!r}")


def _material(section: dict, key: str, base: str) -> bytes | None:
    """`key-data` (base64) or `key` (a file, relative to the kubeconfig) of a section."""
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"])
    if section.get(key):
        with open(os.path.join(base, os.path.expanduser(section[key])), "rb") as f:
            return f.read()
    return None


def _tls(cluster: dict, user: dict, base: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    else:
        ca = _material(cluster, "certificate-authority", base)
        if ca is not None:
            context.load_verify_locations(cadata=ca.decode())
    cert, key = _material(user, "client-certificate", base), _material(user, "client-key", base)
    if cert and key:
        with tempfile.TemporaryDirectory() as scratch:  # ssl reads a certificate chain from files only
            paths = [os.path.join(scratch, n) for n in ("cert", "key")]
            for path, data in zip(paths, (cert, key)):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                    f.write(data)
            context.load_cert_chain(*paths)
    return context


def study_names(kubeconfig: str | None, context: str | None, namespace: str | None, timeout: float) -> list[str] | None:
    """The studies of the namespace in name order; None when the kubeconfig needs the client."""
    path = kubeconfig_path(kubeconfig)
    try:
        with open(path) as f:
            config = yaml.safe_load(f) or {}
        ctx = _named(config.get("contexts"), context or config.get("current-context"))["context"]
        cluster = _named(config.get("clusters"), ctx["cluster"])["cluster"]
        user = _named(config.get("users"), ctx.get("user"))["user"] if ctx.get("user") else {}
        if any(user.get(k) for k in ("exec", "auth-provider", "username")) or cluster.get("proxy-url"):
            raise Unsupported("an authentication plugin or a proxy")
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError, Unsupported):
        return None
    base = os.path.dirname(path)
    token = user.get("token")
    if not token and user.get("tokenFile"):
        with open(os.path.join(base, user["tokenFile"])) as f:
            token = f.read().strip()
    url = urllib.parse.urlsplit(cluster["server"])
    ns = namespace or ctx.get("namespace") or "default"
    query = urllib.parse.urlencode({"labelSelector": f"{labels.MANAGED_BY}={labels.MANAGED_BY_VALUE}"})
    request_path = f"{url.path.rstrip('/')}/api/v1/namespaces/{urllib.parse.quote(ns)}/configmaps?{query}"
    if url.scheme == "https":
        connection = http.client.HTTPSConnection(url.hostname, url.port or 443, timeout=timeout,
                                                 context=_tls(cluster, user, base))
    else:
        connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        connection.request("GET", request_path, headers=headers)
        answer = connection.getresponse()
        if answer.status != 200:
            return []
        items = json.loads(answer.read()).get("items") or []
    finally:
        connection.close()
    return sorted({(cm["metadata"].get("labels") or {}).get(labels.STUDY, "") for cm in items
                   if cm["metadata"]["name"].startswith(labels.RECORD_PREFIX)} - {""})
