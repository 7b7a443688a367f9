"""Definition versions, their lifecycle heads, and configuration snapshots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, RowMapping, bindparam, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from jobgate.core.models import ConfigSnapshot, DefinitionStatus
from jobgate.store import codec
from jobgate.store.base import DefinitionPut, DefinitionPutResult, StoredDefinition
from jobgate.store.sql import driver
from jobgate.store.tables import config_snapshots, definition_approvals, definition_heads, definitions

D = definitions.c
H = definition_heads.c


def _stored(r: Mapping[str, Any] | RowMapping, head_version: int, status: str) -> StoredDefinition:
    return StoredDefinition(
        tenant_id=r["tenant_id"],
        job_definition_id=r["job_definition_id"],
        version=r["version"],
        digest=r["digest"],
        content=codec.loads(r["content"]),
        job_code=r["job_code"],
        job_class=r["job_class"],
        status=DefinitionStatus(status),
        is_current=r["version"] == head_version,
        source=r["source"],
        created_at=codec.from_us(r["created_at"]),
        applied_by=r["applied_by"],
        applied_lineage=() if r["applied_lineage"] is None else tuple(codec.loads(r["applied_lineage"])),
        content_text=r["content"] if isinstance(r["content"], str) else None,
    )


def _approved_now(conn: Connection, p: DefinitionPut, version: int) -> bool:
    """Whether ``version`` of the definition has an approval not revoked."""
    a = definition_approvals.c
    current = select(D.digest).where(
        D.tenant_id == p.tenant_id, D.job_definition_id == p.job_definition_id, D.version == version
    )
    q = select(a.approval_id).where(
        a.tenant_id == p.tenant_id,
        a.job_definition_id == p.job_definition_id,
        a.digest == current.scalar_subquery(),
        a.revoked_at.is_(None),
    )
    return conn.execute(q.limit(1)).first() is not None


def definition_put(conn: Connection, p: DefinitionPut) -> DefinitionPutResult:
    """Store ``p`` as a new version unless the current version has the same digest.

    Re-applying an older digest makes no new version: a digest is stored once per definition, so
    the head points back at the version that has it (``created`` False). The status from the
    file becomes the definition's lifecycle status.
    """
    head = conn.execute(
        select(H.current_version, H.status).where(
            H.tenant_id == p.tenant_id, H.job_definition_id == p.job_definition_id
        )
    ).first()
    now = codec.to_us(p.now)
    if head is not None:
        current = conn.execute(
            select(definitions).where(
                D.tenant_id == p.tenant_id,
                D.job_definition_id == p.job_definition_id,
                D.version == head.current_version,
            )
        ).first()
        if current is not None and current.digest == p.digest:
            stored_signature = codec.loads(current.content).get("signature")
            if stored_signature != p.content.get("signature"):
                # Re-signed (a key rotation): the same content, so the same version and digest
                # (approvals stand), with the new signature kept for the next checks.
                conn.execute(
                    update(definitions)
                    .where(
                        D.tenant_id == p.tenant_id,
                        D.job_definition_id == p.job_definition_id,
                        D.version == current.version,
                    )
                    .values(content=codec.dumps(dict(p.content)))
                )
                current = conn.execute(
                    select(definitions).where(
                        D.tenant_id == p.tenant_id,
                        D.job_definition_id == p.job_definition_id,
                        D.version == current.version,
                    )
                ).first()
                assert current is not None
            if head.status != p.status.value:
                conn.execute(
                    update(definition_heads)
                    .where(H.tenant_id == p.tenant_id, H.job_definition_id == p.job_definition_id)
                    .values(status=p.status.value, updated_at=now)
                )
            return DefinitionPutResult(_stored(current._mapping, head.current_version, p.status.value), created=False)
    version = 1 + (
        conn.execute(
            select(func.coalesce(func.max(D.version), 0)).where(
                D.tenant_id == p.tenant_id, D.job_definition_id == p.job_definition_id
            )
        ).scalar_one()
    )
    same_digest = conn.execute(
        select(D.version).where(
            D.tenant_id == p.tenant_id, D.job_definition_id == p.job_definition_id, D.digest == p.digest
        )
    ).first()
    if same_digest is not None and not p.revert and head is not None and _approved_now(conn, p, head.current_version):
        # An older version's content where no roll back was asked for (a process loading a stale
        # folder at start-up) does not displace an approved current version, nor its status. An
        # unapproved one (an edit nobody approved, then the file restored) it does: nothing
        # approved is rolled back (found by a regression review: the definition stayed stuck).
        stored = definition_get(conn, p.tenant_id, p.job_definition_id, head.current_version)
        assert stored is not None
        return DefinitionPutResult(stored, created=False, older=same_digest.version)
    if same_digest is not None:
        # Reverting to content stored before: point the head back at that version.
        version = same_digest.version
    else:
        conn.execute(
            definitions.insert().values(
                tenant_id=p.tenant_id,
                job_definition_id=p.job_definition_id,
                version=version,
                digest=p.digest,
                job_code=p.job_code,
                job_class=p.job_class,
                content=codec.dumps(p.content),
                source=p.source,
                created_at=now,
                applied_by=p.applied_by,
                applied_lineage=codec.dumps(list(p.applied_lineage)) if p.applied_lineage else None,
            )
        )
    if head is None:
        conn.execute(
            definition_heads.insert().values(
                tenant_id=p.tenant_id,
                job_definition_id=p.job_definition_id,
                current_version=version,
                status=p.status.value,
                updated_at=now,
            )
        )
    else:
        conn.execute(
            update(definition_heads)
            .where(H.tenant_id == p.tenant_id, H.job_definition_id == p.job_definition_id)
            .values(current_version=version, status=p.status.value, updated_at=now)
        )
    stored = definition_get(conn, p.tenant_id, p.job_definition_id, version)
    assert stored is not None
    return DefinitionPutResult(stored, created=same_digest is None, reverted=same_digest is not None)


def definition_get(
    conn: Connection, tenant_id: str, job_definition_id: str, version: int | None = None
) -> StoredDefinition | None:
    """The current version of a definition (or the one named), with its head's status; one
    statement (every submission reads one)."""
    if version is None:
        return current_of(driver.returning(conn, *current_query(tenant_id, job_definition_id)))
    key = {"tenant": tenant_id, "job": job_definition_id, "version": version}
    return current_of(driver.returning(conn, _PINNED, key))


def current_query(tenant_id: str, job_definition_id: str) -> tuple[Any, dict[str, Any]]:
    """The statement reading a definition's current version with its head, and its values."""
    return _CURRENT, {"tenant": tenant_id, "job": job_definition_id}


def current_of(rows: Sequence[Mapping[str, Any]]) -> StoredDefinition | None:
    """What ``current_query`` (or the pinned version's statement) returned, as a definition."""
    if not rows:
        return None
    row = rows[0]
    return _stored(row, int(row["head_version"]), row["head_status"])


# Built once (``driver.first``): a version with its head's current version and status.
_WITH_HEAD = select(definitions, H.current_version.label("head_version"), H.status.label("head_status")).where(
    D.tenant_id == bindparam("tenant"), D.job_definition_id == bindparam("job")
)
_SAME_DEFINITION = (H.tenant_id == D.tenant_id) & (H.job_definition_id == D.job_definition_id)
_CURRENT = driver.planned_once(
    _WITH_HEAD.join_from(definitions, definition_heads, _SAME_DEFINITION & (H.current_version == D.version))
)
_PINNED = _WITH_HEAD.join_from(definitions, definition_heads, _SAME_DEFINITION).where(D.version == bindparam("version"))


def definitions_list(conn: Connection, tenant_id: str | None) -> list[StoredDefinition]:
    """The current version of every definition of ``tenant_id`` (None: of every tenant, for a
    worker probing what it can run)."""
    q = select(definitions, H.status, H.current_version).join(
        definition_heads,
        (H.tenant_id == D.tenant_id) & (H.job_definition_id == D.job_definition_id) & (H.current_version == D.version),
    )
    if tenant_id is not None:
        q = q.where(D.tenant_id == tenant_id)
    q = q.order_by(D.tenant_id, D.job_definition_id)
    return [_stored(r._mapping, r.current_version, r.status) for r in conn.execute(q)]


def definition_versions(conn: Connection, tenant_id: str, job_definition_id: str) -> list[StoredDefinition]:
    head = conn.execute(
        select(H.current_version, H.status).where(H.tenant_id == tenant_id, H.job_definition_id == job_definition_id)
    ).first()
    if head is None:
        return []
    q = (
        select(definitions)
        .where(D.tenant_id == tenant_id, D.job_definition_id == job_definition_id)
        .order_by(D.version)
    )
    return [_stored(r._mapping, head.current_version, head.status) for r in conn.execute(q)]


def definition_set_status(
    conn: Connection, tenant_id: str, job_definition_id: str, status: DefinitionStatus, now_us: int
) -> bool:
    stmt = (
        update(definition_heads)
        .where(H.tenant_id == tenant_id, H.job_definition_id == job_definition_id)
        .values(status=status.value, updated_at=now_us)
    )
    return conn.execute(stmt).rowcount == 1


_SNAPSHOT_COLUMNS = ("config_snapshot_id", "tenant_id", "profile", "config_digest", "content", "created_at")


def snapshot_put(conn: Connection, s: ConfigSnapshot, now_us: int) -> bool:
    """Insert the snapshot unless it exists: snapshots are immutable and keyed by their digest,
    so two concurrent submissions binding the same one both succeed and store it once. True: this
    call stored it."""
    row = {
        "config_snapshot_id": s.config_snapshot_id,
        "tenant_id": s.tenant_id,
        "profile": s.profile,
        "config_digest": s.config_digest,
        "content": codec.dumps(s.content),
        "created_at": now_us,
    }
    return bool(driver.returning(conn, _SNAPSHOT_PUT[conn.dialect.name], row))


_SNAPSHOT_PUT = {
    name: insert(config_snapshots)
    .values({c: bindparam(c) for c in _SNAPSHOT_COLUMNS})
    .on_conflict_do_nothing()
    .returning(config_snapshots.c.config_snapshot_id)
    for name, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


def snapshot_get(conn: Connection, config_snapshot_id: str) -> ConfigSnapshot | None:
    row = conn.execute(
        select(config_snapshots).where(config_snapshots.c.config_snapshot_id == config_snapshot_id)
    ).first()
    if row is None:
        return None
    return ConfigSnapshot(
        row.config_snapshot_id, row.config_digest, row.profile, codec.loads(row.content), row.tenant_id
    )


def definitions_mentioning(conn: Connection, key: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(tenant, digest, content) of every stored version whose content has the JSON key ``key``
    (matched as text first, so versions without it are never decoded)."""
    rows = conn.execute(select(D.tenant_id, D.digest, D.content).where(D.content.contains(f'"{key}"', autoescape=True)))
    out: list[tuple[str, str, dict[str, Any]]] = []
    for tenant, digest, content in rows:
        doc = codec.loads(content)
        if isinstance(doc, dict) and key in doc:
            out.append((tenant, digest, doc))
    return out


def definitions_fingerprint(conn: Connection) -> tuple[int, int]:
    """How many versions are stored and when the last was: changes whenever a version is added."""
    count, latest = conn.execute(select(func.count(), func.max(D.created_at))).one()
    return int(count), int(latest or 0)
