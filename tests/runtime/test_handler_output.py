"""A Python handler's output is its run's log: stdout, stderr, ``logging`` and ``ctx.log`` of the
attempt's thread land in ``runs/<id>/run.log`` (what ``jobgate runs log``, the API and the
console read), each attempt headed, capped, and never mixed with another attempt running at the
same time; nothing of it reaches the worker's own output."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from runtime_support import running_worker, wait_status

from helpers import define
from jobgate.core.models import JobRun
from jobgate.core.states import RunStatus
from jobgate.runtime.executors import capture
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

N = [{"name": "n", "pattern": "[0-9]{1,6}"}]


def _log_of(engine: Engine, run: JobRun) -> str:
    return (Path(engine.config.data_dir) / "runs" / run.job_run_id / "run.log").read_text()


def test_prints_log_records_and_ctx_log_are_the_runs_log_not_the_workers(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.getLogger().setLevel(logging.INFO)
    job = define(engine, handler="engine_handlers:chatty", params=N)
    run = engine.submit(SubmitRequest(job, params={"n": "7"})).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    log = _log_of(engine, run)
    assert log.startswith("[jobgate] attempt 1\n")
    for line in ("stdout line 7", "stderr line 7", "WARNING acme.reports: logged line 7", "ctx line 7"):
        assert line in log, (line, log)
    seen = capsys.readouterr()
    assert "line 7" not in seen.out and "line 7" not in seen.err
    print("after the attempt")  # outside an attempt, output goes where it always went
    assert "after the attempt" in capsys.readouterr().out


def test_two_attempts_at_once_keep_their_own_output(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:chatty_pair", params=N)
    runs = [engine.submit(SubmitRequest(job, params={"n": n})).run for n in ("1", "2")]
    with running_worker(engine, concurrency=2):
        for run in runs:
            wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    for run, mine, theirs in ((runs[0], "1", "2"), (runs[1], "2", "1")):
        log = _log_of(engine, run)
        assert f"before {mine}" in log and f"after {mine}" in log
        assert f"before {theirs}" not in log and f"after {theirs}" not in log


def test_an_attempts_output_is_capped(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "MAX_ATTEMPT_LOG_BYTES", 4096)
    job = define(engine, handler="engine_handlers:flood")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)  # the cap does not change the outcome
    log = _log_of(engine, run)
    assert "line 00000" in log and "line 01999" not in log
    assert log.rstrip().endswith("passed 4096 bytes; the rest is not kept")
    assert len(log.encode()) < 4096 + 200


def test_urls_in_log_records_lose_their_credentials_and_query(engine: Engine) -> None:
    """Anyone who may read a run may read its log: what a record's URL carries besides scheme,
    host and path is not kept, and the HTTP clients' request lines are not the run's output."""
    logging.getLogger().setLevel(logging.INFO)
    job = define(engine, handler="engine_handlers:leaky")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    log = _log_of(engine, run)
    assert "calling https://api.example/v1/sync failed" in log
    for secret in ("s3cret", "T0KEN", "pa55", "K3Y", "svc:", "HTTP Request"):
        assert secret not in log


def test_a_silent_handler_costs_no_file_nor_folder(engine: Engine) -> None:
    """Capture opens the log at the first write: a run that says nothing makes no folder (the
    folder and the file were ~75 us of a worker's CPU per run when made eagerly)."""
    job = define(engine)  # engine_handlers:succeed prints nothing
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    assert not (Path(engine.config.data_dir) / "runs" / run.job_run_id).exists()
