"""A real HTTP server on 127.0.0.1 (random port, threaded) for the alert and dependency tests:
it answers GET with ``status`` (a health endpoint that can be switched), and POST by failing
the first ``fail_first`` requests with 500, then accepting (recording each accepted body)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorder:
    status: int = 200  # what GET answers
    fail_first: int = 0  # POSTs answered 500 before the first 200
    post_status: int = 200  # what a POST gets after the failures
    post_delay: float = 0.0  # seconds a POST waits before its answer (a slow receiver)
    posts: int = 0
    gets: int = 0
    accepted: list[dict[str, Any]] = field(default_factory=list)
    serve_accepted: bool = False  # GET answers the accepted bodies (a sink that can be read back)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    recorder: Recorder


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        rec = self.server.recorder
        with rec.lock:
            rec.gets += 1
            status = rec.status
            if rec.serve_accepted and status < 300:
                self._answer(status, json.dumps(rec.accepted).encode())
                return
        self._answer(status, b'{"status": "ok"}' if status < 300 else b'{"status": "down"}')

    def do_POST(self) -> None:
        rec = self.server.recorder
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with rec.lock:
            rec.posts += 1
            status = 500 if rec.posts <= rec.fail_first else rec.post_status
            if status == 200:
                rec.accepted.append(json.loads(body))
                rec.headers.append(dict(self.headers.items()))
            delay = rec.post_delay
        # real time: a slow receiver on the wire, measured against the sink's real timeouts and budget
        time.sleep(delay)
        self._answer(status, b"{}")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def local_server(recorder: Recorder | None = None) -> Iterator[tuple[str, Recorder]]:
    """Yield (base URL, recorder) of a server running in a thread; shut down on exit."""
    rec = recorder or Recorder()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.recorder = rec
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_port_url() -> str:
    """A URL nothing listens on (connection refused): a dependency or receiver that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"
