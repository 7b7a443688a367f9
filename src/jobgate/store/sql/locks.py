"""Named locks with fencing tokens: leadership (scheduler, rescuer, maintenance loops) and
single-flight jobs. A lock expires unless renewed; a release names the token it holds."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from jobgate.core.records import LockInfo
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.sql.predicates import starts_with
from jobgate.store.tables import locks

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
        taken = driver.insert_rows(conn, locks, _LOCK_COLUMNS, [new], suffix="ON CONFLICT DO NOTHING RETURNING 1")
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
    rows = driver.rows(conn, _LOCK_STATE, {"name": name})
    return bool(rows) and rows[0][0] == owner and rows[0][1] == token and rows[0][2] > now_us


def lock_get(conn: Connection, name: str) -> LockInfo | None:
    row = conn.execute(select(locks).where(locks.c.name == name)).first()
    return None if row is None else _lock_info(row)


def locks_list(conn: Connection, prefix: str = "") -> list[LockInfo]:
    q = select(locks).order_by(locks.c.name)
    if prefix:
        q = q.where(starts_with(locks.c.name, prefix))
    return [_lock_info(r) for r in conn.execute(q)]


def _lock_info(r: Any) -> LockInfo:
    return LockInfo(r.name, r.owner, int(r.token), codec.from_us(r.acquired_at), codec.from_us(r.expires_at))


def lock_release(conn: Connection, name: str, owner: str, token: int) -> None:
    conn.execute(
        update(locks).where(locks.c.name == name, locks.c.owner == owner, locks.c.token == token).values(expires_at=0)
    )
