"""Closing a dead letter without another attempt. Found by a review: a step of a workflow that
had ended (FAILED, ESCALATED) left its dead letter open for good (a requeue or a retry of it is
refused, and rightly), and retention keeps a run with an open letter for good."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import count, define, make_config
from tests.runtime.runtime_support import running_worker, wait_status

from jobgate.core.errors import ConflictError, NotFoundError, ValidationError
from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus
from jobgate.service import audit, control, retries
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store


@pytest.fixture
def letter(database_url: str, tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path))
    job = define(engine, handler="engine_handlers:fail_final")
    run = engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run.job_run_id
    with running_worker(engine):
        wait_status(engine, run, RunStatus.DEAD_LETTERED)
    yield engine, run
    store.dispose()


def test_a_dead_letter_is_closed_with_who_and_why_audited_and_sealed(letter: tuple[Engine, str]) -> None:
    engine, run = letter
    closed = control.close_dead_letter(engine, run, actor="ops", note="  done by hand in the ledger  ")
    assert closed.resolution == "closed by ops: done by hand in the ledger" and closed.resolved_at is not None
    with engine.store.read() as tx:
        assert tx.dead_letter_open_for(run) is None
        assert tx.run_get(run).status is RunStatus.DEAD_LETTERED  # it stays as it ended
        [entry] = tx.audit_list(AuditFilter(tenant_id="default", action="run.dead_letter_closed"))
    assert (entry.event.actor, entry.event.target_id, entry.event.reason) == ("ops", run, "done by hand in the ledger")
    audit.seal_pending(engine, engine.clock.now())
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))  # sealed again with its letter closed
    with pytest.raises(ConflictError) as again:
        control.close_dead_letter(engine, run, actor="ops", note="twice")
    assert "no open dead letter" in again.value.message


@pytest.mark.parametrize("note", ["", "   ", "x" * (control.MAX_CLOSE_NOTE + 1), "ok\x1b[2J\x1b[31mFORGED", "a\u202eb"])
def test_a_close_without_a_reason_or_of_another_tenant_changes_nothing(letter: tuple[Engine, str], note: str) -> None:
    engine, run = letter
    before = count(engine, "audit_log")
    with pytest.raises(ValidationError) as refused:
        control.close_dead_letter(engine, run, actor="ops", note=note)
    assert refused.value.field == "note"
    with pytest.raises(NotFoundError):
        control.close_dead_letter(engine, run, actor="ops", note="not mine", tenant_id="other")
    with engine.store.read() as tx:
        assert tx.dead_letter_open_for(run) is not None
    assert count(engine, "audit_log") == before


def test_a_closed_dead_letter_is_never_requeued_and_its_run_never_runs_again(letter: tuple[Engine, str]) -> None:
    """Found by a review: a letter closed "no more attempts" was requeued (CLI and API) and its
    run ran again. A dead-lettered run whose letter is closed is refused a requeue, nothing
    written; an open letter still requeues."""
    engine, run = letter
    control.close_dead_letter(engine, run, actor="ops", note="no more attempts")
    before = (count(engine, "audit_log"), count(engine, "run_transitions"), count(engine, "dead_letters"))
    with pytest.raises(ConflictError) as refused:
        control.requeue_run(engine, run, actor="ops")
    assert refused.value.field == "status" and "closed" in refused.value.message
    runs = count(engine, "job_runs")
    with pytest.raises(ConflictError) as not_retried:  # nor as a new run (a regression review's variant)
        control.retry_run(engine, run, actor="ops")
    assert not_retried.value.field == "status" and "closed" in not_retried.value.message
    assert count(engine, "job_runs") == runs
    assert (count(engine, "audit_log"), count(engine, "run_transitions"), count(engine, "dead_letters")) == before
    with engine.store.read() as tx:
        found = tx.run_get(run)
    assert found is not None and found.status is RunStatus.DEAD_LETTERED and found.attempt == 1


def test_a_retry_prepared_before_the_letter_closed_is_refused_when_stored(letter: tuple[Engine, str]) -> None:
    """Found by a review of the fix above: the retry asked whether the letter was closed in its
    read transaction only, so a close committed between that read and the retry's write was not
    seen. The retry's store asks again under the source run's lock: refused, nothing written."""
    engine, run = letter
    with engine.store.read() as tx:
        source = tx.run_get(run)
    assert source is not None
    prepared = retries.retry_request(source, actor="ops", role=None, schedule_id=None)  # what retry() read
    control.close_dead_letter(engine, run, actor="ops", note="no more attempts")  # committed meanwhile
    before = tuple(count(engine, t) for t in ("job_runs", "audit_log", "run_transitions", "dead_letters"))
    with pytest.raises(ConflictError) as refused:
        engine.submit(prepared, actor="ops")
    assert refused.value.field == "status" and "closed" in refused.value.message
    assert tuple(count(engine, t) for t in ("job_runs", "audit_log", "run_transitions", "dead_letters")) == before
