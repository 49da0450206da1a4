"""A kubeconfig context's credentials for a plain HTTPS client: the server, the TLS context
and the bearer token, read with the standard library and PyYAML alone.

Most clusters (and kind, and the local testbed) give a token, a token file or a client
certificate; for those a command needs no more than this, and neither shell completion
(`quickread`) nor the API client (`transport`) loads the Kubernetes client, which costs
about 0.2 s and 335 modules of start-up. Anything else (an exec or auth-provider plugin,
basic auth, a proxy, a TLS server name) raises `Unsupported`, and the caller goes the
Kubernetes client's way.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

import yaml

from stratctl.backends.kubernetes.api.kubeconfig import UnknownContext, context_problem, read_kubeconfig


class Unsupported(Exception):
    """The kubeconfig needs more than a token or a client certificate."""


@dataclass(frozen=True)
class Credentials:
    server: str  # https://host:port, maybe with a path
    tls: ssl.SSLContext | None  # None for a plain http:// server
    token: str | None
    namespace: str | None  # the context's namespace


def _named(items: Any, name: Any) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    raise Unsupported(f"no entry {name!r}")


def _material(section: dict[str, Any], key: str, base: str) -> bytes | None:
    """`key-data` (base64) or `key` (a file, relative to the kubeconfig) of a section."""
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"])
    if section.get(key):
        with open(os.path.join(base, os.path.expanduser(section[key])), "rb") as f:
            return f.read()
    return None


def _tls(cluster: dict[str, Any], user: dict[str, Any], base: str) -> ssl.SSLContext:
    """A client context that verifies the server against the cluster's CA, as kubectl does;
    the system's CAs only for a cluster that names none (loading them costs 25-45 ms)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # certificates and host names verified
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    else:
        ca = _material(cluster, "certificate-authority", base)
        if ca is not None:
            context.load_verify_locations(cadata=ca.decode())
        else:
            context.load_default_certs()
    cert, key = _material(user, "client-certificate", base), _material(user, "client-key", base)
    if cert and key:
        with tempfile.TemporaryDirectory() as scratch:  # ssl reads a certificate chain from files only
            paths = [os.path.join(scratch, n) for n in ("cert", "key")]
            for path, data in zip(paths, (cert, key)):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                    f.write(data)
            context.load_cert_chain(*paths)
    return context


def static_credentials(path: str, context: str | None) -> Credentials:
    """The credentials of `context` (else the current one) in the kubeconfig at `path`;
    `Unsupported` when they need the Kubernetes client (or the file cannot be followed
    here: the client then says what is wrong, as it always did). A context that is not in
    the file is `UnknownContext`, whichever way its credentials go: the contexts there are
    and the nearest name, not the client's "Invalid kube-config file"."""
    try:
        config = read_kubeconfig(path) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise Unsupported(str(exc)) from None
    problem = context_problem(config, path, context)
    if problem:
        raise UnknownContext(problem)
    try:
        ctx = _named(config.get("contexts"), context or config.get("current-context"))["context"]
        cluster = _named(config.get("clusters"), ctx["cluster"])["cluster"]
        user = _named(config.get("users"), ctx.get("user"))["user"] if ctx.get("user") else {}
        if any(user.get(k) for k in ("exec", "auth-provider", "username")) or any(
            cluster.get(k) for k in ("proxy-url", "tls-server-name")
        ):
            raise Unsupported("an authentication plugin, basic auth, a proxy or a TLS server name")
        base = os.path.dirname(path)
        token = user.get("token")
        if not token and user.get("tokenFile"):
            with open(os.path.join(base, user["tokenFile"])) as f:
                token = f.read().strip()
        server = cluster["server"].rstrip("/")
        tls = _tls(cluster, user, base) if server.startswith("https://") else None
        return Credentials(server, tls, token or None, ctx.get("namespace") or None)
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError, ValueError, ssl.SSLError) as exc:
        raise Unsupported(str(exc)) from None
