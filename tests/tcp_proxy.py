"""A TCP forwarder on 127.0.0.1 that a test can cut and restore: a real network outage between
jobgate and its PostgreSQL server, for this test's connections only (the suite's other workers
share the server and must not notice)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


class TcpProxy:
    """Forwards every connection made to ``port`` to ``target``. ``cut()`` closes every
    forwarded connection and refuses new ones (the port stays bound, connections to it are
    reset); ``restore()`` accepts again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closing = False
        self.refused = 0  # connections reset while cut: how often the client tried
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                self.refused += 1
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()  # a reset: what a client sees of a server that is not there
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(source)
            self._drop(sink)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def cut(self) -> None:
        self._open.clear()
        with self._lock:
            live = list(self._sockets)
        for sock in live:
            self._drop(sock)

    def restore(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closing = True
        self.cut()
        self._listener.close()


@contextmanager
def proxied(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    try:
        yield proxy
    finally:
        proxy.close()
