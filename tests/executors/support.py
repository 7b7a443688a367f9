"""Builders and waiting helpers shared by the executor tests (no fixtures: plain functions)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from tests.runtime.runtime_support import wait_until

from jobgate.runtime.executors import DispatchPayload, ExecutionContext, ProgressReporter


def make_context(
    base: Path,
    *,
    name: str = "run-1",
    params: dict[str, str] | None = None,
    attempt: int = 1,
    report_progress: ProgressReporter | None = None,
    trace_context: dict[str, str] | None = None,
) -> ExecutionContext:
    """A context with its own work directory and log under ``base``, as a worker would build it."""
    workdir = base / name / "work"
    workdir.mkdir(parents=True)
    payload = DispatchPayload(
        job_run_id=name,
        idempotency_key=f"key-{name}",
        attempt=attempt,
        job_definition_id="def-payroll",
        job_class="batch",
        config_snapshot_id="snap-1",
        config_digest="sha256:" + "0" * 64,
        config={"region": "eu-west"},
        params=params or {},
        scope={"tenant_id": "t1"},
        target_engine_meid=None,
        target_engine_cmi=None,
        authorization_context={"actor": "tester"},
        trace_context=trace_context or {},
        execution_timeout=timedelta(seconds=30),
        max_attempts=3,
    )
    ctx = ExecutionContext(payload=payload, workdir=workdir, log_path=base / name / "run.log")
    if report_progress is not None:
        ctx.report_progress = report_progress
    return ctx


def wait_for(condition: Callable[[], bool], *, timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds (``wait_until``: for what another process does, a
    file it writes or its exit); fail the test (never hang) after ``timeout`` seconds."""
    wait_until(condition, timeout=timeout, what=what)


def read_log(ctx: ExecutionContext) -> str:
    return ctx.log_path.read_text(encoding="utf-8") if ctx.log_path.exists() else ""
