"""The transactional outbox: events written with the changes that cause them, delivered in order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ColumnElement, Connection, bindparam, func, select, update

from jobgate.core.events import Event
from jobgate.core.models import OutboxEvent
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.tables import outbox, outbox_cursors

_CURSOR = "default"


def _delivered_through(conn: Connection) -> int:
    row = conn.execute(select(outbox_cursors.c.delivered_through).where(outbox_cursors.c.name == _CURSOR)).first()
    return 0 if row is None else int(row[0])


def undelivered(conn: Connection, ordered_ids: bool) -> ColumnElement[bool]:
    if ordered_ids:
        return outbox.c.id > _delivered_through(conn)
    return outbox.c.delivered_at.is_(None)


def outbox_pending(conn: Connection, limit: int, *, ordered_ids: bool) -> list[OutboxEvent]:
    """Undelivered events, oldest first: per-run order is insertion order.

    ``ordered_ids``: ids become visible in increasing order (one writer at a time), so
    "undelivered" is "above the cursor". Otherwise each delivered row is marked.
    """
    if ordered_ids:
        found = driver.rows(conn, _PENDING_ABOVE, {"through": _delivered_through(conn), "limit": limit})
    else:
        found = driver.rows(conn, _PENDING_UNMARKED, {"limit": limit})
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
        driver.run(conn, _MARK_DELIVERED, {"ids": list(ids[start : start + 5000]), "now": now_us})


# One array parameter (``= ANY``): the statement is the same text for any number of ids, where
# an ``IN`` list was compiled by SQLAlchemy and parsed by psycopg afresh for each batch.
_MARK_DELIVERED = (
    update(outbox)
    .where(outbox.c.id == func.any(bindparam("ids", type_=ARRAY(BigInteger))))
    .values(delivered_at=bindparam("now"))
)


def outbox_backlog(conn: Connection, *, ordered_ids: bool) -> int:
    q = select(func.count()).select_from(outbox)
    q = q.where(undelivered(conn, ordered_ids))
    return int(conn.execute(q).scalar_one())


def outbox_summary(conn: Connection, tenant_id: str | None, *, ordered_ids: bool) -> tuple[int, datetime | None]:
    """Undelivered events (of ``tenant_id``, or all) and when the oldest was written."""
    q = select(func.count(), func.min(outbox.c.created_at)).where(undelivered(conn, ordered_ids))
    if tenant_id is not None:
        q = q.where(outbox.c.tenant_id == tenant_id)
    count, oldest = conn.execute(q).one()
    return int(count), None if oldest is None else codec.from_us(oldest)


OUTBOX_COLUMNS = ("job_run_id", "tenant_id", "event_type", "payload", "created_at")


def event_rows(run_id: str | None, tenant: str, items: Sequence[Event], at: datetime) -> list[tuple[Any, ...]]:
    now = codec.to_us(at)
    return [(run_id, tenant, kind.value, codec.dumps(body), now) for kind, body in items]


def outbox_append(conn: Connection, items: Sequence[tuple[str | None, str, Event]], now: int) -> None:
    at = codec.from_us(now)
    rows = [row for rid, tenant, e in items for row in event_rows(rid, tenant, [e], at)]
    driver.insert_rows(conn, outbox, OUTBOX_COLUMNS, rows)
