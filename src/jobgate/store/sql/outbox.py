"""The transactional outbox and worker registrations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ColumnElement, Connection, bindparam, func, select, text, tuple_, update

from jobgate.core.models import OutboxEvent
from jobgate.store import codec
from jobgate.store.base import WorkerBeat, WorkerInfo
from jobgate.store.sql import fast
from jobgate.store.tables import locks, outbox, outbox_cursors, workers

_CURSOR = "default"
_K = outbox_cursors.c

# Delivery is a cursor on both backends; what differs is the order events become final in.
#
# SQLite (``ordered_ids``): one writer at a time, so ids become visible in increasing order and
# the cursor is the last id delivered.
#
# PostgreSQL: concurrent transactions commit out of id order, so a cursor over ids alone would
# pass an event whose transaction had not committed yet and never come back for it. Each event
# carries the id of the transaction that wrote it (``xid``, a column default); the publisher
# reads in (xid, id) order and only events of transactions older than the oldest one still
# running (the snapshot's ``xmin``). Nothing can later commit an event that sorts before
# those, so the cursor is the (xid, id) of the last event delivered. A run's own events keep
# their order: the transaction that ends a run starts after the one that started it committed,
# and a later transaction gets a larger id.
_FINISHED = text("(pg_snapshot_xmin(pg_current_snapshot())::text)::bigint")


def _delivered_through(conn: Connection) -> int:
    row = conn.execute(select(_K.delivered_through).where(_K.name == _CURSOR)).first()
    return 0 if row is None else int(row[0])


def _position(conn: Connection) -> tuple[int, int]:
    """PostgreSQL's cursor: the (xid, id) of the last event delivered."""
    row = conn.execute(select(_K.delivered_xid, _K.delivered_through).where(_K.name == _CURSOR)).first()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def _undelivered(conn: Connection, ordered_ids: bool) -> ColumnElement[bool]:
    if ordered_ids:
        return outbox.c.id > _delivered_through(conn)
    xid, through = _position(conn)
    return tuple_(outbox.c.xid, outbox.c.id) > tuple_(xid, through)


def outbox_pending(conn: Connection, limit: int, *, ordered_ids: bool) -> list[OutboxEvent]:
    """Undelivered events in delivery order (a run's in the order they were written)."""
    if ordered_ids:
        found = fast.rows(conn, _PENDING_ABOVE, {"through": _delivered_through(conn), "limit": limit})
    else:
        xid, through = _position(conn)
        found = fast.rows(conn, _PENDING_AFTER, {"xid": xid, "through": through, "limit": limit})
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
_PENDING_AFTER = (
    select(*_PENDING_COLUMNS)
    .where(tuple_(outbox.c.xid, outbox.c.id) > tuple_(bindparam("xid"), bindparam("through")), outbox.c.xid < _FINISHED)
    .order_by(outbox.c.xid, outbox.c.id)
    .limit(bindparam("limit"))
)


def outbox_mark_delivered(conn: Connection, ids: Sequence[int], now_us: int, *, ordered_ids: bool) -> None:
    """Move the cursor past ``ids`` (a prefix of what ``outbox_pending`` returned); never back."""
    if not ids:
        return
    if ordered_ids:
        xid, through = 0, max(ids)
        moved = _K.delivered_through < through
    else:
        last = fast.rows(conn, _LAST_OF, {"ids": list(ids)})
        if not last:
            return  # retired meanwhile: nothing left to pass
        xid, through = int(last[0][0]), int(last[0][1])
        moved = tuple_(_K.delivered_xid, _K.delivered_through) < tuple_(xid, through)
    done = conn.execute(
        update(outbox_cursors)
        .where(_K.name == _CURSOR, moved)
        .values(delivered_xid=xid, delivered_through=through, updated_at=now_us)
    ).rowcount
    if not done and conn.execute(select(_K.name).where(_K.name == _CURSOR)).first() is None:
        row = {"name": _CURSOR, "delivered_xid": xid, "delivered_through": through, "updated_at": now_us}
        conn.execute(outbox_cursors.insert().values(**row))


# The last of a delivered batch in delivery order (one array parameter for any batch size).
_LAST_OF = (
    select(outbox.c.xid, outbox.c.id)
    .where(outbox.c.id == func.any(bindparam("ids", type_=ARRAY(BigInteger))))
    .order_by(outbox.c.xid.desc(), outbox.c.id.desc())
    .limit(1)
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


@dataclass(frozen=True)
class LockInfo:
    name: str
    owner: str
    token: int  # the fencing token: grows with every new holder
    acquired_at: datetime
    expires_at: datetime


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


def runs_retire(
    conn: Connection, tenant_id: str, ended_before: datetime, limit: int, *, ordered_ids: bool
) -> list[str]:
    """Delete up to ``limit`` finished runs of ``tenant_id`` that ended before ``ended_before``,
    with their transitions, resolved dead letters, licence slots and delivered events. A run
    with an event not yet delivered or an open dead letter is kept (its record is still in use),
    and so is a step run of a workflow run still active (its coordinator may not have read it)."""
    from sqlalchemy import and_, delete, exists

    from jobgate.store.tables import dead_letters, job_runs, licence_slots, run_transitions, workflow_runs

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
    q = (
        select(r.job_run_id)
        .where(
            r.tenant_id == tenant_id,
            r.status.in_(terminal),
            r.ended_at < codec.to_us(ended_before),
            ~busy_event,
            ~open_letter,
            ~active_workflow,
        )
        .limit(limit)
    )
    ids = [row[0] for row in conn.execute(q)]
    if not ids:
        return []
    conn.execute(delete(run_transitions).where(run_transitions.c.job_run_id.in_(ids)))
    conn.execute(delete(dead_letters).where(dead_letters.c.job_run_id.in_(ids)))
    conn.execute(delete(licence_slots).where(licence_slots.c.job_run_id.in_(ids)))
    conn.execute(delete(outbox).where(outbox.c.job_run_id.in_(ids)))
    conn.execute(delete(job_runs).where(r.job_run_id.in_(ids)))
    return ids
