"""An attempt whose executor ignores its stop is abandoned; its late result must not settle the next attempt."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from runtime_support import attempts, wait_status, wait_until

from helpers import define, make_config
from jobgate.core.states import RunStatus
from jobgate.runtime.worker import Worker, WorkerSettings
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store


def test_late_result_of_an_abandoned_attempt_is_discarded(database_url: str, tmp_path: Path) -> None:
    config = make_config(
        tmp_path, timeout_policies=[{"timeout_policy_id": "one_second", "execution_timeout_seconds": 1}]
    )
    engine = Engine(Store(database_url), config)
    try:
        job = define(
            engine,
            handler="engine_handlers:stubborn_first_attempt",
            retry_policy="test_fixed_v1",
            timeout_policy="one_second",
        )
        rid = engine.submit(SubmitRequest(job)).run.job_run_id
        worker = Worker(
            engine,
            WorkerSettings(
                concurrency=2, stop_grace=timedelta(milliseconds=100), poll_interval=timedelta(milliseconds=20)
            ),
        )
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            run = wait_status(engine, rid, RunStatus.COMPLETED, timeout=15)
        finally:
            worker.stop()
            assert worker.wait_stopped(15)
            thread.join(5)
        assert run.result == {"attempt": 2}
        assert [(a.attempt, a.outcome) for a in attempts(engine, rid)] == [(1, "execution_timeout"), (2, "succeeded")]
    finally:
        engine.store.dispose()


@contextmanager
def _deaf_run(database_url: str, tmp_path: Path) -> Iterator[tuple[Engine, Worker, str, Path]]:
    """A run whose first attempt ignores its stop for 4 s past a 1 s timeout, on a running
    worker (stop grace 0.1 s); the marker file is the code's own record of each attempt."""
    config = make_config(
        tmp_path, timeout_policies=[{"timeout_policy_id": "one_second", "execution_timeout_seconds": 1}]
    )
    engine = Engine(Store(database_url), config)
    marker = tmp_path / "marker.txt"
    try:
        job = define(
            engine,
            handler="engine_handlers:deaf_first_attempt",
            retry_policy="test_fixed_v1",
            timeout_policy="one_second",
            params=[{"name": "marker", "pattern": "/[A-Za-z0-9_./-]{1,300}"}, {"name": "seconds"}],
        )
        rid = engine.submit(SubmitRequest(job, params={"marker": str(marker), "seconds": "4"})).run.job_run_id
        settings = WorkerSettings(
            concurrency=2,
            stop_grace=timedelta(milliseconds=100),
            poll_interval=timedelta(milliseconds=20),
            stop_check_interval=timedelta(milliseconds=50),
        )
        worker = Worker(engine, settings)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            yield engine, worker, rid, marker
        finally:
            worker.stop()
            assert worker.wait_stopped(15)
            thread.join(5)
    finally:
        engine.store.dispose()


def test_a_retry_never_starts_while_the_attempt_that_ignored_its_stop_still_runs(
    database_url: str, tmp_path: Path
) -> None:
    """Found by a review: an attempt past its timeout that ignored its stop was abandoned after
    the grace and its retry started at once, beside the old code: one run executing twice at
    the same time. The run stays held until the code returns; then the attempt ends as timed
    out (its late result void) and the retry runs. The marker file is the code's own record."""
    with _deaf_run(database_url, tmp_path) as (engine, _, rid, marker):
        run = wait_status(engine, rid, RunStatus.COMPLETED, timeout=30)
        assert marker.read_text().split("\n")[:4] == ["start 1", "end 1", "start 2", "end 2"]
        assert run.result == {"attempt": 2}
        assert [(a.attempt, a.outcome) for a in attempts(engine, rid)] == [(1, "execution_timeout"), (2, "succeeded")]


def test_a_stop_asked_while_a_timed_out_attempt_still_runs_ends_the_run_cancelled(
    database_url: str, tmp_path: Path
) -> None:
    """Found by a regression review: an attempt stopped for its timeout whose code ran on was
    held; a user's ``runs stop`` meanwhile was never seen (only flights not yet interrupted were
    asked), and when the code returned the run was retried. The user's stop wins: CANCELLED, no
    second attempt."""
    from jobgate.service import control

    with _deaf_run(database_url, tmp_path) as (engine, worker, rid, marker):
        wait_until(lambda: any(f.overdue for f in list(worker._running.values())), timeout=15, what="overdue")
        control.stop_run(engine, rid, actor="ops", reason="stop it")
        run = wait_status(engine, rid, RunStatus.CANCELLED, timeout=20)
        assert run.attempt == 1 and marker.read_text().split("\n")[:2] == ["start 1", "end 1"]
        assert [a.attempt for a in attempts(engine, rid)] == [1]
        assert "start 2" not in marker.read_text()
