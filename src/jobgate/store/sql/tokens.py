"""API token rows: created, looked up by id, listed per tenant, revoked."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from jobgate.core.records import StoredToken
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.tables import api_tokens, ended_sessions

T = api_tokens.c


def _from_row(r: Mapping[Any, Any]) -> StoredToken:
    return StoredToken(
        r["token_id"],
        r["tenant_id"],
        r["role"],
        None if r["jobs"] is None else tuple(codec.loads(r["jobs"])),
        r["label"],
        r["secret_hash"],
        r["created_by"],
        codec.from_us(r["created_at"]),
        codec.opt_dt(r["expires_at"]),
        codec.opt_dt(r["revoked_at"]),
        r["revoked_by"],
        r["principal"],
        () if r["minted_by"] is None else tuple(codec.loads(r["minted_by"])),
    )


def token_put(conn: Connection, t: StoredToken) -> None:
    conn.execute(
        api_tokens.insert().values(
            token_id=t.token_id,
            tenant_id=t.tenant_id,
            role=t.role,
            jobs=None if t.jobs is None else codec.dumps(list(t.jobs)),
            label=t.label,
            secret_hash=t.secret_hash,
            created_by=t.created_by,
            created_at=codec.to_us(t.created_at),
            expires_at=None if t.expires_at is None else codec.to_us(t.expires_at),
            principal=t.principal,
            minted_by=codec.dumps(list(t.minted_by)) if t.minted_by else None,
        )
    )


def token_get(conn: Connection, token_id: str, *, lock: bool = False) -> StoredToken | None:
    """A token by id: every authenticated request asks, so the statement is built once and
    run straight through the driver (``driver.first``).

    ``lock`` (a write transaction about to act on the token's authority, as minting does):
    PostgreSQL keeps the row from changing until this transaction ends, and a revocation
    already changing it is waited for and its outcome read. SQLite's write transactions do not
    overlap: the row read is the row as it stays."""
    locked = lock and conn.dialect.name == "postgresql"
    row = driver.first(conn, _BY_ID_LOCKED if locked else _BY_ID, {"token_id": token_id})
    return None if row is None else _from_row(row)


_BY_ID = select(api_tokens).where(T.token_id == bindparam("token_id"))
_BY_ID_LOCKED = _BY_ID.with_for_update(read=True)


def tokens_list(conn: Connection, tenant_id: str | None) -> list[StoredToken]:
    q = select(api_tokens).order_by(T.created_at)
    if tenant_id is not None:
        q = q.where(T.tenant_id == tenant_id)
    return [_from_row(r) for r in conn.execute(q).mappings()]


def tokens_exist(conn: Connection) -> bool:
    return conn.execute(select(T.token_id).limit(1)).first() is not None


def token_revoke(conn: Connection, tenant_id: str, token_id: str, actor: str, now: datetime) -> bool:
    stmt = (
        update(api_tokens)
        .where(T.tenant_id == tenant_id, T.token_id == token_id, T.revoked_at.is_(None))
        .values(revoked_at=codec.to_us(now), revoked_by=actor)
    )
    return bool(conn.execute(stmt).rowcount)


def session_end(conn: Connection, tenant_id: str, session_id: str, now: datetime, expires: datetime) -> None:
    """Name a console session as ended (``identity.sessions``); the rows of sessions that would
    have expired by now go, so the table holds only what a cookie could still be presented for."""
    conn.execute(delete(ended_sessions).where(ended_sessions.c.expires_at < codec.to_us(now)))
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    values = {
        "session_id": session_id,
        "tenant_id": tenant_id,
        "ended_at": codec.to_us(now),
        "expires_at": codec.to_us(expires),
    }
    conn.execute(insert(ended_sessions).values(**values).on_conflict_do_nothing())


def session_ended(conn: Connection, session_id: str) -> bool:
    q = select(ended_sessions.c.session_id).where(ended_sessions.c.session_id == session_id)
    return conn.execute(q).first() is not None
