"""The HTTP client under `Cluster` for a kubeconfig with static credentials (a token, a
token file or a client certificate): urllib3, which the Kubernetes client uses too, with
the same pool, timeouts and JSON bodies, without loading that client (about 0.2 s of
every command's start-up). It offers the part of the client's `ApiClient` that `Cluster`
calls, so the two are interchangeable: plugins (exec, auth-provider) and in-cluster
credentials still go through the Kubernetes client (`Cluster.connect`).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import urllib3

from stratctl.kube.credentials import Credentials


class PlainApi:
    """`ApiClient`'s host, auth, `call_api` and `close`, over one urllib3 pool manager."""

    def __init__(self, credentials: Credentials, pool_size: int):
        self.configuration = SimpleNamespace(host=credentials.server)
        self.user_agent = "stratctl"
        self._token = credentials.token
        self.pool = urllib3.PoolManager(num_pools=4, maxsize=pool_size, retries=False, ssl_context=credentials.tls)

    def update_params_for_auth(self, headers, queries, auth_settings, resource_path, method, body) -> None:
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        """Send one request; its urllib3 response, unread, as `.response` (what the client's
        RESTResponse wraps)."""
        data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        timeout = (urllib3.Timeout(connect=_request_timeout[0], read=_request_timeout[1])
                   if isinstance(_request_timeout, tuple) else _request_timeout)
        response = self.pool.request(method, url, body=data, headers=header_params, timeout=timeout,
                                     preload_content=False, retries=False)
        return SimpleNamespace(status=response.status, response=response)

    def close(self) -> None:
        self.pool.clear()
