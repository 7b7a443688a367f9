"""SQL of the pack registry (``core.packs``): packs by (tenant, id, version), blobs by digest.

Queries, each scoped to one tenant by its key (and on PostgreSQL by row-level security too):

- ``pack_get``: one pack by identity, for the conflict check before any write;
- ``pack_insert`` / ``blob_insert``: ``INSERT ... ON CONFLICT DO NOTHING``, so two writers of
  the same identity cannot both store it, and a blob shared by packs is stored once;
- ``packs_list``: a tenant's packs, newest identity order;
- ``snapshot``: every pack and every blob of a tenant in ONE statement (``UNION ALL``), so an
  export is one consistent snapshot on both backends whatever the transaction's isolation
  level: a statement reads one snapshot on PostgreSQL, and a SQLite read transaction does too.
  Blobs are only inserted with a pack and never deleted, so a tenant's blobs are exactly its
  packs' blobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, literal, select
from sqlalchemy.dialects import postgresql, sqlite

from jobgate.core.canonical import canonical_json
from jobgate.core.encoding import from_us, to_us
from jobgate.core.packs import PackRecord, PackRef
from jobgate.store.tables import pack_blobs, packs

P = packs.c
B = pack_blobs.c


@dataclass(frozen=True)
class PackSnapshot:
    """A tenant's packs and the blobs they name, read in one statement."""

    packs: list[PackRecord]
    blobs: dict[str, bytes]  # digest -> content


def _record(r: Any) -> PackRecord:
    return PackRecord(
        r.tenant_id,
        PackRef(r.pack_id, r.version),
        r.digest,
        json.loads(r.manifest),
        r.origin,
        from_us(r.created_at),
        r.created_by,
    )


def _insert(conn: Connection, table: Any) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()


def pack_get(conn: Connection, tenant_id: str, ref: PackRef) -> PackRecord | None:
    q = select(packs).where(P.tenant_id == tenant_id, P.pack_id == ref.pack_id, P.version == ref.version)
    row = conn.execute(q).first()
    return None if row is None else _record(row)


def pack_insert(conn: Connection, record: PackRecord) -> bool:
    """True when this call stored it; False when the identity was there already."""
    values = {
        "tenant_id": record.tenant_id,
        "pack_id": record.ref.pack_id,
        "version": record.ref.version,
        "digest": record.digest,
        "manifest": canonical_json(record.manifest).decode("utf-8"),
        "origin": record.origin,
        "created_at": to_us(record.created_at),
        "created_by": record.created_by,
    }
    # RETURNING, not rowcount: a driver in pipeline mode reports -1 for every statement.
    return conn.execute(_insert(conn, packs).values(**values).returning(P.pack_id)).first() is not None


def blob_insert(conn: Connection, tenant_id: str, digest: str, content: bytes, now: datetime) -> None:
    values = {"tenant_id": tenant_id, "digest": digest, "content": content.decode("utf-8"), "created_at": to_us(now)}
    conn.execute(_insert(conn, pack_blobs).values(**values))


def packs_list(conn: Connection, tenant_id: str) -> list[PackRecord]:
    q = select(packs).where(P.tenant_id == tenant_id).order_by(P.pack_id, P.created_at, P.version)
    return [_record(r) for r in conn.execute(q)]


def snapshot(conn: Connection, tenant_id: str) -> PackSnapshot:
    """Every pack and blob of ``tenant_id``, from one statement (one snapshot)."""
    q_packs = select(
        literal("pack").label("kind"), P.tenant_id, P.pack_id, P.version, P.digest, P.manifest, P.origin,
        P.created_at, P.created_by,
    ).where(P.tenant_id == tenant_id)  # fmt: skip
    q_blobs = select(
        literal("blob"),
        B.tenant_id,
        B.digest,
        B.digest,
        B.digest,
        B.content,
        B.tenant_id,
        B.created_at,
        B.tenant_id,
    ).where(B.tenant_id == tenant_id)  # fmt: skip: a blob in the pack row's columns, its content as manifest
    found: list[PackRecord] = []
    blobs: dict[str, bytes] = {}
    for r in conn.execute(q_packs.union_all(q_blobs)):
        if r.kind == "blob":
            blobs[r.digest] = r.manifest.encode("utf-8")
        else:
            found.append(_record(r))
    found.sort(key=lambda p: (p.ref.pack_id, p.ref.version))
    return PackSnapshot(found, blobs)


class PackRows:
    """A transaction's pack registry (``StoreTx.packs``)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def get(self, tenant_id: str, ref: PackRef) -> PackRecord | None:
        return pack_get(self._conn, tenant_id, ref)

    def put(self, record: PackRecord, blobs: dict[str, bytes]) -> bool:
        """Store the pack and its blobs; False (and nothing stored) when the identity exists."""
        if not pack_insert(self._conn, record):
            return False
        for digest, content in sorted(blobs.items()):
            blob_insert(self._conn, record.tenant_id, digest, content, record.created_at)
        return True

    def of(self, tenant_id: str) -> list[PackRecord]:
        return packs_list(self._conn, tenant_id)

    def snapshot(self, tenant_id: str) -> PackSnapshot:
        return snapshot(self._conn, tenant_id)
