"""The worker process sets the interpreter up for many short jobs, and still runs them."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest
from runtime_support import wait_all

from helpers import define
from jobgate.core.errors import ConfigurationError
from jobgate.core.states import RunStatus
from jobgate.runtime import process
from jobgate.runtime.outbox import RecordingSink
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest


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
        assert gc.get_threshold() == (process.GC_THRESHOLD_DEFAULT, 10, 10) and process.GC_THRESHOLD_DEFAULT == 20000
        assert sys.getswitchinterval() == pytest.approx(process.SWITCH_INTERVAL)
        wait_all(engine, runs, RunStatus.COMPLETED)
    finally:
        proc.stop()
        proc.join()
    assert sorted(e.job_run_id for e in sink.events if e.event_type == "job_completed") == sorted(runs)


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5"])
@pytest.mark.usefixtures("interpreter_settings")
def test_a_threshold_that_would_stop_or_confuse_the_collector_is_refused_before_anything_runs(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("JOBGATE_GC_THRESHOLD", value)
    gc.set_threshold(700, 10, 10)
    job = define(engine)
    run = engine.submit(SubmitRequest(job, params={}, request_id="not-run")).run
    proc = process.WorkerProcess(engine, process.worker_settings(engine, concurrency=1), sinks=[])
    with pytest.raises(ConfigurationError) as refused:
        proc.start()
    assert refused.value.field == "JOBGATE_GC_THRESHOLD" and repr(value) in refused.value.message
    assert gc.get_threshold() == (700, 10, 10)  # the interpreter was left as it was
    with engine.store.read() as tx:
        assert tx.run_get(run.job_run_id).status is RunStatus.SCHEDULED  # nothing ran


@pytest.mark.usefixtures("interpreter_settings")
def test_the_threshold_can_be_set_for_a_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBGATE_GC_THRESHOLD", "5000")
    assert process.gc_threshold() == 5000
