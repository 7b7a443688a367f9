"""Claims straight through the store: queues named twice, rows a worker cannot read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from tests.helpers import define

from jobgate.service.engine import Engine, SubmitRequest
from jobgate.store.base import RunsClaim


def submit(engine: Engine, job: str, n: int) -> list[str]:
    results = engine.submit_many([SubmitRequest(job, request_id=f"r{i}") for i in range(n)])
    return [r.run.job_run_id for r in results]


def claim(engine: Engine, queues: tuple[str, ...], limit: int) -> list[str]:
    now = engine.clock.now()
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim("w", queues, limit, now, now + timedelta(seconds=30), start_now=limit))
    return [r.job_run_id for r in batch.runs()]


def test_a_queue_named_twice_is_claimed_from_once(engine: Engine) -> None:
    job = define(engine)
    submit(engine, job, 10)
    assert len(claim(engine, ("default", "default"), 4)) == 4


def test_a_queue_named_twice_does_not_count_a_run_twice_against_its_limit(engine: Engine) -> None:
    job = define(engine, concurrency_limit=2)
    submit(engine, job, 10)
    assert len(claim(engine, ("default", "default"), 10)) == 2


def test_an_unreadable_claimed_row_does_not_cost_the_others_their_start(engine: Engine) -> None:
    if engine.store.dialect != "sqlite":
        pytest.skip("PostgreSQL decodes claimed rows inside the transaction")
    job = define(engine)
    ids = submit(engine, job, 4)
    with engine.store.write() as tx:  # as a newer version might write it
        tx.conn.execute(text("UPDATE job_runs SET job_class = 'FUTURE_JOB' WHERE job_run_id = :id"), {"id": ids[1]})
    now = engine.clock.now()
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim("w", ("default",), 4, now, now + timedelta(seconds=30), start_now=4))
    runs = batch.runs()
    assert sorted(r.job_run_id for r in runs) == sorted(ids[:1] + ids[2:])
    assert [run_id for run_id, _ in batch.unreadable] == [ids[1]]
    assert "FUTURE_JOB" in batch.unreadable[0][1]
