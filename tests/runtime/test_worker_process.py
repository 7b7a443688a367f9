"""The worker process sets the interpreter up for many short jobs, and still runs them."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest
from runtime_support import wait_all

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.runtime import process
from jobgate.runtime.outbox import RecordingSink
from jobgate.service.engine import Engine, SubmitRequest


@pytest.fixture
def interpreter_settings() -> Iterator[None]:
    """Put back what the worker process changes for the whole interpreter."""
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    yield
    gc.set_threshold(*threshold)
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("interpreter_settings")
def test_a_worker_process_collects_young_garbage_less_often_and_runs_its_jobs(engine: Engine) -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    job = define(engine)
    runs = [engine.submit(SubmitRequest(job, params={}, request_id=f"proc-{i}")).run.job_run_id for i in range(5)]
    sink = RecordingSink()
    proc = process.WorkerProcess(engine, process.worker_settings(engine, concurrency=2), sinks=[sink])
    proc.start()
    try:
        # Young collections every 20,000 allocations; the older generations keep their ratios.
        assert gc.get_threshold() == (process.GC_THRESHOLD, 10, 10) and process.GC_THRESHOLD == 20000
        assert sys.getswitchinterval() == pytest.approx(process.SWITCH_INTERVAL)
        wait_all(engine, runs, RunStatus.COMPLETED)
    finally:
        proc.stop()
        proc.join()
    assert sorted(e.job_run_id for e in sink.events if e.event_type == "job_completed") == sorted(runs)
