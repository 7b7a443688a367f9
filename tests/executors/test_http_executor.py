"""HttpExecutor against a real local HTTP server (http.server in a thread on 127.0.0.1, port 0)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobgate.core.decide import OutcomeKind
from jobgate.core.errors import ValidationError
from jobgate.registry import HttpTargetSpec
from jobgate.runtime.executors import HttpExecutor

from .support import make_context, read_log


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


class TargetServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), TargetHandler)
        self.received: list[Received] = []
        self.arrived = threading.Event()
        self.release = threading.Event()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout tests) makes the late answer fail; that is expected."""


class TargetHandler(BaseHTTPRequestHandler):
    """Routes: /json, /empty, /text, /array, /status/<code>, /hang (answers once released)."""

    server: TargetServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.received.append(Received(self.path, dict(self.headers.items()), json.loads(raw)))
        self.server.arrived.set()
        if self.path == "/json":
            self._answer(200, json.dumps({"accepted": True, "engine_run": "e-42"}), "application/json")
        elif self.path == "/empty-object":
            self._answer(201, "{}", "application/json")
        elif self.path == "/empty":
            self._answer(204, None)
        elif self.path == "/text":
            self._answer(200, "accepted", "text/plain")
        elif self.path == "/array":
            self._answer(200, "[1, 2]", "application/json")
        elif self.path.startswith("/status/"):
            status = int(self.path.rsplit("/", 1)[1])
            headers = {"Location": "/json"} if 300 <= status < 400 else {}
            self._answer(status, "target says no", "text/plain", headers)
        elif self.path == "/hang":
            self.server.release.wait(timeout=10)
            self._answer(200, json.dumps({"late": True}), "application/json")

    def _answer(
        self, status: int, body: str | None, content_type: str = "", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body is not None:
            data = body.encode()
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean."""


@pytest.fixture
def target() -> Iterator[TargetServer]:
    server = TargetServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def spec(url: str, timeout: float = 5.0, headers: tuple[tuple[str, str], ...] = ()) -> HttpTargetSpec:
    return HttpTargetSpec(url=url, timeout=timedelta(seconds=timeout), headers=headers)


def test_posts_the_dispatch_payload_with_identity_headers(target: TargetServer, tmp_path: Path) -> None:
    ctx = make_context(tmp_path, params={"period": "2026-06"}, attempt=2)
    configured = (("Authorization", "Bearer from-config"), ("X-Tenant", "t1"))
    result = HttpExecutor(spec(target.base_url + "/json", headers=configured)).execute(ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert result.result == {"accepted": True, "engine_run": "e-42"}
    [request] = target.received
    assert request.path == "/json"
    assert request.body == json.loads(json.dumps(ctx.payload.as_json()))
    assert request.body["attempt"] == 2 and request.body["params"] == {"period": "2026-06"}
    assert request.headers["Idempotency-Key"] == "key-run-1"
    assert request.headers["X-Jobgate-Run-Id"] == "run-1"
    assert request.headers["Authorization"] == "Bearer from-config"
    assert request.headers["X-Tenant"] == "t1"
    assert request.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/empty-object", {}),
        ("/empty", {"status_code": 204}),
        ("/text", {"status_code": 200}),
        ("/array", {"status_code": 200}),
    ],
)
def test_2xx_without_a_json_object_records_the_status(
    target: TargetServer, tmp_path: Path, path: str, expected: dict[str, Any]
) -> None:
    result = HttpExecutor(spec(target.base_url + path)).execute(make_context(tmp_path))
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    assert result.result == expected


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, OutcomeKind.NON_RETRYABLE_FAILURE),
        (404, OutcomeKind.NON_RETRYABLE_FAILURE),
        (422, OutcomeKind.NON_RETRYABLE_FAILURE),
        (301, OutcomeKind.NON_RETRYABLE_FAILURE),  # not followed: the URL comes only from configuration
        (408, OutcomeKind.RETRYABLE_FAILURE),
        (429, OutcomeKind.RETRYABLE_FAILURE),
        (500, OutcomeKind.RETRYABLE_FAILURE),
        (503, OutcomeKind.RETRYABLE_FAILURE),
    ],
)
def test_status_mapping(target: TargetServer, tmp_path: Path, status: int, kind: OutcomeKind) -> None:
    ctx = make_context(tmp_path)
    outcome = HttpExecutor(spec(f"{target.base_url}/status/{status}")).execute(ctx).outcome
    assert outcome.kind is kind
    assert outcome.error_code == f"HTTP_{status}"
    assert outcome.error_message is not None and "target says no" in outcome.error_message
    assert [r.path for r in target.received] == [f"/status/{status}"]
    assert f"HTTP {status}" in read_log(ctx)


def test_timeout_is_retryable(target: TargetServer, tmp_path: Path) -> None:
    outcome = HttpExecutor(spec(target.base_url + "/hang", timeout=0.2)).execute(make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.RETRYABLE_FAILURE
    assert outcome.error_code == "HTTP_TIMEOUT"


def test_refused_connection_is_retryable_unreachable(tmp_path: Path) -> None:
    with socket.socket() as bound_not_listening:  # holds the port, so nothing else can answer on it
        bound_not_listening.bind(("127.0.0.1", 0))
        port = bound_not_listening.getsockname()[1]
        outcome = HttpExecutor(spec(f"http://127.0.0.1:{port}/jobs")).execute(make_context(tmp_path)).outcome
    assert outcome.kind is OutcomeKind.RETRYABLE_FAILURE
    assert outcome.error_code == "HTTP_UNREACHABLE"


def test_shared_client_is_used_and_left_open(target: TargetServer, tmp_path: Path) -> None:
    with httpx.Client() as client:
        executor = HttpExecutor(spec(target.base_url + "/json"), client=client)
        first = executor.execute(make_context(tmp_path, name="run-a"))
        second = executor.execute(make_context(tmp_path, name="run-b"))
        assert not client.is_closed
    assert first.outcome.kind is second.outcome.kind is OutcomeKind.SUCCEEDED
    assert [r.headers["Idempotency-Key"] for r in target.received] == ["key-run-a", "key-run-b"]


def test_cancelled_before_sending_sends_nothing(target: TargetServer, tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    ctx.cancelled.set()
    assert HttpExecutor(spec(target.base_url + "/json")).execute(ctx).outcome.kind is OutcomeKind.STOPPED
    assert target.received == []


def test_stop_during_the_request_ends_the_attempt_stopped(target: TargetServer, tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    executor = HttpExecutor(spec(target.base_url + "/hang"))
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(executor.execute, ctx)
        assert target.arrived.wait(timeout=5), "the request never reached the target"
        executor.stop(ctx, timedelta(seconds=1))
        target.release.set()
        outcome = future.result(timeout=5).outcome
    assert outcome.kind is OutcomeKind.STOPPED
    assert outcome.error_message is not None and "HTTP 200" in outcome.error_message


@pytest.mark.parametrize("url", ["ftp://example.org/jobs", "/relative/path", "http://", "http://[::1"])
def test_url_that_is_not_absolute_http_is_refused_when_built(url: str) -> None:
    with pytest.raises(ValidationError) as info:
        HttpExecutor(spec(url))
    assert info.value.field == "url"


def test_an_answer_json_cannot_store_is_kept_as_its_status_only() -> None:
    from jobgate.runtime.executors.http import _map_response

    nan = _map_response(httpx.Response(200, text='{"score": NaN}'))
    assert nan.result == {"status_code": 200}
    # found by a review: a number past a float's range became null, a lone surrogate failed
    # every settlement of the worker after it; an answer over a result's size is not kept either
    deep = '{"a": ' + "[" * 2000 + "]" * 2000 + "}"  # past the parser's recursion: not a retry
    for text in ('{"n": 1e999}', '{"s": "\\ud800"}', '{"blob": "' + "x" * (1 << 20) + '"}', deep):
        assert _map_response(httpx.Response(200, text=text)).result == {"status_code": 200}, text[:20]
    big = _map_response(httpx.Response(200, text='{"order_id": 123456789012345678901234567890}'))
    assert big.result == {"order_id": 123456789012345678901234567890}
