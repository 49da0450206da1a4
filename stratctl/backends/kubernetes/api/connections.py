"""Connections to one API server: a dead one found within a bound, and all of them dropped
together.

A network change (Wi-Fi to Ethernet, a VPN reconnecting, a NAT timeout) kills every open
connection silently: no FIN, no RST, and what is sent on it is never answered. stratctl
knows when it expects an answer, so every read has a deadline, `SILENT` seconds:

- a request's answer (the API server answers a read or a write well within it; a request
  it holds longer, in an API Priority and Fairness queue or over a paused etcd, is sent
  again, which is what a client-side queue timeout does);
- a watch's next line: the server is asked to end each watch after `WATCH_SPAN` seconds
  (the caller watches again from its last version), so a live watch never stays silent
  past the deadline, even on a study whose jobs do not change for hours;
- a followed container log's next line: a quiet container's stream is opened again from
  its last line's timestamp (`logs.follow_one`).

Once one connection is found dead, every idle connection to that server is closed
(`drop_idle`): they went down together, and each would cost its own deadline. Once the
server answers again, every request still waiting on a connection lent before that answer
is cut at once (`sever`) and sent again on a new connection, instead of each waiting out
its deadline: that is what brings a study back to full pace within seconds of the
network's return. Kubernetes clients ping HTTP/2 connections instead (client-go since
1.20: a ping after 30 s without a read, dropped 15 s later); stratctl speaks HTTP/1.1
through urllib3, and its deadlines find a dead connection in a third of that time.
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from typing import Any

import urllib3
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

SILENT = 10.0  # seconds a connection may stay silent while stratctl waits for it: then it is dead
WATCH_SPAN = 8  # seconds the server is asked to keep a watch open (timeoutSeconds), under SILENT
WATCH_GRACE = SILENT - WATCH_SPAN  # seconds a watch's read waits past the server's end of it
PROBE_TIMEOUT = 3.0  # seconds a probe of a server that stopped answering waits for its answer


class _Lending:
    """A urllib3 pool that knows which of its connections are lent out, and since when."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lent: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self.lent_lock = threading.Lock()

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        with self.lent_lock:
            self.lent[conn] = time.monotonic()
        return conn

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            with self.lent_lock:
                self.lent.pop(conn, None)
        super()._put_conn(conn)  # type: ignore[misc]


class LendingHTTPPool(_Lending, HTTPConnectionPool):
    pass


class LendingHTTPSPool(_Lending, HTTPSConnectionPool):
    pass


POOLS = {"http": LendingHTTPPool, "https": LendingHTTPSPool}


def lending(manager: urllib3.PoolManager) -> urllib3.PoolManager:
    """`manager`, making its pools from now on as pools that know what they lent."""
    manager.pool_classes_by_scheme = dict(POOLS)
    return manager


class Connections:
    """The connections of one client's pool manager (None: a client without one, whose
    connections are left to its own timeouts)."""

    def __init__(self, manager: urllib3.PoolManager | None):
        self.manager = lending(manager) if manager is not None else None
        # on time.monotonic: a request sent up to then whose connection failed was cut (`sever`)
        self.severed = float("-inf")

    @classmethod
    def of(cls, api: Any) -> Connections:
        """The connections of `transport.PlainApi` or of the Kubernetes client's `ApiClient`."""
        manager = getattr(api, "pool", None)
        if manager is None:
            manager = getattr(getattr(api, "rest_client", None), "pool_manager", None)
        return cls(manager if isinstance(manager, urllib3.PoolManager) else None)

    def _pools(self) -> list[Any]:
        if self.manager is None:
            return []
        pools = self.manager.pools
        return [p for p in (pools.get(key) for key in pools.keys()) if p is not None]

    def drop_idle(self) -> int:
        """Close every idle connection (the next request on one opens it again); how many."""
        closed = 0
        for pool in self._pools():
            queue = getattr(pool, "pool", None)
            if queue is None:
                continue
            with queue.mutex:
                idle = [conn for conn in queue.queue if conn is not None and conn.sock is not None]
            for conn in idle:
                conn.close()
                closed += 1
        return closed

    def sever(self, before: float) -> int:
        """Cut every connection lent at or before `before` (on `time.monotonic`) and still in
        use: the request waiting on it fails at once. How many were cut."""
        self.severed = max(self.severed, before)
        cut = 0
        for pool in self._pools():
            lock = getattr(pool, "lent_lock", None)
            if lock is None:
                continue
            with lock:
                lent = [conn for conn, since in pool.lent.items() if since <= before]
            for conn in lent:
                sock = conn.sock
                if sock is None:
                    continue
                try:  # the plain socket's shutdown, under TLS too: the reader sees the end at once
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                    cut += 1
                except OSError:
                    pass
        return cut
