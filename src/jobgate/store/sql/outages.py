"""Dependency outage markers: one ``locks`` row per dependency, so an outage is reported once
for the cluster however many workers see it.

A marker is *open* while an outage is on (``expires_at`` in the future: the worker that
opened it renews it at every check) and *closed* (``expires_at = 0``) once the dependency is
back. Opening and closing are compare-and-sets on the row's token, so of several workers that
see the same change at once exactly one is told it opened (or closed) the outage, and only
that one writes the event. An open marker whose observer died expires; a worker that sees the
dependency down within a TTL of that takes it over quietly (the outage is the same one,
already reported), keeping when it began. A marker nobody renewed for a whole TTL after it
expired was watched by no one (every worker stopped, or the one that saw the recovery could
not close it): what is down now is a new outage, reported with its own start, so runs that
wait for it are not dead-lettered at once on the strength of an old one.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection, select, update

from jobgate.core.records import LockInfo
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.sql.locks import locks_list
from jobgate.store.tables import locks

OUTAGE_PREFIX = "dependency-outage:"
_COLUMNS = ("name", "owner", "token", "acquired_at", "expires_at")
L = locks.c


def outage_down(conn: Connection, dependency: str, owner: str, now_us: int, ttl_us: int) -> tuple[bool, datetime]:
    """Record that ``owner`` sees ``dependency`` down; returns (this call opened the outage,
    when the outage began)."""
    name = OUTAGE_PREFIX + dependency
    row = conn.execute(select(locks).where(L.name == name)).first()
    if row is None:
        taken = driver.insert_rows(
            conn,
            locks,
            _COLUMNS,
            [(name, owner, 1, now_us, now_us + ttl_us)],
            suffix="ON CONFLICT DO NOTHING RETURNING 1",
        )
        return bool(taken), codec.from_us(now_us)
    same = (L.name == name) & (L.token == row.token)
    abandoned = row.expires_at != 0 and row.expires_at + ttl_us <= now_us
    if row.expires_at == 0 or abandoned:  # closed, or left unwatched for a whole TTL: a new outage
        opened = conn.execute(
            update(locks)
            .where(same, L.expires_at == row.expires_at)
            .values(owner=owner, token=row.token + 1, acquired_at=now_us, expires_at=now_us + ttl_us)
        ).rowcount
        return opened == 1, codec.from_us(now_us)
    if row.owner == owner or row.expires_at <= now_us:  # ours to renew, or its observer stopped renewing
        conn.execute(update(locks).where(same, L.expires_at > 0).values(owner=owner, expires_at=now_us + ttl_us))
    return False, codec.from_us(row.acquired_at)


def outage_up(conn: Connection, dependency: str) -> LockInfo | None:
    """Record that ``dependency`` is up; returns the outage marker if this call closed it."""
    name = OUTAGE_PREFIX + dependency
    row = conn.execute(select(locks).where(L.name == name)).first()
    if row is None or row.expires_at == 0:
        return None
    closed = conn.execute(
        update(locks).where(L.name == name, L.token == row.token, L.expires_at != 0).values(expires_at=0)
    ).rowcount
    if closed != 1:
        return None
    return LockInfo(row.name, row.owner, int(row.token), codec.from_us(row.acquired_at), codec.from_us(row.expires_at))


def outages_open(conn: Connection) -> list[LockInfo]:
    """Open outage markers, each named by its dependency (closed ones stay as rows with
    ``expires_at`` 0 and are left out); one whose ``expires_at`` has passed lost its observer:
    no worker is checking it now."""
    return [
        replace(m, name=m.name.removeprefix(OUTAGE_PREFIX))
        for m in locks_list(conn, OUTAGE_PREFIX)
        if codec.to_us(m.expires_at) != 0
    ]
