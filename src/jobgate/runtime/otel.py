"""OpenTelemetry spans for attempts: an optional extra (``pip install 'jobgate[otel]'``).

With ``tracing: {otel: true}`` the worker records one span per attempt, named after the job
definition, with ``jobgate.job_run_id``, ``jobgate.attempt``, ``jobgate.job_class``,
``jobgate.tenant_id`` and, when it ends, ``jobgate.outcome`` (the status the attempt
settled the run in: ``COMPLETED``, ``RETRY_WAIT``, ``DEAD_LETTERED``..., or ``lease_lost``).
Its parent is the run's trace context (``core.trace``): the caller's span when the trigger
carried a ``traceparent``, else the derived root span of the run or workflow, so every
attempt of a run, and every step of a workflow, lands in one trace. The ``traceparent``
handed to the executor names this span, and a python handler runs with it as the current
span, so what the job itself records (its own spans, an instrumented HTTP client) links
under the attempt.

Without the extra nothing here is imported (every ``opentelemetry`` import is inside a
function that runs only when tracing is on), and a configuration that asks for it without
the package installed is refused at load, naming ``tracing.otel``.

Exporters (``tracing.exporter``): ``otlp`` (default; OTLP over HTTP to ``tracing.endpoint``
or ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``$OTEL_EXPORTER_OTLP_ENDPOINT``, package
``opentelemetry-exporter-otlp-proto-http``), ``console`` (spans as JSON on stderr), or
``none``: use the tracer provider the process already has (an embedding application's, or
the one ``opentelemetry-instrument`` installs).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from jobgate.config.tracing import TracingSettings
from jobgate.core.models import JobRun
from jobgate.core.trace import TraceContext, attempt_trace

_PROVIDER_LOCK = threading.Lock()
_provider: Any = None  # the SDK provider this process made (exporters other than "none"), once


def _sdk_provider(settings: TracingSettings) -> Any:
    """The process's SDK tracer provider with the configured exporter, made once and made the
    global provider when the process has none yet (so a handler's own spans join it)."""
    global _provider
    with _PROVIDER_LOCK:
        if _provider is not None:
            return _provider
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
        if settings.exporter == "console":
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=settings.endpoint) if settings.endpoint else OTLPSpanExporter()
            provider.add_span_processor(BatchSpanProcessor(exporter))
        if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":
            trace.set_tracer_provider(provider)
        _provider = provider
        return provider


class AttemptSpans:
    """Starts and ends the span of each attempt. Built only when tracing is on."""

    def __init__(self, settings: TracingSettings) -> None:
        from opentelemetry import trace

        provider = trace.get_tracer_provider() if settings.exporter == "none" else _sdk_provider(settings)
        self._trace = trace
        self._tracer = provider.get_tracer("jobgate")
        self._provider = provider

    def start(self, run: JobRun, attempt: int) -> tuple[Any, TraceContext]:
        """Open the attempt's span under the run's trace context; returns it and the context
        to hand the executor (the same trace, this span's id)."""
        trace = self._trace
        context = attempt_trace(
            run.job_run_id, attempt, workflow_run_id=run.workflow_run_id, traceparent=run.traceparent
        )
        parent = trace.SpanContext(
            trace_id=int(context.trace_id, 16),
            span_id=int(context.parent_span_id, 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(int(context.flags, 16)),
        )
        span = self._tracer.start_span(
            run.job_definition_id,
            context=trace.set_span_in_context(trace.NonRecordingSpan(parent)),
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "jobgate.job_run_id": run.job_run_id,
                "jobgate.attempt": attempt,
                "jobgate.job_class": str(run.job_class),
                "jobgate.tenant_id": run.tenant_id,
                "jobgate.job_definition_id": run.job_definition_id,
            },
            start_time=time.time_ns(),
        )
        own = span.get_span_context()
        if not own.is_valid:  # a no-op provider: keep the derived context
            return span, context
        flags = f"{int(own.trace_flags):02x}"
        return span, TraceContext(context.trace_id, f"{own.span_id:016x}", context.parent_span_id, flags)

    def end(self, span: Any, outcome: str, error: str | None = None) -> None:
        span.set_attribute("jobgate.outcome", outcome)
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        span.end()

    @contextlib.contextmanager
    def current(self, span: Any) -> Iterator[None]:
        """Make ``span`` the current span of this thread while an executor runs."""
        with self._trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    def flush(self) -> None:
        flush = getattr(self._provider, "force_flush", None)
        if flush is not None:
            flush()


def attempt_spans(settings: TracingSettings) -> AttemptSpans | None:
    """The span recorder for a worker, or None when tracing is off (nothing imported)."""
    return AttemptSpans(settings) if settings.otel else None
