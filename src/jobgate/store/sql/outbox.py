"""The transactional outbox and worker registrations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ColumnElement, Connection, bindparam, func, select, update

from jobgate.core.models import OutboxEvent
from jobgate.core.records import LockInfo
from jobgate.store import codec
from jobgate.store.base import WorkerBeat, WorkerInfo
from jobgate.store.sql import fast
from jobgate.store.tables import locks, outbox, outbox_cursors, workers

_CURSOR = "default"


def _delivered_through(conn: Connection) -> int:
    row = conn.execute(select(outbox_cursors.c.delivered_through).where(outbox_cursors.c.name == _CURSOR)).first()
    return 0 if row is None else int(row[0])


def _undelivered(conn: Connection, ordered_ids: bool) -> ColumnElement[bool]:
    if ordered_ids:
        return outbox.c.id > _delivered_through(conn)
    return outbox.c.delivered_at.is_(None)


def outbox_pending(conn: Connection, limit: int, *, ordered_ids: bool) -> list[OutboxEvent]:
    """Undelivered events, oldest first: per-run order is insertion order.

    ``ordered_ids``: ids become visible in increasing order (one writer at a time), so
    "undelivered" is "above the cursor". Otherwise each delivered row is marked.
    """
    if ordered_ids:
        found = fast.rows(conn, _PENDING_ABOVE, {"through": _delivered_through(conn), "limit": limit})
    else:
        found = fast.rows(conn, _PENDING_UNMARKED, {"limit": limit})
    return [codec.outbox_from_tuple(r) for r in found]


# Built once and executed through the driver: the publisher reads every event the workers write.
_PENDING_COLUMNS = (
    outbox.c.id,
    outbox.c.job_run_id,
    outbox.c.tenant_id,
    outbox.c.event_type,
    outbox.c.payload,
    outbox.c.created_at,
)
_PENDING_ABOVE = (
    select(*_PENDING_COLUMNS).where(outbox.c.id > bindparam("through")).order_by(outbox.c.id).limit(bindparam("limit"))
)
_PENDING_UNMARKED = (
    select(*_PENDING_COLUMNS).where(outbox.c.delivered_at.is_(None)).order_by(outbox.c.id).limit(bindparam("limit"))
)


def outbox_mark_delivered(conn: Connection, ids: Sequence[int], now_us: int, *, ordered_ids: bool) -> None:
    if not ids:
        return
    if ordered_ids:
        through = max(ids)
        done = conn.execute(
            update(outbox_cursors)
            .where(outbox_cursors.c.name == _CURSOR, outbox_cursors.c.delivered_through < through)
            .values(delivered_through=through, updated_at=now_us)
        ).rowcount
        if (
            not done
            and conn.execute(select(outbox_cursors.c.name).where(outbox_cursors.c.name == _CURSOR)).first() is None
        ):
            conn.execute(outbox_cursors.insert().values(name=_CURSOR, delivered_through=through, updated_at=now_us))
        return
    for start in range(0, len(ids), 5000):
        fast.run(conn, _MARK_DELIVERED, {"ids": list(ids[start : start + 5000]), "now": now_us})


# One array parameter (``= ANY``): the statement is the same text for any number of ids, where
# an ``IN`` list was compiled by SQLAlchemy and parsed by psycopg afresh for each batch.
_MARK_DELIVERED = (
    update(outbox)
    .where(outbox.c.id == func.any(bindparam("ids", type_=ARRAY(BigInteger))))
    .values(delivered_at=bindparam("now"))
)


def outbox_backlog(conn: Connection, *, ordered_ids: bool) -> int:
    q = select(func.count()).select_from(outbox)
    q = q.where(_undelivered(conn, ordered_ids))
    return int(conn.execute(q).scalar_one())


def outbox_summary(conn: Connection, tenant_id: str | None, *, ordered_ids: bool) -> tuple[int, datetime | None]:
    """Undelivered events (of ``tenant_id``, or all) and when the oldest was written."""
    q = select(func.count(), func.min(outbox.c.created_at)).where(_undelivered(conn, ordered_ids))
    if tenant_id is not None:
        q = q.where(outbox.c.tenant_id == tenant_id)
    count, oldest = conn.execute(q).one()
    return int(count), None if oldest is None else codec.from_us(oldest)


def worker_heartbeat(conn: Connection, b: WorkerBeat) -> None:
    now = codec.to_us(b.now)
    done = conn.execute(
        update(workers).where(workers.c.worker_id == b.worker_id).values(heartbeat_at=now, stopped_at=None)
    ).rowcount
    if not done:
        conn.execute(
            workers.insert().values(
                worker_id=b.worker_id,
                host=b.host,
                pid=b.pid,
                concurrency=b.concurrency,
                queues=codec.dumps(list(b.queues)),
                started_at=now,
                heartbeat_at=now,
            )
        )


def worker_stopped(conn: Connection, worker_id: str, now_us: int) -> None:
    conn.execute(update(workers).where(workers.c.worker_id == worker_id).values(stopped_at=now_us))


def workers_list(conn: Connection) -> list[WorkerInfo]:
    rows = conn.execute(select(workers).order_by(workers.c.heartbeat_at.desc())).mappings()
    return [
        WorkerInfo(
            r["worker_id"],
            r["host"],
            r["pid"],
            r["concurrency"],
            tuple(codec.loads(r["queues"])),
            codec.from_us(r["started_at"]),
            codec.from_us(r["heartbeat_at"]),
            codec.opt_dt(r["stopped_at"]),
        )
        for r in rows
    ]


_LOCK_COLUMNS = ("name", "owner", "token", "acquired_at", "expires_at")


def lock_acquire(conn: Connection, name: str, owner: str, now_us: int, ttl_us: int) -> int | None:
    """Take or renew ``name`` for ``owner``; returns the fencing token, or None if another holds it.

    A new holder gets a larger token than every holder before it, so a former holder that
    wakes up late can be told apart from the current one.
    """
    row = conn.execute(select(locks).where(locks.c.name == name)).first()
    if row is None:
        # Two first takers at once (PostgreSQL): the primary key lets one in, the other is told no.
        new = (name, owner, 1, now_us, now_us + ttl_us)
        taken = fast.insert_rows(conn, locks, _LOCK_COLUMNS, [new], suffix="ON CONFLICT DO NOTHING RETURNING 1")
        return 1 if taken else None
    if row.owner == owner and row.expires_at > now_us:
        conn.execute(
            update(locks).where(locks.c.name == name, locks.c.token == row.token).values(expires_at=now_us + ttl_us)
        )
        return int(row.token)
    if row.expires_at <= now_us:
        token = int(row.token) + 1
        done = conn.execute(
            update(locks)
            .where(locks.c.name == name, locks.c.token == row.token)
            .values(owner=owner, token=token, acquired_at=now_us, expires_at=now_us + ttl_us)
        ).rowcount
        return token if done == 1 else None
    return None


_LOCK_STATE = select(locks.c.owner, locks.c.token, locks.c.expires_at).where(locks.c.name == bindparam("name"))


def lock_holds(conn: Connection, name: str, owner: str, token: int, now_us: int) -> bool:
    rows = fast.rows(conn, _LOCK_STATE, {"name": name})
    return bool(rows) and rows[0][0] == owner and rows[0][1] == token and rows[0][2] > now_us


def lock_get(conn: Connection, name: str) -> LockInfo | None:
    row = conn.execute(select(locks).where(locks.c.name == name)).first()
    return None if row is None else _lock_info(row)


def locks_list(conn: Connection, prefix: str = "") -> list[LockInfo]:
    q = select(locks).order_by(locks.c.name)
    if prefix:
        q = q.where(locks.c.name.startswith(prefix, autoescape=True))
    return [_lock_info(r) for r in conn.execute(q)]


def _lock_info(r: Any) -> LockInfo:
    return LockInfo(r.name, r.owner, int(r.token), codec.from_us(r.acquired_at), codec.from_us(r.expires_at))


def lock_release(conn: Connection, name: str, owner: str, token: int) -> None:
    conn.execute(
        update(locks).where(locks.c.name == name, locks.c.owner == owner, locks.c.token == token).values(expires_at=0)
    )


def _retirable(conn: Connection, tenant_id: str, ended_before: datetime, *, ordered_ids: bool) -> Any:
    """The predicate of the runs retention may delete: finished before ``ended_before``, no event
    undelivered, no open dead letter, not a step of a workflow run still active. One predicate
    for the deletion and for its dry run, so the two agree."""
    from sqlalchemy import and_, exists

    from jobgate.store.tables import dead_letters, job_runs, workflow_runs

    r = job_runs.c
    terminal = ("COMPLETED", "FAILED", "DEAD_LETTERED", "CANCELLED", "ESCALATED")
    busy_event = exists().where(and_(outbox.c.job_run_id == r.job_run_id, _undelivered(conn, ordered_ids)))
    open_letter = exists().where(and_(dead_letters.c.job_run_id == r.job_run_id, dead_letters.c.resolved_at.is_(None)))
    active_workflow = exists().where(
        and_(
            workflow_runs.c.workflow_run_id == r.workflow_run_id,
            workflow_runs.c.status.in_(("CREATED", "SCHEDULED", "DISPATCHED", "RUNNING")),
        )
    )
    return and_(
        r.tenant_id == tenant_id,
        r.status.in_(terminal),
        r.ended_at < codec.to_us(ended_before),
        ~busy_event,
        ~open_letter,
        ~active_workflow,
    )


def runs_retirable_count(conn: Connection, tenant_id: str, ended_before: datetime, *, ordered_ids: bool) -> int:
    from jobgate.store.tables import job_runs

    where = _retirable(conn, tenant_id, ended_before, ordered_ids=ordered_ids)
    return int(conn.execute(select(func.count()).select_from(job_runs).where(where)).scalar_one())


def runs_retire(
    conn: Connection, tenant_id: str, ended_before: datetime, limit: int, *, ordered_ids: bool
) -> list[str]:
    """Delete up to ``limit`` runs ``_retirable`` names, with their transitions, resolved dead
    letters, licence slots and delivered events."""
    from sqlalchemy import delete

    from jobgate.store.tables import dead_letters, job_runs, licence_slots, run_transitions

    r = job_runs.c
    where = _retirable(conn, tenant_id, ended_before, ordered_ids=ordered_ids)
    ids = [row[0] for row in conn.execute(select(r.job_run_id).where(where).limit(limit))]
    if not ids:
        return []
    conn.execute(delete(run_transitions).where(run_transitions.c.job_run_id.in_(ids)))
    conn.execute(delete(dead_letters).where(dead_letters.c.job_run_id.in_(ids)))
    conn.execute(delete(licence_slots).where(licence_slots.c.job_run_id.in_(ids)))
    conn.execute(delete(outbox).where(outbox.c.job_run_id.in_(ids)))
    conn.execute(delete(job_runs).where(r.job_run_id.in_(ids)))
    return ids
