"""A TCP proxy on a loopback port in front of one or more upstream ports: each new connection goes to the next
upstream (round robin, as a Service spreads connections over its replicas). A test can stall it (connections
kept, nothing forwarded) or cut it (listener and every connection closed)."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, *upstreams: int):
        self.upstreams, self.next = upstreams, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stalled = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            port = self.upstreams[self.next % len(self.upstreams)]
            self.next += 1
            upstream = socket.create_connection(("127.0.0.1", port))
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                if not self.stalled.is_set():
                    b.sendall(data)
        if not self.stalled.is_set():  # a stalled proxy passes on nothing, not even the end of a stream
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        self.listener.close()
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
