"""A worker's JSON log lines about one run carry that run's fields (``job_run_id``,
``trace_id``, ``tenant_id``, ``attempt``) and an explicit ``action``, not the logger's name:
an executor that fails, and a run taken from the worker (escalated by the SLA monitor)."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from runtime_support import get_run, running_worker, wait_until

from helpers import define, make_config
from jobgate.config import JobgateConfig
from jobgate.core.states import RunStatus
from jobgate.core.trace import run_trace_id
from jobgate.logs import configure
from jobgate.runtime.executors.python import PythonExecutor
from jobgate.service import sla
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest


@pytest.fixture
def config(tmp_path: Path) -> JobgateConfig:
    policies = [{"sla_policy_id": "hour_escalating", "deadline_seconds": 3600, "requires_escalation": True}]
    return make_config(tmp_path, sla_policies=policies)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger sent to a buffer as JSON from debug up; restored afterwards."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    stream = io.StringIO()
    configure("json", "debug", stream)
    try:
        yield stream
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)


def lines_about(stream: io.StringIO, run_id: str, words: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [d for d in found if run_id in str(d.get("message")) and words in str(d.get("message"))]


def test_an_executor_failure_is_logged_with_the_runs_fields(
    engine: Engine, captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: PythonExecutor, ctx: Any) -> Any:
        raise RuntimeError("executor bug")

    monkeypatch.setattr(PythonExecutor, "execute", broken)
    job = define(engine, retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job, request_id=uuid.uuid4().hex)).run
    with running_worker(engine):
        wait_until(lambda: get_run(engine, run.job_run_id).status.is_terminal, what="the run to end")
    lines = lines_about(captured, run.job_run_id, "executor failed")
    assert lines, captured.getvalue()[-2000:]
    for doc in lines:
        assert doc["action"] == "executor_failed" and doc["level"] == "error"
        assert doc["job_run_id"] == run.job_run_id and doc["tenant_id"] == "default"
        assert doc["trace_id"] == run_trace_id(run.job_run_id)
        assert doc["attempt"] in (1, 2, 3) and doc["exc"]["type"] == "RuntimeError"


def test_a_run_taken_from_the_worker_is_logged_with_its_fields(engine: Engine, captured: io.StringIO) -> None:
    params = [{"name": "seconds", "pattern": "[0-9.]+"}]
    job = define(engine, sla_policy="hour_escalating", handler="engine_handlers:sleep", params=params)
    run = engine.submit(SubmitRequest(job, request_id=uuid.uuid4().hex, params={"seconds": "30"})).run
    with running_worker(engine) as worker:
        wait_until(lambda: get_run(engine, run.job_run_id).status is RunStatus.RUNNING, what="the run started")
        assert sla.check(engine, run.created_at + timedelta(hours=1, seconds=1)).escalations == 1
        wait_until(lambda: not worker._running, timeout=10, what="the worker let go of the run")
    # Noticed by the stop check ("no longer held") or by the lease renewal ("lease lost"),
    # whichever comes first: one line either way, with the run's fields.
    (doc,) = [d for d in lines_about(captured, run.job_run_id, "") if d.get("action") == "lease_lost"]
    assert doc["attempt"] == 1
    assert doc["job_run_id"] == run.job_run_id and doc["trace_id"] == run_trace_id(run.job_run_id)
