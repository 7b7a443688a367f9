"""The attempt's trace context reaches what the executors call: the HTTP ``traceparent``
header, a command's ``TRACEPARENT`` variable, a handler's ``ctx.traceparent``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobgate.core.decide import OutcomeKind
from jobgate.core.trace import attempt_trace
from jobgate.runtime.executors import CommandExecutor, HttpExecutor

from .support import make_context
from .test_command_executor import DUMP_ENV, py_runner
from .test_http_executor import TargetServer, spec

TRACE = attempt_trace("run-1", 2)


@pytest.fixture
def target() -> Iterator[TargetServer]:
    server = TargetServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_the_http_target_gets_the_traceparent_header_and_payload(target: TargetServer, tmp_path: Path) -> None:
    ctx = make_context(tmp_path, attempt=2, trace_context=TRACE.as_dict())
    assert ctx.traceparent == TRACE.traceparent and ctx.trace_id == TRACE.trace_id
    configured = (("Traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01"), ("X-Tenant", "t1"))
    result = HttpExecutor(spec(target.base_url + "/json", headers=configured)).execute(ctx)
    assert result.outcome.kind is OutcomeKind.SUCCEEDED
    (received,) = target.received
    headers = {k.lower(): v for k, v in received.headers.items()}
    assert headers["traceparent"] == TRACE.traceparent  # ours, not the configured one
    assert headers["x-tenant"] == "t1"
    assert received.body["trace_context"] == TRACE.as_dict()


def test_no_trace_context_no_header(target: TargetServer, tmp_path: Path) -> None:
    ctx = make_context(tmp_path)
    assert ctx.traceparent is None
    HttpExecutor(spec(target.base_url + "/json")).execute(ctx)
    (received,) = target.received
    assert "traceparent" not in {k.lower() for k in received.headers}


def test_a_command_gets_traceparent_in_its_environment(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, attempt=2, trace_context=TRACE.as_dict())
    runner = py_runner(DUMP_ENV, env=(("TRACEPARENT", "00-spoofed"),))
    assert CommandExecutor(runner, None, {}).execute(ctx).outcome.kind is OutcomeKind.SUCCEEDED
    env = json.loads((ctx.workdir / "env.json").read_text())
    assert env["TRACEPARENT"] == TRACE.traceparent
