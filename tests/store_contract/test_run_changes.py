"""Run changes at the store's door, on both backends.

A claim starts runs in one SQL statement per backend; a worker starts a run it claimed earlier
with ``core.transitions.started``. The two must write the same record: the same transitions,
the same row, the same ``job_started`` event. And a change the state machine forbids is refused
by the store even if it was smuggled past ``RunChange``'s own check.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from tests.helpers import count, define

from jobgate.core import transitions
from jobgate.core.errors import IllegalTransitionError
from jobgate.core.models import JobRun, Transition
from jobgate.core.states import RunStatus
from jobgate.core.transitions import RunChange
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RunsClaim
from jobgate.testing import connection

LEASE = timedelta(seconds=30)


def _claim(engine: Engine, limit: int, start_now: int) -> list[JobRun]:
    now = engine.clock.now()
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim("w1", ("default",), limit, now, now + LEASE, start_now=start_now))
    return batch.runs()


def _record(engine: Engine, run_id: str) -> dict[str, Any]:
    """What a start leaves: the run's row (the columns a start touches), its transitions and its
    started event, with the run's own id taken out."""
    with engine.store.read() as tx:
        row = (
            connection(tx)
            .execute(
                text(
                    "SELECT status, attempt, started_at, progress, progress_message, lease_owner, transition_count "
                    "FROM job_runs WHERE job_run_id = :r"
                ),
                {"r": run_id},
            )
            .mappings()
            .one()
        )
        ts = tx.run_transitions(run_id)
        events = (
            connection(tx)
            .execute(text("SELECT event_type, payload FROM outbox WHERE job_run_id = :r ORDER BY id"), {"r": run_id})
            .mappings()
            .all()
        )
    return {
        "row": dict(row),
        "transitions": [(t.from_status, t.to_status, t.attempt, t.reason, t.actor, t.detail) for t in ts],
        "events": [(e["event_type"], str(e["payload"]).replace(run_id, "RUN")) for e in events],
    }


def _comparable(record: dict[str, Any], run: JobRun) -> dict[str, Any]:
    """The record without what differs between two runs by construction: their keys."""
    out = dict(record)
    out["events"] = [(kind, payload.replace(run.idempotency_key, "KEY")) for kind, payload in record["events"]]
    return out


def test_a_claims_start_writes_what_the_started_constructor_says(engine: Engine) -> None:
    job = define(engine)
    engine.submit_many([SubmitRequest(job, request_id=f"r{i}") for i in range(2)])
    # One run started by the claim's own statement (SQL), one claimed only and started by the
    # constructor the worker uses for runs it claimed earlier (Python).
    by_sql = _claim(engine, 1, start_now=1)[0]
    dispatched = _claim(engine, 1, start_now=0)[0]
    assert (by_sql.status, dispatched.status) == (RunStatus.RUNNING, RunStatus.DISPATCHED)
    with engine.store.write() as tx:
        done = tx.runs_apply([transitions.started(dispatched, worker_id="w1", now=by_sql.started_at or by_sql.due_at)])
    assert len(done) == 1
    sql, python = _record(engine, by_sql.job_run_id), _record(engine, dispatched.job_run_id)
    # The claimed transition is what ``transitions.claimed`` says of the run before its claim.
    before = dispatched.evolve(status=RunStatus.SCHEDULED)
    claimed = transitions.claimed(before, worker_id="w1", now=dispatched.due_at)
    expected = (claimed.from_status, claimed.to_status, claimed.attempt, claimed.reason, claimed.actor, {})
    assert sql["transitions"][2] == python["transitions"][2] == expected
    assert _comparable(sql, by_sql) == _comparable(python, dispatched)


def test_the_store_refuses_a_forbidden_change_smuggled_past_its_constructor(engine: Engine) -> None:
    """The review's ``illegal.py``: a COMPLETED run moved back to SCHEDULED through the store."""
    job = define(engine)
    run = engine.submit(SubmitRequest(job, request_id="r")).run
    cancelled = transitions.cancelled(run, actor="ada", reason=None, now=engine.clock.now())
    with engine.store.write() as tx:
        assert tx.runs_apply([cancelled])
    t = Transition(run.job_run_id, RunStatus.CANCELLED, RunStatus.SCHEDULED, 0, "requeued", "ada", engine.clock.now())
    forged = object.__new__(RunChange)  # no __init__, so no check: as a careless caller might
    for name, value in dict(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.CANCELLED,
        to_status=RunStatus.SCHEDULED,
        transition=t,
        expected_token=None,
        revoke_lease=False,
        start_attempt=False,
        values={},
        events=(),
        dead_letter=None,
        lease_expired_before=None,
    ).items():
        object.__setattr__(forged, name, value)
    transitions_before = count(engine, "run_transitions")
    with engine.store.write() as tx, pytest.raises(IllegalTransitionError, match="CANCELLED -> SCHEDULED"):
        tx.runs_apply([forged])
    with engine.store.read() as tx:
        stored = tx.run_get(run.job_run_id)
    assert stored is not None and stored.status is RunStatus.CANCELLED
    assert count(engine, "run_transitions") == transitions_before
