"""Safe mode per tenant: activations and deactivations, each a row that is never rewritten
except to close it, so the table is both the current state and its history."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, RowMapping, bindparam, or_, select, update

from jobgate.core.records import SafeModePeriod
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.tables import safe_mode_periods

P = safe_mode_periods.c


def _from_row(r: Mapping[str, Any] | RowMapping) -> SafeModePeriod:
    return SafeModePeriod(
        r["tenant_id"],
        int(r["activation"]),
        codec.from_us(r["activated_at"]),
        r["activated_by"],
        r["reason"],
        None if r["deactivated_at"] is None else codec.from_us(r["deactivated_at"]),
        r["deactivated_by"],
        r["deactivation_reason"],
        {} if r["actions"] is None else dict(codec.loads(r["actions"])),
    )


# Built once: every submission reads it, before and under the write lock (``driver.first``).
_CURRENT = driver.planned_once(
    select(safe_mode_periods).where(P.tenant_id == bindparam("tenant")).order_by(P.activation.desc()).limit(1)
)


def current(conn: Connection, tenant_id: str) -> SafeModePeriod | None:
    """The tenant's latest period (open: safe mode is on), or None if it was never activated."""
    return current_of(driver.returning(conn, *current_query(tenant_id)))


def current_query(tenant_id: str) -> tuple[Any, dict[str, Any]]:
    """The statement reading the tenant's latest period, and its values."""
    return _CURRENT, {"tenant": tenant_id}


def current_of(rows: Sequence[Mapping[str, Any]]) -> SafeModePeriod | None:
    """What ``current_query`` returned, as a period."""
    return _from_row(rows[0]) if rows else None


_OPEN_COLUMNS = ("tenant_id", "activation", "activated_at", "activated_by", "reason", "actions")


def activate(
    conn: Connection, tenant_id: str, actor: str, reason: str, now: datetime, actions: dict[str, Any] | None = None
) -> SafeModePeriod | None:
    """Open a new period; None if one is open already. Two concurrent activations race for the
    same ``activation`` number: the primary key lets one in."""
    latest = current(conn, tenant_id)
    if latest is not None and latest.active:
        return None
    number = 1 if latest is None else latest.activation + 1
    row = (tenant_id, number, codec.to_us(now), actor, reason, codec.dumps(actions or {}))
    if not driver.insert_rows(
        conn, safe_mode_periods, _OPEN_COLUMNS, [row], suffix="ON CONFLICT DO NOTHING RETURNING 1"
    ):
        return None
    return SafeModePeriod(tenant_id, number, now, actor, reason, actions=dict(actions or {}))


def deactivate(conn: Connection, tenant_id: str, actor: str, reason: str, now: datetime) -> SafeModePeriod | None:
    """Close the open period; None if safe mode is off."""
    latest = current(conn, tenant_id)
    if latest is None or not latest.active:
        return None
    stmt = (
        update(safe_mode_periods)
        .where(P.tenant_id == tenant_id, P.activation == latest.activation, P.deactivated_at.is_(None))
        .values(deactivated_at=codec.to_us(now), deactivated_by=actor, deactivation_reason=reason)
    )
    if not conn.execute(stmt).rowcount:
        return None
    return SafeModePeriod(
        tenant_id,
        latest.activation,
        latest.activated_at,
        latest.activated_by,
        latest.reason,
        now,
        actor,
        reason,
        latest.actions,
    )


def periods(
    conn: Connection, tenant_id: str, *, ending_after: datetime | None = None, limit: int = 1000
) -> list[SafeModePeriod]:
    """The tenant's periods, oldest first; with ``ending_after``, only those open or closed after it."""
    q = select(safe_mode_periods).where(P.tenant_id == tenant_id)
    if ending_after is not None:
        q = q.where(or_(P.deactivated_at.is_(None), P.deactivated_at > codec.to_us(ending_after)))
    newest = q.order_by(P.activation.desc()).limit(limit).subquery()
    rows = conn.execute(select(newest).order_by(newest.c.activation)).all()
    return [_from_row(r._mapping) for r in rows]
