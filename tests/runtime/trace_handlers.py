"""Handlers for the trace tests: each reports the trace context its attempt was given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jobgate.core.errors import RetryableError
from jobgate.runtime.executors import ExecutionContext


def report(ctx: ExecutionContext) -> dict[str, Any]:
    """The attempt's traceparent and trace context, and the current OpenTelemetry span if any."""
    out: dict[str, Any] = {"traceparent": ctx.traceparent, "trace_context": dict(ctx.payload.trace_context)}
    try:
        from opentelemetry import trace
    except ImportError:
        return out
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        out["otel_current"] = f"{span.trace_id:032x}-{span.span_id:016x}"
    return out


def fail_first(ctx: ExecutionContext) -> dict[str, Any]:
    """Append the attempt's traceparent to $JOBGATE_TEST_MARKER; fail the first attempt."""
    with Path(os.environ["JOBGATE_TEST_MARKER"]).open("a", encoding="utf-8") as fh:
        fh.write(f"{ctx.attempt} {ctx.traceparent}\n")
    if ctx.attempt < 2:
        raise RetryableError("first attempt fails", error_code="FIRST")
    return {"attempt": ctx.attempt}
