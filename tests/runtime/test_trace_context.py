"""Trace context through a real worker: derived, adopted from the trigger, shared by a workflow,
one span id per attempt (seed 000 §56: the dispatch payload carries it)."""

from __future__ import annotations

from pathlib import Path

from runtime_support import marker_lines, running_worker, wait_status

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.core.trace import attempt_trace
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def test_a_run_without_context_gets_its_derived_trace_in_the_dispatch_payload(engine: Engine) -> None:
    job = define(engine, handler="trace_handlers:report")
    run = engine.submit(SubmitRequest(job, request_id="plain")).run
    assert run.traceparent is None
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    expected = attempt_trace(run.job_run_id, 1)
    assert done.result is not None
    assert done.result["traceparent"] == expected.traceparent
    assert done.result["trace_context"] == expected.as_dict()
    assert "otel_current" not in done.result  # tracing is off: no span is current


def test_a_trigger_traceparent_is_adopted_and_kept_with_the_run(engine: Engine) -> None:
    job = define(engine, handler="trace_handlers:report")
    given = f"00-{TRACE}-{CALLER_SPAN}-01"
    run = engine.submit(SubmitRequest(job, request_id="traced", policy_context={"traceparent": given})).run
    assert run.traceparent == given
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    assert done.traceparent == given  # read back from the stored trigger: no column of its own
    assert done.result is not None
    context = done.result["trace_context"]
    assert context["trace_id"] == TRACE and context["parent_span_id"] == CALLER_SPAN
    assert done.result["traceparent"] == f"00-{TRACE}-{attempt_trace(run.job_run_id, 1).span_id}-01"


def test_an_invalid_trigger_traceparent_is_ignored(engine: Engine) -> None:
    job = define(engine, handler="trace_handlers:report")
    bad = f"00-{TRACE.upper()}-{CALLER_SPAN}-01"
    run = engine.submit(SubmitRequest(job, request_id="bad", policy_context={"traceparent": bad})).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    assert done.traceparent is None
    assert done.result is not None and done.result["traceparent"] == attempt_trace(run.job_run_id, 1).traceparent


def test_each_attempt_has_its_own_span_in_the_same_trace(engine: Engine, marker: Path) -> None:
    job = define(engine, handler="trace_handlers:fail_first", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job, request_id="twice")).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    seen = {int(attempt): traceparent for attempt, traceparent in marker_lines(marker)}
    assert seen == {n: attempt_trace(run.job_run_id, n).traceparent for n in (1, 2)}
    assert seen[1].split("-")[1] == seen[2].split("-")[1] and seen[1] != seen[2]


def test_the_steps_of_a_workflow_share_its_trace(engine: Engine) -> None:
    job = define(engine, handler="trace_handlers:report")
    runs = [
        engine.submit(SubmitRequest(job, request_id=f"step-{n}", workflow_run_id="TGWFRUN-trace")).run for n in (1, 2)
    ]
    with running_worker(engine):
        done = [wait_status(engine, r.job_run_id, RunStatus.COMPLETED) for r in runs]
    contexts = [d.result["trace_context"] for d in done if d.result is not None]
    assert len(contexts) == 2
    expected = attempt_trace(runs[0].job_run_id, 1, workflow_run_id="TGWFRUN-trace")
    assert contexts[0]["trace_id"] == contexts[1]["trace_id"] == expected.trace_id
    assert contexts[0]["span_id"] != contexts[1]["span_id"]
