"""Content approval and the audit chain: nothing runs unapproved, by any trigger, and every
refusal is on the record. Each refusal test asserts nothing was stored or run and that an
audit entry names the rule."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from tests.helpers import count, define

from jobgate.core.audit import AuditEvent, first_broken
from jobgate.core.errors import ConflictError, GovernanceRefusal
from jobgate.core.models import Scope
from jobgate.core.records import AuditFilter
from jobgate.runtime.scheduler import Scheduler
from jobgate.service import approvals, audit, control, schedules
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection


def submit(engine: Engine, job: str, **params: str) -> str:
    return engine.submit(SubmitRequest(job, params=params, requested_by="ada"), actor="ada").run.job_run_id


def refusals(engine: Engine, job: str) -> list[str]:
    entries = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused", target_id=job))
    return [str(e.event.reason) for e in entries]


def test_an_unapproved_definition_is_refused_and_the_refusal_recorded(engine: Engine) -> None:
    job = define(engine, approve=False)
    with pytest.raises(GovernanceRefusal) as refused:
        submit(engine, job)
    assert refused.value.code == "definition_not_approved"
    assert count(engine, "job_runs") == 0 and count(engine, "outbox") == 0 and count(engine, "config_snapshots") == 0
    assert refusals(engine, job) == ["definition_not_approved"]


def test_approved_then_edited_is_refused_until_the_new_content_is_approved(engine: Engine) -> None:
    job = define(engine)
    submit(engine, job)
    define(engine, job_definition_id=job, description="edited", approve=False)  # a new version, a new digest
    with pytest.raises(GovernanceRefusal):
        submit(engine, job)
    status = approvals.status(engine, "default", job)
    assert status.current_version == 2 and not status.approved and len(status.history) == 1
    assert status.history[0].version == 1 and status.history[0].active  # version 1's approval stands
    approvals.approve(engine, "default", job, actor="root")
    submit(engine, job)
    assert count(engine, "job_runs") == 2 and refusals(engine, job) == ["definition_not_approved"]


def test_revoking_refuses_new_runs_and_cancels_the_ones_not_started(engine: Engine) -> None:
    job = define(engine)
    waiting = submit(engine, job)
    done = approvals.revoke(engine, "default", job, actor="root", reason="under review")
    assert done.cancelled_runs == [waiting]
    with engine.store.read() as tx:
        run = tx.run_get(waiting)
    assert run is not None and run.status.value == "CANCELLED"
    with pytest.raises(GovernanceRefusal):
        submit(engine, job)
    with pytest.raises(ConflictError):
        approvals.revoke(engine, "default", job, actor="root")  # nothing active left to revoke
    actions = [e.event.action for e in audit.search(engine, AuditFilter(tenant_id="default", target_id=job))]
    assert actions == ["definition.approved", "definition.approval_revoked", "run.refused"]


def test_a_requeue_of_content_no_longer_approved_is_refused(engine: Engine) -> None:
    from sqlalchemy import text

    job = define(engine)
    run_id = submit(engine, job)
    with engine.store.write() as tx:  # as if it had been dead-lettered
        connection(tx).execute(
            text("UPDATE job_runs SET status = 'DEAD_LETTERED' WHERE job_run_id = :r"), {"r": run_id}
        )
    approvals.revoke(engine, "default", job, actor="root")
    with pytest.raises(GovernanceRefusal):
        control.requeue_run(engine, run_id, actor="ops")
    with engine.store.read() as tx:
        run = tx.run_get(run_id)
    assert run is not None and run.status.value == "DEAD_LETTERED"
    reasons = [e.event.reason for e in audit.search(engine, AuditFilter(tenant_id="default", action="run.refused"))]
    assert reasons == ["definition_not_approved"]


def test_a_cron_fire_of_an_unapproved_definition_is_skipped_and_recorded(engine: Engine) -> None:
    job = define(engine, trigger_type="adaptive")
    now = engine.clock.now()
    doc = {"id": "every-minute", "job": job, "every_seconds": 60, "anchor": (now - timedelta(minutes=3)).isoformat()}
    schedules.put_schedules(engine, [schedules.schedule_from_document(doc, now=now)], source="test", now=now)
    # A new version nobody approved: the schedule's fires meet it.
    define(engine, job_definition_id=job, trigger_type="adaptive", description="edited", approve=False)
    Scheduler(engine).tick(now + timedelta(minutes=2))
    assert count(engine, "job_runs") == 0
    with engine.store.read() as tx:
        misses = tx.misses_list("default", "every-minute")
    assert misses and {reason for _, reason in misses} == {"refused"}
    assert refusals(engine, job) == ["definition_not_approved"] * len(misses)  # each refused slot audited


def test_approve_hashes_what_is_stored_and_records_who(engine: Engine) -> None:
    job = define(engine, approve=False)
    a = approvals.approve(engine, "default", job, actor="root", note="reviewed in CR-12")
    with engine.store.read() as tx:
        stored = tx.definition_get("default", job)
    assert stored is not None and a.digest == stored.digest and a.version == stored.version
    (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="definition.approved"))
    assert (entry.event.actor, entry.event.reason, entry.event.payload["digest"]) == (
        "root",
        "reviewed in CR-12",
        a.digest,
    )


def test_the_chain_links_every_entry_and_concurrent_appends_never_fork_it(engine: Engine) -> None:
    """Also: times never go back along the chain, though each writer's events carry times of
    their own, out of order with the others' (an append reads the last entry's time after it
    holds the head, so it sees the entry the writer before it committed)."""
    errors: list[BaseException] = []
    base = engine.clock.now()

    def append(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(15):
                at = base + timedelta(milliseconds=rng.randrange(0, 5_000))
                event = AuditEvent("default", f"writer-{n}", "test.append", "test", f"{n}-{i}", at)
                audit.record_now(engine, event)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    entries = audit.search(engine, AuditFilter(tenant_id="default", limit=1000))
    assert [e.seq for e in entries] == list(range(1, 61))
    assert first_broken(entries) is None
    times = [e.event.at for e in entries]
    assert times == sorted(times)
    with engine.store.read() as tx:
        assert tx.audit_head("default") == (60, entries[-1].entry_hash)
    other = audit.search(engine, AuditFilter(tenant_id="other"))
    assert other == []  # one chain per tenant


def test_a_changed_entry_is_detected(engine: Engine) -> None:
    from dataclasses import replace

    for i in range(5):
        audit.record_now(engine, AuditEvent("default", "ada", "test.append", "test", str(i), engine.clock.now()))
    entries = audit.search(engine, AuditFilter(tenant_id="default"))
    tampered = list(entries)
    tampered[2] = replace(entries[2], event=replace(entries[2].event, actor="mallory"))
    assert first_broken(tampered) == 2
    assert first_broken(entries[:2] + entries[3:]) == 2  # a deleted entry
    assert first_broken([entries[1], entries[0], *entries[2:]]) == 0  # reordered


def test_manual_scheduling_is_audited_with_the_run(engine: Engine) -> None:
    job = define(engine)
    run_id = engine.submit(
        SubmitRequest(job, scope=Scope(), requested_by="ada", reason="month end"), actor="ada"
    ).run.job_run_id
    (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="run.scheduled_manually"))
    assert (entry.event.target_id, entry.event.actor, entry.event.reason) == (run_id, "ada", "month end")


def test_a_revocation_reason_longer_than_any_face_takes_is_refused_not_cut(engine: Engine) -> None:
    """Found by a review of the console: its revoke form cut a reason at 2,000 characters without
    a word. The limit is the service's, for every face: refused naming the field, nothing done."""
    from jobgate.core.errors import ValidationError

    job = define(engine)
    entries = count(engine, "audit_log")
    with pytest.raises(ValidationError) as refused:
        approvals.revoke(engine, "default", job, actor="ops", reason="x" * (approvals.MAX_REVOKE_REASON + 1))
    assert refused.value.field == "reason" and count(engine, "audit_log") == entries
    assert approvals.status(engine, "default", job).approved
