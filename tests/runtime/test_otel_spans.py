"""OpenTelemetry (the optional extra): one span per attempt, under the run's trace context,
current while a handler runs, named in the traceparent the executor gets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_support import running_worker, wait_status

from helpers import define, make_config
from jobgate.config import JobgateConfig, tracing
from jobgate.core.errors import ConfigurationError
from jobgate.core.states import RunStatus
from jobgate.core.trace import attempt_trace
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """Spans of this process's tracer provider (``exporter: none`` uses the process's own)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    assert isinstance(trace.get_tracer_provider(), TracerProvider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()


@pytest.fixture
def config(tmp_path: Path) -> JobgateConfig:
    return make_config(tmp_path, tracing={"otel": True, "exporter": "none"})


def spans_of(exporter: InMemorySpanExporter, job_run_id: str) -> list[ReadableSpan]:
    found = [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("jobgate.job_run_id") == job_run_id]
    return sorted(found, key=lambda s: int(str((s.attributes or {})["jobgate.attempt"])))


def hexes(span: ReadableSpan) -> tuple[str, str, str | None]:
    ctx = span.get_span_context()
    assert ctx is not None
    parent = None if span.parent is None else f"{span.parent.span_id:016x}"
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", parent


def test_an_attempt_is_one_span_under_the_runs_trace(engine: Engine, exporter: InMemorySpanExporter) -> None:
    job = define(engine, handler="trace_handlers:report")
    run = engine.submit(SubmitRequest(job, request_id="otel-one")).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    (span,) = spans_of(exporter, run.job_run_id)
    derived = attempt_trace(run.job_run_id, 1)
    trace_id, span_id, parent = hexes(span)
    assert span.name == job and trace_id == derived.trace_id and parent == derived.parent_span_id
    assert span.kind is trace.SpanKind.CONSUMER
    assert dict(span.attributes or {}) == {
        "jobgate.job_run_id": run.job_run_id,
        "jobgate.attempt": 1,
        "jobgate.job_class": "MAINTENANCE_JOB",
        "jobgate.tenant_id": "default",
        "jobgate.job_definition_id": job,
        "jobgate.outcome": "COMPLETED",
    }
    assert span.status.status_code is trace.StatusCode.UNSET
    result: dict[str, Any] = done.result or {}
    assert result["traceparent"] == f"00-{derived.trace_id}-{span_id}-01"  # the executor names this span
    assert result["otel_current"] == f"{trace_id}-{span_id}"  # and the handler runs inside it


def test_a_failed_attempt_is_an_error_span_and_the_retry_a_sibling(
    engine: Engine, exporter: InMemorySpanExporter, marker: Path
) -> None:
    job = define(engine, handler="trace_handlers:fail_first", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job, request_id="otel-two")).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    first, second = spans_of(exporter, run.job_run_id)
    assert (first.attributes or {})["jobgate.outcome"] == "RETRY_WAIT"
    assert first.status.status_code is trace.StatusCode.ERROR and first.status.description == "FIRST"
    assert (second.attributes or {})["jobgate.outcome"] == "COMPLETED"
    assert hexes(first)[0] == hexes(second)[0] and hexes(first)[2] == hexes(second)[2]
    assert hexes(first)[1] != hexes(second)[1]


def test_an_adopted_trace_hangs_under_the_callers_span(engine: Engine, exporter: InMemorySpanExporter) -> None:
    job = define(engine, handler="trace_handlers:report")
    given = f"00-{TRACE}-{CALLER_SPAN}-01"
    run = engine.submit(SubmitRequest(job, request_id="otel-adopted", policy_context={"traceparent": given})).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    (span,) = spans_of(exporter, run.job_run_id)
    assert hexes(span)[0] == TRACE and hexes(span)[2] == CALLER_SPAN
    assert span.parent is not None and span.parent.is_remote


def test_asking_for_otel_without_the_package_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "installed", lambda module: False)
    with pytest.raises(ConfigurationError, match=r"tracing\.otel: needs the optional extra"):
        make_config(tmp_path, tracing={"otel": True})
    assert make_config(tmp_path, tracing={"otel": False}).tracing.otel is False  # off: nothing needed
    monkeypatch.setattr(tracing, "installed", lambda module: "exporter" not in module)
    with pytest.raises(ConfigurationError, match=r"tracing\.exporter: otlp needs the package"):
        make_config(tmp_path, tracing={"otel": True})
    for bad, key in [({"exporter": "zipkin"}, "exporter"), ({"endpoint": "ftp://x"}, "endpoint"), ({"otl": 1}, "otl")]:
        with pytest.raises(ConfigurationError, match=rf"tracing\.{key}"):
            make_config(tmp_path, tracing=bad)
