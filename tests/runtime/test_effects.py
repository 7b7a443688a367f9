"""Exactly-once effects: a handler's writes commit with its fenced completion, or not at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from runtime_support import get_run, running_worker, transitions, wait_status, wait_until
from sqlalchemy import text

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection

PARAMS = [
    {"name": "seconds", "pattern": "[0-9.]+"},
    {"name": "fail_effect_on", "pattern": "[0-9]"},
    {"name": "fail_with", "pattern": "[a-z]+"},
]


def effects(engine: Engine) -> list[tuple[str, int]]:
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT job_run_id, attempt FROM test_effects ORDER BY job_run_id")).all()
    return [(r[0], int(r[1])) for r in rows]


@pytest.fixture
def ledger(engine: Engine) -> Iterator[Engine]:
    """The handlers' own table, beside jobgate's (dropped afterwards: PostgreSQL keeps the schema
    for the whole session, and other tests compare it with jobgate's declared tables)."""
    with engine.store.write() as tx:
        connection(tx).execute(text("CREATE TABLE test_effects (job_run_id VARCHAR(64), attempt INTEGER)"))
    yield engine
    with engine.store.write() as tx:
        connection(tx).execute(text("DROP TABLE test_effects"))


def ledger_job(engine: Engine) -> str:
    return define(engine, handler="engine_handlers:ledger", params=PARAMS, retry_policy="test_fixed_v1")


def test_each_completed_run_commits_its_effect_once(ledger: Engine) -> None:
    engine = ledger
    job = ledger_job(engine)
    ids = [engine.submit(SubmitRequest(job, request_id=f"r{i}")).run.job_run_id for i in range(20)]
    with running_worker(engine):
        for i in ids:
            wait_status(engine, i, RunStatus.COMPLETED)
    assert effects(engine) == sorted((i, 1) for i in ids)


def test_an_attempt_whose_lease_was_taken_commits_no_effect(ledger: Engine) -> None:
    engine = ledger
    job = ledger_job(engine)
    run = engine.submit(SubmitRequest(job, params={"seconds": "1"})).run
    with running_worker(engine) as worker:
        wait_until(lambda: run.job_run_id in worker._running, what="the worker runs it")
        with engine.store.write() as tx:  # another holder takes the run (as the rescuer would)
            connection(tx).execute(
                text("UPDATE job_runs SET lease_token = lease_token + 1 WHERE job_run_id = :r"), {"r": run.job_run_id}
            )
        # The worker learns it lost the run at its completion (refused) or at its next lease
        # renewal (the attempt is interrupted and its result void); either way it lets go.
        wait_until(lambda: run.job_run_id not in worker._running and not worker._pending, timeout=10, what="let go")
    assert (run.job_run_id, 1) not in effects(engine)  # the first attempt's effect never committed
    assert worker.stale_writes_refused + worker.lease_losses >= 1


@pytest.mark.parametrize("fail_with", ["exception", "interrupt", "owndatabase"])
def test_an_effect_that_fails_undoes_itself_and_the_attempt_is_retried(ledger: Engine, fail_with: str) -> None:
    """An effect raising KeyboardInterrupt (not an Exception) killed the worker's loop: the
    process exited 0 and the run stayed RUNNING until its lease expired. One whose own SQLite
    file could not be opened (an error that is passing when jobgate's database says it) stalled
    every settlement of the worker until the leases expired, the other runs' successes lost."""
    engine = ledger
    job = ledger_job(engine)
    run = engine.submit(SubmitRequest(job, params={"fail_effect_on": "1", "fail_with": fail_with})).run
    plain = engine.submit(SubmitRequest(job, request_id="plain")).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
        wait_status(engine, plain.job_run_id, RunStatus.COMPLETED)
    assert done.attempt == 2
    assert effects(engine) == sorted([(run.job_run_id, 2), (plain.job_run_id, 1)])
    moves = transitions(engine, run.job_run_id)
    assert ("RUNNING", "RETRY_WAIT", "retry_scheduled", 1) in moves
    assert get_run(engine, run.job_run_id).error_code is None  # cleared by the successful attempt
