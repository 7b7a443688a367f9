"""``jobgate submit --request-id`` and ``jobgate retry`` on the database keep the API's
idempotency rule: the request id is the caller's key (the same run here and through a server),
a repeat is answered from the store before any gate or quota, and the same id with another
request is a conflict that stores nothing. Both backends."""

from __future__ import annotations

import pytest

from helpers import count, define
from jobgate.client.runs import LocalRuns, Submission
from jobgate.core.errors import ConflictError, GovernanceRefusal
from jobgate.core.models import Scope
from jobgate.service import approvals, control, manual
from jobgate.service.engine import Engine


def test_a_request_id_finds_the_same_run_locally_and_through_the_api(engine: Engine) -> None:
    job = define(engine, params=[{"name": "month", "pattern": "[0-9]{4}-[0-9]{2}"}])
    local = LocalRuns(engine)
    first = local.submit(Submission(job, {"month": "2026-11"}, None, "r-1"), tenant="default", actor="ops")
    again = local.submit(Submission(job, {"month": "2026-11"}, None, "r-1"), tenant="default", actor="ops")
    assert first.created and not again.created and again.run.job_run_id == first.run.job_run_id
    through_api = manual.submit_manual(
        engine,
        scope=Scope("default"),
        actor="ops",
        job_definition_id=job,
        params={"month": "2026-11"},
        reason=None,
        idempotency_key="r-1",
    )
    assert not through_api.created and through_api.run.job_run_id == first.run.job_run_id
    runs = count(engine, "job_runs")
    with pytest.raises(ConflictError, match="different request"):
        local.submit(Submission(job, {"month": "2026-12"}, None, "r-1"), tenant="default", actor="ops")
    assert count(engine, "job_runs") == runs  # nothing stored for the conflicting request


def test_equal_values_written_differently_are_the_same_request(engine: Engine) -> None:
    """The guide: equal values make equal keys (``10.50`` is the decimal ``10.5``). Under a
    caller's key they were a 409, the request's digest being of the text as sent."""
    job = define(
        engine,
        params=[
            {"name": "amount", "type": "decimal", "required": False},
            {"name": "n", "type": "integer", "required": False},
            {"name": "at", "type": "datetime", "required": False},
        ],
    )
    local = LocalRuns(engine)
    sent = {"amount": "12.50", "n": "7", "at": "2026-03-29T10:00:00+01:00"}
    first = local.submit(Submission(job, sent, None, "k-2"), tenant="default", actor="ops")
    same = {"amount": "12.5", "n": "+007", "at": "2026-03-29T09:00:00Z"}
    again = local.submit(Submission(job, same, None, "k-2"), tenant="default", actor="ops")
    assert not again.created and again.run.job_run_id == first.run.job_run_id
    with pytest.raises(ConflictError, match="different request"):
        local.submit(Submission(job, {**same, "amount": "12.51"}, None, "k-2"), tenant="default", actor="ops")
    assert count(engine, "job_runs") == 1


def test_a_repeat_is_answered_before_the_gates_and_a_new_request_is_not(engine: Engine) -> None:
    job = define(engine)
    local = LocalRuns(engine)
    first = local.submit(Submission(job, {}, None, "r-1"), tenant="default", actor="ops")
    approvals.revoke(engine, "default", job, actor="admin")  # the gate closes (and cancels the run)
    repeat = local.submit(Submission(job, {}, None, "r-1"), tenant="default", actor="ops")
    assert not repeat.created and repeat.run.job_run_id == first.run.job_run_id
    runs, refusals = count(engine, "job_runs"), count(engine, "audit_log", "action LIKE '%refused%'")
    with pytest.raises(GovernanceRefusal):
        local.submit(Submission(job, {}, None, "r-2"), tenant="default", actor="ops")
    assert count(engine, "job_runs") == runs
    assert count(engine, "audit_log", "action LIKE '%refused%'") == refusals + 1  # the new one, audited


def test_a_local_retry_is_found_again_before_the_gates(engine: Engine) -> None:
    job = define(engine)
    local = LocalRuns(engine)
    source = local.submit(Submission(job, {}, None, None), tenant="default", actor="ops").run
    control.cancel_run(engine, source.job_run_id, actor="ops", reason="to retry it")
    retried = local.retry(source.job_run_id, actor="ops")
    approvals.revoke(engine, "default", job, actor="admin")
    again = local.retry(source.job_run_id, actor="ops")
    assert retried.created and not again.created and again.run.job_run_id == retried.run.job_run_id
