"""Which finished runs retention may delete, and their deletion with everything they own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from jobgate.core.models import JobRun
from jobgate.store import codec
from jobgate.store.base import RetiredRun, RetireScope
from jobgate.store.codec import from_us, to_us
from jobgate.store.sql.outbox import undelivered
from jobgate.store.tables import outbox


def _retirable(
    conn: Connection, tenant_id: str, ended_before: datetime, scope: RetireScope, *, ordered_ids: bool
) -> Any:
    """The predicate of the runs retention may delete: finished before ``ended_before``, no event
    undelivered, no open dead letter, not ESCALATED (awaiting review), not a step of a workflow
    run still active, not the source of a retry still to finish, within
    ``scope`` (its job classes; a resolved dead letter old enough). One predicate for the
    deletion and for its dry run, so the two agree."""
    from sqlalchemy import and_, exists

    from jobgate.store.tables import dead_letters, job_runs, workflow_runs

    r = job_runs.c
    # Every ending but ESCALATED, which waits for a person's review (a requeue), as an open dead
    # letter does, and has no dead letter to keep it: retired, the review item vanished (found by
    # a review of retention). A retry awaiting review is not finished either.
    settled = ("COMPLETED", "FAILED", "DEAD_LETTERED", "CANCELLED")
    busy_event = exists().where(and_(outbox.c.job_run_id == r.job_run_id, undelivered(conn, ordered_ids)))
    open_letter = exists().where(and_(dead_letters.c.job_run_id == r.job_run_id, dead_letters.c.resolved_at.is_(None)))
    active_workflow = exists().where(
        and_(
            workflow_runs.c.workflow_run_id == r.workflow_run_id,
            workflow_runs.c.status.in_(("CREATED", "SCHEDULED", "DISPATCHED", "RUNNING")),
        )
    )
    retry = job_runs.alias("retry")
    open_retry = exists().where(and_(retry.c.retry_of == r.job_run_id, retry.c.status.not_in(settled)))
    clauses = [
        r.tenant_id == tenant_id,
        r.status.in_(settled),
        r.ended_at < codec.to_us(ended_before),
        ~busy_event,
        ~open_letter,
        ~active_workflow,
        ~open_retry,  # a retry still to finish names it as its source (its lineage, its pinned version)
    ]
    if scope.anchored_through is not None:
        from jobgate.store.tables import audit_log, record_seals

        last_seq, last_seal = scope.anchored_through
        a, s = audit_log.c, record_seals.c
        later_entry = exists().where(
            and_(a.tenant_id == tenant_id, a.target_type == "run", a.target_id == r.job_run_id, a.seq > last_seq)
        )
        later_seal = exists().where(
            and_(s.tenant_id == tenant_id, s.kind == "run", s.record_id == r.job_run_id, s.id > last_seal)
        )
        clauses += [~later_entry, ~later_seal]  # everything about it under an anchor (found by a review)
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
    conn: Connection,
    tenant_id: str,
    ended_before: datetime,
    limit: int,
    scope: RetireScope,
    *,
    ordered_ids: bool,
    now: datetime,
) -> list[str]:
    """Delete up to ``limit`` runs ``_retirable`` names, with their transitions, resolved dead
    letters, licence slots and delivered events; each remembered as retired ``now``."""
    from sqlalchemy import delete

    from jobgate.store.tables import dead_letters, job_runs, licence_slots, run_transitions

    r = job_runs.c
    where = _retirable(conn, tenant_id, ended_before, scope, ordered_ids=ordered_ids)
    ids = [row[0] for row in conn.execute(select(r.job_run_id).where(where).limit(limit))]
    if not ids:
        return []
    _remember(conn, ids, retired_at=to_us(now))
    conn.execute(delete(run_transitions).where(run_transitions.c.job_run_id.in_(ids)))
    conn.execute(delete(dead_letters).where(dead_letters.c.job_run_id.in_(ids)))
    conn.execute(delete(licence_slots).where(licence_slots.c.job_run_id.in_(ids)))
    conn.execute(delete(outbox).where(outbox.c.job_run_id.in_(ids)))
    conn.execute(delete(job_runs).where(r.job_run_id.in_(ids)))
    return ids


_REMEMBERED = (
    "job_run_id",
    "tenant_id",
    "job_definition_id",
    "idempotency_key",
    "slot",
    "status",
    "created_at",
    "ended_at",
)


def _remember(conn: Connection, ids: Sequence[str], *, retired_at: int) -> None:
    """What made each of these runs its trigger's, kept after their rows go (``retired_runs``)."""
    from sqlalchemy import insert, literal

    from jobgate.store.tables import job_runs, retired_runs

    r = job_runs.c
    chosen = select(*(r[c] for c in _REMEMBERED), literal(retired_at)).where(r.job_run_id.in_(ids))
    conn.execute(insert(retired_runs).from_select([*_REMEMBERED, "retired_at"], chosen))


def retired_holders(conn: Connection, keys: Sequence[str], slots: Sequence[tuple[str, str, str]]) -> list[RetiredRun]:
    """The retired runs holding any of ``keys`` (idempotency keys) or ``slots`` (tenant, job,
    slot): a trigger whose run was retired has had its run. Every submission asks, so a single
    one's two lookups are statements built once (``driver.rows``); a batch asks in one."""
    from sqlalchemy import and_, or_, tuple_

    from jobgate.store.sql import driver
    from jobgate.store.tables import retired_runs

    if len(keys) == 1 and len(slots) <= 1:
        rows = driver.rows(conn, _BY_KEY, {"key": keys[0]})
        if not rows and slots:
            tenant, job, slot = slots[0]
            rows = driver.rows(conn, _BY_SLOT, {"tenant": tenant, "job": job, "slot": slot})
        return [_retired(row) for row in rows]
    t = retired_runs.c
    wanted: list[Any] = []
    if keys:
        wanted.append(t.idempotency_key.in_(list(keys)))
    if slots:
        wanted.append(and_(t.slot.is_not(None), tuple_(t.tenant_id, t.job_definition_id, t.slot).in_(list(slots))))
    if not wanted:
        return []
    return [_retired(tuple(row)) for row in conn.execute(select(*_RETIRED_COLUMNS).where(or_(*wanted)))]


def retired_queries(run: JobRun) -> list[tuple[Any, dict[str, Any]]]:
    """``retired_holders`` of one run as statements that can travel together (PostgreSQL's
    pipeline, ``store.sql.ahead``): by its key and, when it has one, by its slot."""
    queries: list[tuple[Any, dict[str, Any]]] = [(_BY_KEY, {"key": run.idempotency_key})]
    if run.slot is not None:
        queries.append((_BY_SLOT, {"tenant": run.tenant_id, "job": run.job_definition_id, "slot": run.slot}))
    return queries


def retired_from(rows: Sequence[Mapping[str, Any]]) -> list[RetiredRun]:
    """The retired runs of ``retired_queries``' answers (rows as dicts, in select order)."""
    return [_retired(tuple(row.values())) for row in rows]


def match_retired(candidates: Sequence[JobRun], found: Sequence[RetiredRun]) -> dict[str, RetiredRun]:
    """For each candidate whose trigger's run was retired, that run (by key, else by slot),
    keyed by the candidate's idempotency key."""
    by_key = {f.idempotency_key: f for f in found}
    by_slot: dict[tuple[str, str, str | None], RetiredRun] = {
        (f.tenant_id, f.job_definition_id, f.slot): f for f in found if f.slot is not None
    }
    out: dict[str, RetiredRun] = {}
    for c in candidates:
        hit = by_key.get(c.idempotency_key) or by_slot.get((c.tenant_id, c.job_definition_id, c.slot))
        if hit is not None:
            out[c.idempotency_key] = hit
    return out


def retired_of(conn: Connection, tenant_id: str | None, job_run_ids: Sequence[str]) -> list[RetiredRun]:
    """The ``retired_runs`` rows of these runs of ``tenant_id`` (None: of any tenant)."""
    from jobgate.store.tables import retired_runs

    t = retired_runs.c
    out: list[RetiredRun] = []
    for start in range(0, len(job_run_ids), 500):
        chunk = list(job_run_ids[start : start + 500])
        q = select(*_RETIRED_COLUMNS).where(t.job_run_id.in_(chunk))
        if tenant_id is not None:
            q = q.where(t.tenant_id == tenant_id)
        out.extend(_retired(tuple(row)) for row in conn.execute(q))
    return out


def retired_between(
    conn: Connection, tenant_id: str, start: datetime, end: datetime, job_definition_id: str | None
) -> list[RetiredRun]:
    """The runs of ``tenant_id`` created in ``[start, end)`` (of one job, if named) that
    retention deleted, oldest first: what a period's evidence names as gone."""
    from jobgate.store.tables import retired_runs

    t = retired_runs.c
    q = select(*_RETIRED_COLUMNS).where(
        t.tenant_id == tenant_id, t.created_at >= to_us(start), t.created_at < to_us(end)
    )
    if job_definition_id is not None:
        q = q.where(t.job_definition_id == job_definition_id)
    return [_retired(tuple(row)) for row in conn.execute(q.order_by(t.created_at, t.job_run_id))]


def _retired(row: Sequence[Any]) -> RetiredRun:
    job_run_id, tenant_id, job_definition_id, key, slot, status, created_at, ended_at, retired_at = row
    return RetiredRun(
        job_run_id=job_run_id,
        tenant_id=tenant_id,
        job_definition_id=job_definition_id,
        idempotency_key=key,
        slot=slot,
        status=status,
        created_at=from_us(created_at),
        ended_at=None if ended_at is None else from_us(ended_at),
        retired_at=from_us(retired_at),
    )


def _retired_statements() -> tuple[tuple[Any, ...], Any, Any]:
    from sqlalchemy import bindparam

    from jobgate.store.sql import driver
    from jobgate.store.tables import retired_runs

    t = retired_runs.c
    columns = tuple(t[c] for c in (*_REMEMBERED, "retired_at"))
    by_key = select(*columns).where(t.idempotency_key == bindparam("key"))
    by_slot = select(*columns).where(
        t.tenant_id == bindparam("tenant"), t.job_definition_id == bindparam("job"), t.slot == bindparam("slot")
    )
    # Equality on an index's every column: plans the server may keep (``driver.planned_once``).
    return columns, driver.planned_once(by_key), driver.planned_once(by_slot)


_RETIRED_COLUMNS, _BY_KEY, _BY_SLOT = _retired_statements()  # built once: every submission asks
