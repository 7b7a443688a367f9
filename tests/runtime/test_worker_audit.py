"""Material run outcomes in the audit log (seed §49), written with the settlement itself: dead
letters, escalations and the end of every audit-required run; nothing for ordinary runs. If
the audit log cannot be written, the settlement is not either (seed §58: fail closed): the
run does not count as done, and is tried again once its lease lapses."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from runtime_support import running_worker, wait_status, wait_until
from sqlalchemy import text

from helpers import define
from jobgate.core.audit import first_broken
from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus
from jobgate.runtime.worker import Worker
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection


def submit(engine: Engine, job: str) -> str:
    return engine.submit(SubmitRequest(job, requested_by="ada", reason="r"), actor="ada").run.job_run_id


def outcomes(engine: Engine, run_id: str) -> list[str]:
    entries = audit.search(engine, AuditFilter(tenant_id="default", target_id=run_id))
    return [e.event.action for e in entries if e.event.action != "run.scheduled_manually"]


def test_dead_letters_escalations_and_audit_required_ends_are_recorded(engine: Engine) -> None:
    dead = define(engine, handler="engine_handlers:fail_final", retry_policy="test_fixed_v1")
    review = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_review_v1")
    required = define(engine, handler="engine_handlers:succeed", audit_required=True)
    plain = define(engine, handler="engine_handlers:succeed")
    runs = {job: submit(engine, job) for job in (dead, review, required, plain)}
    with running_worker(engine):
        wait_status(engine, runs[dead], RunStatus.DEAD_LETTERED)
        wait_status(engine, runs[review], RunStatus.ESCALATED)
        wait_status(engine, runs[required], RunStatus.COMPLETED)
        wait_status(engine, runs[plain], RunStatus.COMPLETED)
    assert outcomes(engine, runs[dead]) == ["run.dead_lettered"]
    assert outcomes(engine, runs[review]) == ["run.escalated"]
    assert outcomes(engine, runs[required]) == ["run.completed"]
    assert outcomes(engine, runs[plain]) == []
    assert first_broken(audit.search(engine, AuditFilter(tenant_id="default", limit=1000))) is None


class _GivingUp(Worker):
    """Says when it has given up settlements it could not write (after three failed cycles, one
    by one, then left to the rescuer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gave_up = threading.Event()

    def _isolate_poison(self, pending: Any) -> None:
        super()._isolate_poison(pending)
        self.gave_up.set()


def test_without_an_audit_log_an_audit_required_run_does_not_settle(engine: Engine) -> None:
    required = define(engine, handler="engine_handlers:succeed", audit_required=True, retry_policy="test_fixed_v1")
    run_id = submit(engine, required)
    with engine.store.write() as tx:  # the audit store becomes unwritable
        connection(tx).execute(text("ALTER TABLE audit_log RENAME TO audit_log_away"))
    try:
        with running_worker(engine, worker_class=_GivingUp, lease=timedelta(seconds=2)) as worker:
            assert isinstance(worker, _GivingUp)
            wait_until(lambda: worker.stats.started >= 1, what="the run to start")
            # The handler returns at once; its settlement keeps failing, until the worker gives it up.
            assert worker.gave_up.wait(10), "the worker kept trying to settle the run"
            with engine.store.read() as tx:
                status = (
                    connection(tx)
                    .execute(text("SELECT status FROM job_runs WHERE job_run_id = :r"), {"r": run_id})
                    .scalar()
                )
            assert status == "RUNNING"  # not completed while its record cannot be kept
            _restore(engine)
            # The settlement that could not be recorded was given up; the run's lease lapses
            # and it is tried again, this time with its record.
            done = wait_status(engine, run_id, RunStatus.COMPLETED, timeout=30)
            assert done.attempt >= 2
    finally:
        _restore(engine)
    assert outcomes(engine, run_id) == ["run.completed"]


def _restore(engine: Engine) -> None:
    try:
        with engine.store.write() as tx:
            connection(tx).execute(text("ALTER TABLE audit_log_away RENAME TO audit_log"))
    except Exception:
        pass  # restored already


def test_the_rescuers_dead_letters_are_recorded(engine: Engine) -> None:
    from datetime import timedelta

    from jobgate.runtime import rescuer

    job = define(engine, handler="engine_handlers:succeed")
    run_id = submit(engine, job)
    closed = rescuer.close_overdue(engine, engine.clock.now() + timedelta(days=2), timedelta(days=1))
    assert closed == 1
    assert outcomes(engine, run_id) == ["run.dead_lettered"]
