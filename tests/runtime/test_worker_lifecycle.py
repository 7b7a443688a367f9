"""A run's happy path through a real worker: states, attempts, results, outbox delivery, order."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_support import (
    actors,
    attempts,
    events,
    get_run,
    running_worker,
    transitions,
    wait_all,
    wait_status,
)

from helpers import count, define
from jobgate.core.errors import ConflictError
from jobgate.core.states import RunStatus
from jobgate.runtime.outbox import RecordingSink, publish_once
from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection


def test_a_run_executes_records_everything_and_its_events_are_delivered_once(engine: Engine) -> None:
    job = define(engine, params=[{"name": "n", "pattern": "[0-9]+"}])
    run = engine.submit(SubmitRequest(job, params={"n": "7"}, request_id="one")).run
    with running_worker(engine) as worker:
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    rid = run.job_run_id

    assert transitions(engine, rid) == [
        (None, "CREATED", "created", 0),
        ("CREATED", "SCHEDULED", "admitted", 0),
        ("SCHEDULED", "DISPATCHED", "claimed", 0),
        ("DISPATCHED", "RUNNING", "started", 1),
        ("RUNNING", "COMPLETED", "succeeded", 1),
    ]
    assert actors(engine, rid)[2:] == [worker.worker_id] * 3
    assert done.attempt == 1 and done.max_attempts == 1
    assert done.result == {"attempt": 1, "params": {"n": "7"}}
    assert done.started_at is not None and done.ended_at is not None
    assert run.created_at <= done.started_at <= done.ended_at
    assert done.lease_owner is None and done.lease_expires_at is None
    assert done.error_code is None and done.idempotency_key == run.idempotency_key

    (attempt,) = attempts(engine, rid)
    assert (attempt.attempt, attempt.outcome, attempt.worker_id, attempt.error_code) == (
        1,
        "succeeded",
        worker.worker_id,
        None,
    )
    assert attempt.ended_at is not None and attempt.started_at == done.started_at
    assert worker.settled == 1 and worker.stale_writes_refused == 0

    stored = events(engine, rid)
    assert [e.event_type for e in stored] == ["job_started", "job_completed"]
    assert [e.payload["event_type"] for e in stored] == [
        "trustgate.scheduler.job_started",
        "trustgate.scheduler.job_completed",
    ]
    assert stored[0].payload["attempt"] == 1
    assert stored[1].payload["result"] == {"attempt": 1, "params": {"n": "7"}}
    assert not any(e.delivered for e in stored)

    sink = RecordingSink()
    assert publish_once(engine.store, [sink], engine.clock) == 2
    assert [(e.event_id, e.job_run_id, e.event_type) for e in sink.events] == [
        (stored[0].event_id, rid, "job_started"),
        (stored[1].event_id, rid, "job_completed"),
    ]
    assert all(e.delivered for e in events(engine, rid))
    assert publish_once(engine.store, [sink], engine.clock) == 0
    assert len(sink.events) == 2
    with engine.store.read() as tx:
        assert tx.outbox_backlog() == 0


def test_runs_start_in_priority_order_not_submission_order(engine: Engine) -> None:
    low = define(engine, priority="low")
    critical = define(engine, priority="critical")
    normal = define(engine, priority="normal")
    ids = {job: engine.submit(SubmitRequest(job)).run.job_run_id for job in (low, critical, normal)}
    with running_worker(engine, concurrency=1, batch_size=1):
        wait_all(engine, list(ids.values()), RunStatus.COMPLETED)

    with engine.store.read() as tx:
        from sqlalchemy import text

        started = [
            r[0]
            for r in connection(tx).execute(
                text("SELECT job_run_id FROM run_transitions WHERE to_status = 'RUNNING' ORDER BY id")
            )
        ]
    assert started == [ids[critical], ids[normal], ids[low]]
    starts = [get_run(engine, ids[j]).started_at for j in (critical, normal, low)]
    assert starts[0] is not None and starts[1] is not None and starts[2] is not None
    assert starts[0] < starts[1] < starts[2]
    first_attempts = [attempts(engine, ids[j])[0].started_at for j in (critical, normal, low)]
    assert first_attempts == starts


def test_retry_of_a_terminal_run_is_one_new_run_and_a_live_run_cannot_be_retried(engine: Engine) -> None:
    job = define(engine, params=[{"name": "n", "pattern": "[0-9]+"}])
    source = engine.submit(SubmitRequest(job, params={"n": "3"})).run
    with running_worker(engine):
        wait_status(engine, source.job_run_id, RunStatus.COMPLETED)
        before = transitions(engine, source.job_run_id)

        retry, created = control.retry_run(engine, source.job_run_id, actor="alice")
        assert created
        assert retry.job_run_id != source.job_run_id
        assert retry.idempotency_key != source.idempotency_key
        assert retry.params == {"n": "3"} and retry.attempt == 0
        again, created_again = control.retry_run(engine, source.job_run_id, actor="bob")
        assert not created_again and again.job_run_id == retry.job_run_id

        done = wait_status(engine, retry.job_run_id, RunStatus.COMPLETED)
    assert done.result == {"attempt": 1, "params": {"n": "3"}}
    assert count(engine, "job_runs") == 2
    assert transitions(engine, source.job_run_id) == before  # the source run is left as it was

    pending = engine.submit(SubmitRequest(job, params={"n": "4"}, due_at=engine.clock.now().replace(year=2100))).run
    with pytest.raises(ConflictError):
        control.retry_run(engine, pending.job_run_id, actor="alice")
    assert count(engine, "job_runs") == 3


def test_the_retry_of_a_run_stays_the_same_after_the_configuration_changes(engine: Engine, tmp_path: Path) -> None:
    from helpers import make_config

    job = define(engine)
    source = engine.submit(SubmitRequest(job)).run
    control.cancel_run(engine, source.job_run_id, actor="alice")
    retry, created = control.retry_run(engine, source.job_run_id, actor="alice")
    assert created
    # The default profile changes: new snapshot, new config digest; the retry is still the same run.
    changed = Engine(engine.store, make_config(tmp_path / "changed", profiles={"default": {"replicas": 3}}))
    again, created_again = control.retry_run(changed, source.job_run_id, actor="bob")
    assert not created_again and again.job_run_id == retry.job_run_id
