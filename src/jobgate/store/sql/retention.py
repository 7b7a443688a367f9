"""Which finished runs retention may delete, and their deletion with everything they own."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from jobgate.store import codec
from jobgate.store.base import RetireScope
from jobgate.store.sql.outbox import undelivered
from jobgate.store.tables import outbox


def _retirable(
    conn: Connection, tenant_id: str, ended_before: datetime, scope: RetireScope, *, ordered_ids: bool
) -> Any:
    """The predicate of the runs retention may delete: finished before ``ended_before``, no event
    undelivered, no open dead letter, not a step of a workflow run still active, not the source
    of a retry still to finish, within
    ``scope`` (its job classes; a resolved dead letter old enough). One predicate for the
    deletion and for its dry run, so the two agree."""
    from sqlalchemy import and_, exists

    from jobgate.store.tables import dead_letters, job_runs, workflow_runs

    r = job_runs.c
    terminal = ("COMPLETED", "FAILED", "DEAD_LETTERED", "CANCELLED", "ESCALATED")
    busy_event = exists().where(and_(outbox.c.job_run_id == r.job_run_id, undelivered(conn, ordered_ids)))
    open_letter = exists().where(and_(dead_letters.c.job_run_id == r.job_run_id, dead_letters.c.resolved_at.is_(None)))
    active_workflow = exists().where(
        and_(
            workflow_runs.c.workflow_run_id == r.workflow_run_id,
            workflow_runs.c.status.in_(("CREATED", "SCHEDULED", "DISPATCHED", "RUNNING")),
        )
    )
    retry = job_runs.alias("retry")
    open_retry = exists().where(and_(retry.c.retry_of == r.job_run_id, retry.c.status.not_in(terminal)))
    clauses = [
        r.tenant_id == tenant_id,
        r.status.in_(terminal),
        r.ended_at < codec.to_us(ended_before),
        ~busy_event,
        ~open_letter,
        ~active_workflow,
        ~open_retry,  # a retry still to finish names it as its source (its lineage, its pinned version)
    ]
    if scope.job_classes is not None:
        clauses.append(r.job_class.in_(scope.job_classes))
    if scope.except_classes:
        clauses.append(r.job_class.not_in(scope.except_classes))
    if scope.letters_resolved_before is not None:
        recent = exists().where(
            and_(
                dead_letters.c.job_run_id == r.job_run_id,
                dead_letters.c.resolved_at >= codec.to_us(scope.letters_resolved_before),
            )
        )
        clauses.append(~recent)
    return and_(*clauses)


def runs_retirable_count(
    conn: Connection, tenant_id: str, ended_before: datetime, scope: RetireScope, *, ordered_ids: bool
) -> int:
    from jobgate.store.tables import job_runs

    where = _retirable(conn, tenant_id, ended_before, scope, ordered_ids=ordered_ids)
    return int(conn.execute(select(func.count()).select_from(job_runs).where(where)).scalar_one())


def runs_retire(
    conn: Connection, tenant_id: str, ended_before: datetime, limit: int, scope: RetireScope, *, ordered_ids: bool
) -> list[str]:
    """Delete up to ``limit`` runs ``_retirable`` names, with their transitions, resolved dead
    letters, licence slots and delivered events."""
    from sqlalchemy import delete

    from jobgate.store.tables import dead_letters, job_runs, licence_slots, run_transitions

    r = job_runs.c
    where = _retirable(conn, tenant_id, ended_before, scope, ordered_ids=ordered_ids)
    ids = [row[0] for row in conn.execute(select(r.job_run_id).where(where).limit(limit))]
    if not ids:
        return []
    conn.execute(delete(run_transitions).where(run_transitions.c.job_run_id.in_(ids)))
    conn.execute(delete(dead_letters).where(dead_letters.c.job_run_id.in_(ids)))
    conn.execute(delete(licence_slots).where(licence_slots.c.job_run_id.in_(ids)))
    conn.execute(delete(outbox).where(outbox.c.job_run_id.in_(ids)))
    conn.execute(delete(job_runs).where(r.job_run_id.in_(ids)))
    return ids
