"""Records inserted whole, with a seal computed for them, and dated before the audit log (or
before their own tenant's log) to escape the rule that their making has an audit entry: found
by a regression review, on both backends (PostgreSQL with row security in force, as deployed)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, create_engine, text
from world import admin_url

from jobgate.core import seals
from jobgate.service import audit, tokens
from jobgate.service.engine import Engine

SECOND = timedelta(seconds=1)


def _as_owner(url: str, edit: Callable[[Connection], None]) -> None:
    """``edit`` as the database's owner (past row security): what a forger with access writes."""
    eng = create_engine(admin_url(url).replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with eng.begin() as conn:
            if url.startswith("postgresql"):
                conn.execute(text("SELECT set_config('search_path', :p, true)"), {"p": url.split("search_path%3D")[1]})
            edit(conn)
    finally:
        eng.dispose()


def _forge_token(
    token_id: str, tenant: str, created_at: int, *, seal_id: int | None = None, copied_from: str | None = None
) -> Callable[[Connection], None]:
    """A copy of a real token (of ``copied_from``, else of ``tenant``) into ``tenant`` under
    another id and time, with its seal (at ``seal_id`` when given)."""

    def edit(conn: Connection) -> None:
        spec = seals.SPECS["token"]
        source = {"t": copied_from or tenant}
        real = conn.execute(text("SELECT * FROM api_tokens WHERE tenant_id = :t LIMIT 1"), source)
        row: dict[str, Any] = {**real.mappings().one(), "token_id": token_id, "created_at": created_at}
        row["tenant_id"] = tenant
        row.update(role="admin", created_by="root", label="forged")
        conn.execute(text(f"INSERT INTO api_tokens ({', '.join(row)}) VALUES ({', '.join(':' + c for c in row)})"), row)
        parts = seals.row_parts(spec, row)
        with_id = seal_id is not None
        conn.execute(
            text(
                "INSERT INTO record_seals (" + ("id, " if with_id else "") + "tenant_id, kind, record_id, event,"
                " extent, identity, outcome, history, seal, content, sealed_at) VALUES ("
                + (":id, " if with_id else "")
                + ":t, 'token', :r, :e, :x, :i, :o, :h, :s, :c, :at)"
            ),
            {
                "id": seal_id,
                "t": tenant, "r": token_id, "e": seals.SEALED, "x": parts.extent, "i": parts.identity,
                "o": parts.outcome, "h": parts.history, "s": seals.seal_of("token", token_id, seals.SEALED, parts),
                "c": parts.content, "at": created_at,
            },
        )  # fmt: skip

    return edit


def _findings(engine: Engine, tenant: str) -> list[str]:
    audit.seal_pending(engine, engine.clock.now() + 10 * SECOND)  # the leader chains the forged seal
    (report,) = audit.verify_records(engine, [tenant])
    return [f"{f.record_id} {f.detail}" for f in report.findings]


def _us(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)


def test_a_token_dated_before_the_log_began_is_still_held_to_its_entry(engine: Engine, database_url: str) -> None:
    now = engine.clock.now()
    tokens.create(engine, tenant_id="default", role="operator", actor="root", now=now)
    audit.seal_pending(engine, now + SECOND)
    _as_owner(database_url, _forge_token("f0f0f0f0f0f0", "default", _us(now - timedelta(days=900))))
    found = _findings(engine, "default")
    assert any("f0f0f0f0f0f0" in f and "token.created" in f for f in found), found


def test_a_token_dated_before_its_own_tenants_log_is_held_to_its_entry(engine: Engine, database_url: str) -> None:
    """The deployment's log began with tenant default's first entry; acme's began later. A token
    of acme dated between the two is no token from before the log (row security hid the other
    tenant's entries from the check on PostgreSQL, so it passed there)."""
    now = engine.clock.now()
    tokens.create(engine, tenant_id="default", role="operator", actor="root", now=now)
    tokens.create(engine, tenant_id="acme", role="operator", actor="root", now=now + 60 * SECOND)
    audit.seal_pending(engine, now + 61 * SECOND)
    _as_owner(database_url, _forge_token("f1f1f1f1f1f1", "acme", _us(now + 30 * SECOND)))
    found = _findings(engine, "acme")
    assert any("f1f1f1f1f1f1" in f and "token.created" in f for f in found), found


def test_a_backdated_token_is_held_to_its_entry_wherever_its_seal_or_tenant(engine: Engine, database_url: str) -> None:
    """Found by a second regression review: a backdated forged token passed when its seal's id
    lay below every batch (0, negative), or when it was in a tenant of its own (whose first
    batch was the forger's). An opening is never excused for its date."""
    now = engine.clock.now()
    tokens.create(engine, tenant_id="default", role="operator", actor="root", now=now)
    audit.seal_pending(engine, now + SECOND)
    old = _us(now - timedelta(days=900))
    _as_owner(database_url, _forge_token("f2f2f2f2f2f2", "default", old, seal_id=-5))
    _as_owner(database_url, _forge_token("f3f3f3f3f3f3", "evil", old, copied_from="default"))
    found = _findings(engine, "default")
    assert any("f2f2f2f2f2f2" in f for f in found), found
    found = _findings(engine, "evil")
    assert any("f3f3f3f3f3f3" in f and "token.created" in f for f in found), found


def test_a_digest_approved_twice_then_revoked_verifies(engine: Engine) -> None:
    """Found by a regression review: one revocation closing two approvals of the same digest
    named the digest once, and the second closing was reported as one with no audit entry."""
    from helpers import define
    from jobgate.service import approvals

    job = define(engine)  # approved once
    approvals.approve(engine, "default", job, actor="carol")  # and the same digest again
    revoked = approvals.revoke(engine, "default", job, actor="carol", reason="withdrawn")
    assert len(revoked.revoked) == 2
    assert _findings(engine, "default") == []
