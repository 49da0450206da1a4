"""A TCP proxy whose connections can all go silent at once: a network change as a laptop
meets it (Wi-Fi to Ethernet, a VPN reconnecting, a NAT timeout).

`blackout()` kills every open connection silently: no FIN, no RST, what either side sends
is dropped, and the connection stays dead for good. Connections opened during the
blackout are accepted and dead too. `restore()` brings the network back: new connections
work again, the old ones stay dead. TLS passes through untouched (it is plain TCP here),
so the proxy stands in front of a real API server as well as a fake one.
"""

from __future__ import annotations

import socket
import threading
import time


class _Pair:
    def __init__(self, client: socket.socket):
        self.client = client
        self.upstream: socket.socket | None = None
        self.dead = False


class SilentProxy:
    """127.0.0.1:`port` forwarding to `host`:`upstream_port`."""

    def __init__(self, host: str, upstream_port: int):
        self.upstream = (host, upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dark = False
        self.pairs: list[_Pair] = []
        self.accepted = 0
        self.dark_since: float | None = None
        self.restored_at: float | None = None
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="silent-proxy", daemon=True).start()

    # -- the network ------------------------------------------------------------------

    def blackout(self) -> None:
        """Every connection goes silent for good; new ones are silent while it lasts."""
        with self._lock:
            self.dark, self.dark_since = True, time.monotonic()
            for pair in self.pairs:
                pair.dead = True

    def restore(self) -> None:
        """New connections work again; the ones that went silent stay dead."""
        with self._lock:
            self.dark, self.restored_at = False, time.monotonic()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        with self._lock:
            pairs = list(self.pairs)
        for pair in pairs:
            for sock in (pair.client, pair.upstream):
                if sock is not None:
                    sock.close()

    # -- forwarding -------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            pair = _Pair(client)
            with self._lock:
                self.accepted += 1
                self.pairs.append(pair)
                pair.dead = self.dark
            if not pair.dead:
                try:
                    pair.upstream = socket.create_connection(self.upstream, timeout=5)
                    pair.upstream.settimeout(None)
                except OSError:
                    client.close()
                    continue
                threading.Thread(target=self._pump, args=(pair, pair.upstream, client), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, client, pair.upstream), daemon=True).start()

    def _pump(self, pair: _Pair, source: socket.socket, sink: socket.socket | None) -> None:
        """Bytes from `source` to `sink` while the pair lives; once dead, read and drop them
        (the network ate them), and never close the other side (no FIN, no RST)."""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                if not pair.dead and sink is not None:
                    try:
                        sink.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                return
            if pair.dead or sink is None:
                continue
            try:
                sink.sendall(data)
            except OSError:
                return
