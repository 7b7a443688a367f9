"""Governance rows: the audit chain, definition approvals, run requests."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, update

from jobgate.core.audit import GENESIS, AuditEntry, AuditEvent, chain
from jobgate.core.code_identity import CodeIdentity, protected
from jobgate.core.errors import MalformedRecordError
from jobgate.core.records import Anchor, Approval, AuditFilter, RunRequest
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.tables import (
    anchors,
    audit_heads,
    audit_log,
    definition_approvals,
    gate_counters,
    job_runs,
    licence_slots,
    run_requests,
)

A = audit_log.c
N = anchors.c
_AUDIT_COLUMNS = (
    "tenant_id",
    "seq",
    "at",
    "actor",
    "action",
    "target_type",
    "target_id",
    "reason",
    "payload",
    "prev_hash",
    "entry_hash",
)


# ---------------------------------------------------------------------- the audit chain
def audit_append(
    conn: Connection,
    events: Sequence[AuditEvent],
    *,
    lock_rows: bool,
    head_read: Callable[[str], Head | None] = lambda _tenant: None,
) -> list[AuditEntry]:
    """Append ``events`` to their tenants' chains inside the caller's transaction.

    The head row of each chain is locked (``FOR UPDATE`` on PostgreSQL; SQLite's single
    writer serialises anyway) before the next position is taken, so concurrent appends to a
    chain queue up and the chain never forks. The head is updated in the same transaction as
    the entries: both commit, or neither.

    Three statements a tenant (a manual submission appends one entry, inside its own
    transaction): the head, the times entries may not precede, the entries with the head's move.
    """
    out: list[AuditEntry] = []
    by_tenant: dict[str, list[AuditEvent]] = {}
    for e in events:
        by_tenant.setdefault(e.tenant_id, []).append(e)
    for tenant_id, items in sorted(by_tenant.items()):
        seq, head, floors = head_read(tenant_id) or _head_and_floors(conn, tenant_id, lock_rows=lock_rows)
        entries = chain(_in_order(floors, items), seq, head)
        _write_entries(conn, tenant_id, entries)
        out.extend(entries)
    return out


# Built once (``driver``): a manual submission appends an entry in its own transaction.
_HEAD = select(audit_heads.c.seq, audit_heads.c.entry_hash).where(audit_heads.c.tenant_id == bindparam("tenant"))
_HEAD_LOCKED = driver.planned_once(_HEAD.with_for_update())
_HEAD_MOVE = (
    update(audit_heads)
    .where(audit_heads.c.tenant_id == bindparam("tenant"))
    .values(seq=bindparam("seq"), entry_hash=bindparam("hash"))
)
_LAST_WINDOW = select(func.max(N.window_end)).where(N.tenant_id == bindparam("tenant"), N.mode == "batch")
_HEAD_SEQ = select(audit_heads.c.seq).where(audit_heads.c.tenant_id == bindparam("tenant")).scalar_subquery()
_LAST_AT = select(A.at).where(A.tenant_id == bindparam("tenant"), A.seq == _HEAD_SEQ)
# After the lock, in a statement of its own: under READ COMMITTED only a statement that starts
# after the lock is granted sees what the append that held it before committed. The two travel
# together (``driver.returning_each``), and the server starts this one once the lock is held.
_FLOORS = driver.planned_once(select(_LAST_WINDOW.scalar_subquery(), _LAST_AT.scalar_subquery()))
# SQLite: the one writer holds everything already, so the head and the floors are one read.
_HEAD_AND_FLOORS = select(
    audit_heads.c.seq,
    audit_heads.c.entry_hash,
    _LAST_WINDOW.scalar_subquery(),
    select(A.at).where(A.tenant_id == audit_heads.c.tenant_id, A.seq == audit_heads.c.seq).scalar_subquery(),
).where(audit_heads.c.tenant_id == bindparam("tenant"))


Head = tuple[int, str, list[int]]  # the chain's last position and hash, the floors of its next entry


def head_queries(tenant_id: str) -> list[tuple[Any, dict[str, Any]]]:
    """The locked head, then the floors as they stand once it is held (PostgreSQL), as
    statements that can travel with others: a manual submission's run insert carries them."""
    key = {"tenant": tenant_id}
    return [(_HEAD_LOCKED, key), (_FLOORS, key)]


def head_from(head: Sequence[Mapping[str, Any]], floors: Sequence[Mapping[str, Any]]) -> Head | None:
    """``head_queries``' answers as ``_head_and_floors`` returns them; None for a tenant whose
    chain has no head yet (its first append makes it)."""
    return _as_head([(*h.values(), *f.values()) for h in head for f in floors])


def _as_head(found: Sequence[Sequence[Any]]) -> Head | None:
    if not found:
        return None
    ((seq, head_hash, *bounds),) = found
    return int(seq), str(head_hash), [int(b) for b in bounds if b is not None]


def _head_and_floors(conn: Connection, tenant_id: str, *, lock_rows: bool) -> Head:
    """The tenant's head (held until the transaction ends where rows are locked) and the times
    its next entries may not precede: the end of the last anchored window, the last entry's."""
    for attempt in range(2):
        if lock_rows:  # the locked head, then the floors as they stand once it is held
            read = head_from(*driver.returning_each(conn, head_queries(tenant_id)))
        else:
            read = _as_head(driver.rows(conn, _HEAD_AND_FLOORS, {"tenant": tenant_id}))
        if read is not None:
            return read
        if attempt:
            break
        _ensure_head(conn, tenant_id)  # the first entry of the tenant's chain
    raise RuntimeError(f"the audit chain head of {tenant_id!r} is missing after it was made")


def _write_entries(conn: Connection, tenant_id: str, entries: Sequence[AuditEntry]) -> None:
    """The entries and the head's move to the last of them: one statement on PostgreSQL (the
    move a data-modifying ``WITH`` of the insert, owed: ``driver.owe``), two on SQLite."""
    rows = [_row(e) for e in entries]
    last = entries[-1]
    if conn.dialect.name == "postgresql" and len(rows) <= driver.PG_ROWS:
        sql = _append_sql(conn)
        # Nothing is read back: sent with the transaction's next statement, or with its COMMIT
        # (a manual submission's entry is its transaction's last statement).
        values = [last.seq, last.entry_hash, tenant_id, *(list(c) for c in zip(*rows, strict=True))]
        driver.owe(conn, sql, values, write=True)
        return
    driver.insert_rows(conn, audit_log, _AUDIT_COLUMNS, rows)
    driver.run(conn, _HEAD_MOVE, {"tenant": tenant_id, "seq": last.seq, "hash": last.entry_hash})


_append_sqls: list[str] = []


def _append_sql(conn: Connection) -> str:
    if not _append_sqls:
        move = "WITH moved AS (UPDATE audit_heads SET seq = %s, entry_hash = %s WHERE tenant_id = %s) "
        rows = driver.ordered_rows(conn.dialect, audit_log, _AUDIT_COLUMNS)
        _append_sqls.append(driver.planned_once(f"{move}INSERT INTO audit_log ({', '.join(_AUDIT_COLUMNS)}) {rows}"))
    return _append_sqls[0]


def _ensure_head(conn: Connection, tenant_id: str) -> None:
    """The tenant's chain head, at the genesis when the chain has no entry yet."""
    driver.insert_rows(
        conn,
        audit_heads,
        ("tenant_id", "seq", "entry_hash"),
        [(tenant_id, 0, GENESIS)],
        suffix="ON CONFLICT DO NOTHING",
    )


def audit_head_lock(conn: Connection, tenant_id: str, *, lock_rows: bool) -> None:
    """Hold the tenant's chain head until the transaction ends (PostgreSQL; SQLite's single
    writer holds everything already): appends to the chain wait meanwhile."""
    if not lock_rows:
        return
    _ensure_head(conn, tenant_id)
    conn.execute(select(audit_heads.c.seq).where(audit_heads.c.tenant_id == tenant_id).with_for_update())


def _in_order(floors: list[int], items: list[AuditEvent]) -> list[AuditEvent]:
    """The events with their times made non-decreasing along the chain and never before the end
    of the last anchored window: an event whose transaction commits late (its window already
    ended, or anchored) is recorded at the chain's time, not back-dated. So which window holds
    an entry follows from the chain alone, and an anchor once made never misses an entry that
    belongs in it (``evidence.anchors``; the event's own time stays in ``at`` unless it was earlier)."""
    if not floors:
        return items
    floor = max(floors)
    out: list[AuditEvent] = []
    for e in items:
        at_us = max(codec.to_us(e.at), int(floor))
        floor = at_us
        out.append(e if at_us == codec.to_us(e.at) else replace(e, at=codec.from_us(at_us)))
    return out


def _row(e: AuditEntry) -> tuple[Any, ...]:
    ev = e.event
    return (
        ev.tenant_id,
        e.seq,
        codec.to_us(ev.at),
        ev.actor,
        ev.action,
        ev.target_type,
        ev.target_id,
        ev.reason,
        codec.dumps(dict(ev.payload)),
        e.prev_hash,
        e.entry_hash,
    )


def _entry(r: Any) -> AuditEntry:
    """An audit row as an entry; a row no append could have written is named, not a crash."""
    source = f"audit entry {r.seq} of {r.tenant_id}"
    try:
        payload = codec.loads(r.payload)
    except (ValueError, TypeError):
        payload = None
    if not isinstance(payload, dict):
        raise MalformedRecordError("not a JSON object: jobgate did not write it", field="payload", source=source)
    try:
        at, seq = codec.from_us(r.at), int(r.seq)
    except (ValueError, TypeError, OverflowError):
        raise MalformedRecordError("not a time jobgate writes", field="at", source=source) from None
    event = AuditEvent(
        tenant_id=r.tenant_id,
        actor=r.actor,
        action=r.action,
        target_type=r.target_type,
        target_id=r.target_id,
        at=at,
        reason=r.reason,
        payload=payload,
    )
    return AuditEntry(event, seq, r.prev_hash, r.entry_hash)


def audit_list(conn: Connection, f: AuditFilter) -> list[AuditEntry]:
    q = select(audit_log).where(A.tenant_id == f.tenant_id, A.seq > f.after_seq)
    for column, value in (
        (A.actor, f.actor),
        (A.action, f.action),
        (A.target_type, f.target_type),
        (A.target_id, f.target_id),
    ):
        if value is not None:
            q = q.where(column == value)
    if f.at_from is not None:
        q = q.where(A.at >= codec.to_us(f.at_from))
    if f.at_to is not None:
        q = q.where(A.at < codec.to_us(f.at_to))
    if f.newest:
        return [_entry(r) for r in reversed(conn.execute(q.order_by(A.seq.desc()).limit(f.limit)).all())]
    return [_entry(r) for r in conn.execute(q.order_by(A.seq).limit(f.limit))]


def audit_head(conn: Connection, tenant_id: str) -> tuple[int, str]:
    row = conn.execute(
        select(audit_heads.c.seq, audit_heads.c.entry_hash).where(audit_heads.c.tenant_id == tenant_id)
    ).first()
    return (0, GENESIS) if row is None else (int(row[0]), str(row[1]))


# ---------------------------------------------------------------------- approvals
D = definition_approvals.c


def _approval(r: Any) -> Approval:
    identity = None if r.code_identity is None else dict(codec.loads(r.code_identity))
    code_digest = r.code_digest
    if identity is not None:
        today = protected(identity)
        # An approval recorded before secret-bearing parts were digested: the same code in
        # today's form, when the stored pair agrees (a row edited by hand keeps its digest, so
        # no worker's code matches it and the gate refuses, as verify names).
        if today != identity and code_digest == CodeIdentity(identity).digest:
            identity, code_digest = today, CodeIdentity(today).digest
    return Approval(
        r.tenant_id,
        r.job_definition_id,
        r.digest,
        int(r.version),
        r.approved_by,
        codec.from_us(r.approved_at),
        r.note,
        codec.opt_dt(r.revoked_at),
        r.revoked_by,
        code_digest,
        identity,
        int(r.approval_id),
    )


def approval_put(conn: Connection, a: Approval) -> Approval:
    """Record an approval (a new row, even for a digest approved before: history keeps every
    approver); returns it with its ``approval_id``."""
    values = {
        "tenant_id": a.tenant_id,
        "job_definition_id": a.job_definition_id,
        "digest": a.digest,
        "version": a.version,
        "code_digest": a.code_digest,
        "code_identity": None if a.code_identity is None else codec.dumps(a.code_identity),
        "approved_by": a.approved_by,
        "approved_at": codec.to_us(a.approved_at),
        "note": a.note,
        "revoked_at": None,
        "revoked_by": None,
    }
    new_id = conn.execute(definition_approvals.insert().values(**values).returning(D.approval_id)).scalar_one()
    return replace(a, approval_id=int(new_id), revoked_at=None, revoked_by=None)


def approval_get(conn: Connection, tenant_id: str, job_definition_id: str, digest: str) -> Approval | None:
    """The digest's newest active approval, else its newest one, else None."""
    rows = conn.execute(
        select(definition_approvals)
        .where(D.tenant_id == tenant_id, D.job_definition_id == job_definition_id, D.digest == digest)
        .order_by(D.revoked_at.is_(None).desc(), D.approval_id.desc())
        .limit(1)
    ).first()
    return None if rows is None else _approval(rows)


def approval_by_id(conn: Connection, approval_id: int) -> Approval | None:
    row = conn.execute(select(definition_approvals).where(D.approval_id == approval_id)).first()
    return None if row is None else _approval(row)


def approvals_active(conn: Connection, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], str | None]:
    """Which of the (tenant, definition, digest) keys have an active approval, with the code
    digest each binds (None: approved before code identity was recorded); one query."""
    if not keys:
        return {}
    pairs = sorted({(k[0], k[1]) for k in keys})
    if len(pairs) <= _FEW_DEFINITIONS:  # a submission's case: one statement built once a definition
        found = [r for t, j in pairs for r in driver.rows(conn, *active_query(t, j))]
    else:
        tenants = sorted({k[0] for k in keys})
        jobs = sorted({k[1] for k in keys})
        q = (
            select(*_ACTIVE_COLUMNS)
            .where(D.tenant_id.in_(tenants), D.job_definition_id.in_(jobs), D.revoked_at.is_(None))
            .order_by(D.approval_id)
        )
        found = [tuple(r) for r in conn.execute(q)]
    return active_of(found, keys)


def active_query(tenant_id: str, job_definition_id: str) -> tuple[Any, dict[str, Any]]:
    """The statement reading a definition's active approvals (tenant, definition, digest, code
    digest, oldest first), and its values."""
    return _ACTIVE, {"tenant": tenant_id, "job": job_definition_id}


def active_of(
    found: Sequence[Sequence[Any]], keys: Sequence[tuple[str, str, str]]
) -> dict[tuple[str, str, str], str | None]:
    """``approvals_active``'s answer from the approval rows read (``active_query``'s order)."""
    wanted = set(keys)
    # several active approvals of one digest: the newest (last, by id) names the code
    return {(r[0], r[1], r[2]): r[3] for r in found if (r[0], r[1], r[2]) in wanted}


_FEW_DEFINITIONS = 4
_ACTIVE_COLUMNS = (D.tenant_id, D.job_definition_id, D.digest, D.code_digest)
_ACTIVE = driver.planned_once(
    select(*_ACTIVE_COLUMNS)
    .where(D.tenant_id == bindparam("tenant"), D.job_definition_id == bindparam("job"), D.revoked_at.is_(None))
    .order_by(D.approval_id)
)


def approvals_list(conn: Connection, tenant_id: str, job_definition_id: str) -> list[Approval]:
    q = (
        select(definition_approvals)
        .where(D.tenant_id == tenant_id, D.job_definition_id == job_definition_id)
        .order_by(D.approval_id)
    )
    return [_approval(r) for r in conn.execute(q)]


def approval_revoke(
    conn: Connection, tenant_id: str, job_definition_id: str, digest: str, by: str, now: datetime
) -> bool:
    """Revoke every active approval of the digest; False when none was active."""
    stmt = (
        update(definition_approvals)
        .where(
            D.tenant_id == tenant_id,
            D.job_definition_id == job_definition_id,
            D.digest == digest,
            D.revoked_at.is_(None),
        )
        .values(revoked_at=codec.to_us(now), revoked_by=by)
    )
    return bool(conn.execute(stmt).rowcount)


# ---------------------------------------------------------------------- run requests
R = run_requests.c


def _request(r: Any) -> RunRequest:
    return RunRequest(
        request_id=r.request_id,
        tenant_id=r.tenant_id,
        job_definition_id=r.job_definition_id,
        params=dict(codec.loads(r.params)),
        title=r.title,
        reason=r.reason,
        requested_by=r.requested_by,
        status=r.status,
        created_at=codec.from_us(r.created_at),
        tested_at=codec.opt_dt(r.tested_at),
        tested_by=r.tested_by,
        verdict=None if r.verdict is None else dict(codec.loads(r.verdict)),
        decided_at=codec.opt_dt(r.decided_at),
        decided_by=r.decided_by,
        decision_note=r.decision_note,
        job_run_id=r.job_run_id,
        digest=r.digest,
        version=r.version,
        requester_lineage=() if r.requester_lineage is None else tuple(codec.loads(r.requester_lineage)),
    )


def request_put(conn: Connection, q: RunRequest) -> None:
    conn.execute(
        run_requests.insert().values(
            request_id=q.request_id,
            tenant_id=q.tenant_id,
            job_definition_id=q.job_definition_id,
            params=codec.dumps(q.params),
            title=q.title,
            reason=q.reason,
            requested_by=q.requested_by,
            status=q.status,
            created_at=codec.to_us(q.created_at),
            digest=q.digest,
            version=q.version,
            requester_lineage=codec.dumps(list(q.requester_lineage)) if q.requester_lineage else None,
        )
    )


def request_get(conn: Connection, tenant_id: str, request_id: str) -> RunRequest | None:
    row = conn.execute(select(run_requests).where(R.tenant_id == tenant_id, R.request_id == request_id)).first()
    return None if row is None else _request(row)


def requests_list(
    conn: Connection,
    tenant_id: str,
    *,
    status: str | None = None,
    requested_by: str | None = None,
    job_definition_ids: Collection[str] | None = None,
    before: tuple[datetime, str] | None = None,
    limit: int = 100,
) -> list[RunRequest]:
    """Newest first. ``job_definition_ids``: only requests of these (a token limited to some
    definitions), filtered here so that a page is full of what its reader may see."""
    q = select(run_requests).where(R.tenant_id == tenant_id)
    if status is not None:
        q = q.where(R.status == status)
    if requested_by is not None:
        q = q.where(R.requested_by == requested_by)
    if job_definition_ids is not None:
        q = q.where(R.job_definition_id.in_(sorted(job_definition_ids)))
    if before is not None:
        at = codec.to_us(before[0])
        q = q.where((R.created_at < at) | ((R.created_at == at) & (R.request_id < before[1])))
    q = q.order_by(R.created_at.desc(), R.request_id.desc()).limit(limit)
    return [_request(r) for r in conn.execute(q)]


def request_tested(
    conn: Connection,
    tenant_id: str,
    request_id: str,
    by: str,
    at: datetime,
    verdict: dict[str, Any],
    pinned: tuple[str, int] | None = None,
) -> bool:
    """Record a dry run's verdict and (``pinned``: digest, version) the version it saw."""
    values: dict[str, Any] = {"tested_at": codec.to_us(at), "tested_by": by, "verdict": codec.dumps(verdict)}
    if pinned is not None:
        values.update(digest=pinned[0], version=pinned[1])
    stmt = (
        update(run_requests)
        .where(R.tenant_id == tenant_id, R.request_id == request_id, R.status == "pending")
        .values(**values)
    )
    return bool(conn.execute(stmt).rowcount)


def request_decide(
    conn: Connection,
    tenant_id: str,
    request_id: str,
    *,
    status: str,
    by: str,
    at: datetime,
    note: str | None,
    job_run_id: str | None,
) -> bool:
    """Move a pending request to ``status``; False if it was decided meanwhile (compare-and-set)."""
    stmt = (
        update(run_requests)
        .where(R.tenant_id == tenant_id, R.request_id == request_id, R.status == "pending")
        .values(status=status, decided_at=codec.to_us(at), decided_by=by, decision_note=note, job_run_id=job_run_id)
    )
    return bool(conn.execute(stmt).rowcount)


# ---------------------------------------------------------------------- licensed slots
LICENCE_COUNTER = "licence-slots"
_OPEN = ("SCHEDULED", "RETRY_WAIT", "DISPATCHED", "RUNNING", "HELD")


def licence_slots_taken(conn: Connection, *, lock_rows: bool, now_us: int) -> int:
    """Lock the licence counter row (creations of licensed runs queue here, cluster-wide) and
    count the licensed runs still open: a slot is held from creation until the run ends."""
    from sqlalchemy import func

    driver.insert_rows(
        conn, gate_counters, ("name", "updated_at"), [(LICENCE_COUNTER, now_us)], suffix="ON CONFLICT DO NOTHING"
    )
    q = select(gate_counters.c.name).where(gate_counters.c.name == LICENCE_COUNTER)
    conn.execute(q.with_for_update() if lock_rows else q).one()
    conn.execute(update(gate_counters).where(gate_counters.c.name == LICENCE_COUNTER).values(updated_at=now_us))
    r = job_runs.c
    open_licensed = (
        select(func.count())
        .select_from(licence_slots.join(job_runs, job_runs.c.job_run_id == licence_slots.c.job_run_id))
        .where(r.status.in_(_OPEN))
    )
    return int(conn.execute(open_licensed).scalar_one())


def licence_slots_take(conn: Connection, runs: Sequence[tuple[str, str]], now_us: int) -> None:
    driver.insert_rows(
        conn, licence_slots, ("job_run_id", "tenant_id", "created_at"), [(rid, t, now_us) for rid, t in runs]
    )


# ---------------------------------------------------------------------- anchors


def _anchor(r: Any) -> Anchor:
    """An anchor row; one no anchoring could have written (a time or a count that is not a
    number) is named, not a crash."""
    source = f"anchor {r.anchor_seq} of {r.tenant_id}"
    numbers: dict[str, Any] = {}
    for name in ("anchor_seq", "first_seq", "last_seq", "leaf_count"):
        try:
            numbers[name] = int(getattr(r, name))
        except (ValueError, TypeError):
            raise MalformedRecordError("not a number jobgate writes", field=name, source=source) from None
    for name in ("window_start", "window_end", "created_at"):
        try:
            numbers[name] = codec.from_us(getattr(r, name))
        except (ValueError, TypeError, OverflowError):
            raise MalformedRecordError("not a time jobgate writes", field=name, source=source) from None
    return Anchor(
        r.tenant_id,
        numbers["anchor_seq"],
        r.mode,
        numbers["window_start"],
        numbers["window_end"],
        numbers["first_seq"],
        numbers["last_seq"],
        numbers["leaf_count"],
        r.root,
        r.prev_chain,
        r.chain,
        numbers["created_at"],
        r.sink,
        r.key_id,
        r.signature,
        r.timestamp_token,
    )


def anchors_list(conn: Connection, tenant_id: str) -> list[Anchor]:
    q = select(anchors).where(N.tenant_id == tenant_id).order_by(N.anchor_seq)
    return [_anchor(r) for r in conn.execute(q)]


def anchor_last(conn: Connection, tenant_id: str, mode: str | None = None) -> Anchor | None:
    q = select(anchors).where(N.tenant_id == tenant_id)
    if mode is not None:
        q = q.where(N.mode == mode)
    row = conn.execute(q.order_by(N.anchor_seq.desc()).limit(1)).first()
    return None if row is None else _anchor(row)


def anchor_signers(conn: Connection) -> dict[str, int]:
    """How many anchors, of every tenant, each key id signed."""
    q = (
        select(N.key_id, func.count())
        .where(N.key_id.is_not(None), N.signature.is_not(None))
        .group_by(N.key_id)
        .order_by(N.key_id)
    )
    return {str(key_id): int(n) for key_id, n in conn.execute(q)}


def anchor_put(conn: Connection, a: Anchor) -> bool:
    """Insert; False when that position is taken (another anchorer won: the caller retries)."""
    row = (
        a.tenant_id, a.anchor_seq, a.mode, codec.to_us(a.window_start), codec.to_us(a.window_end), a.first_seq,
        a.last_seq, a.leaf_count, a.root, a.prev_chain, a.chain, codec.to_us(a.created_at), a.sink, a.key_id,
        a.signature, a.timestamp_token,
    )  # fmt: skip
    columns = (
        "tenant_id", "anchor_seq", "mode", "window_start", "window_end", "first_seq", "last_seq", "leaf_count",
        "root", "prev_chain", "chain", "created_at", "sink", "key_id", "signature", "timestamp_token",
    )  # fmt: skip
    return bool(driver.insert_rows(conn, anchors, columns, [row], suffix="ON CONFLICT DO NOTHING RETURNING 1"))


def oldest_unanchored(conn: Connection, tenant_id: str | None) -> list[tuple[str, datetime]]:
    """Per tenant with entries (of ``tenant_id`` only, when given), the time of its oldest audit
    entry no anchor covers yet: the first after the last batch anchor that no direct anchor took."""
    heads = select(audit_heads.c.tenant_id, audit_heads.c.seq)
    if tenant_id is not None:
        heads = heads.where(audit_heads.c.tenant_id == tenant_id)
    out: list[tuple[str, datetime]] = []
    for tenant, head in conn.execute(heads).all():
        batch = conn.execute(
            select(func.max(N.last_seq)).where(N.tenant_id == tenant, N.mode == "batch")
        ).scalar_one_or_none()
        last = int(batch or 0)
        if int(head) <= last:
            continue
        direct = {
            int(r[0])
            for r in conn.execute(
                select(N.first_seq).where(N.tenant_id == tenant, N.mode == "direct", N.first_seq > last)
            )
        }
        rows = conn.execute(
            select(A.seq, A.at).where(A.tenant_id == tenant, A.seq > last).order_by(A.seq).limit(len(direct) + 1)
        ).all()
        first = next((r for r in rows if int(r[0]) not in direct), None)
        if first is not None:
            out.append((str(tenant), codec.from_us(first[1])))
    return out


def audit_range(conn: Connection, tenant_id: str, first_seq: int, last_seq: int) -> list[AuditEntry]:
    q = select(audit_log).where(A.tenant_id == tenant_id, A.seq >= first_seq, A.seq <= last_seq).order_by(A.seq)
    return [_entry(r) for r in conn.execute(q)]


def audit_first_after(conn: Connection, tenant_id: str, after_seq: int) -> AuditEntry | None:
    q = select(audit_log).where(A.tenant_id == tenant_id, A.seq > after_seq).order_by(A.seq).limit(1)
    row = conn.execute(q).first()
    return None if row is None else _entry(row)


def audit_last_before(conn: Connection, tenant_id: str, after_seq: int, before: datetime) -> int | None:
    """The highest position after ``after_seq`` of an entry written before ``before``."""
    from sqlalchemy import func

    q = select(func.max(A.seq)).where(A.tenant_id == tenant_id, A.seq > after_seq, A.at < codec.to_us(before))
    value = conn.execute(q).scalar()
    return None if value is None else int(value)


def audit_tenants(conn: Connection) -> list[str]:
    """Every tenant with a chain: by its head, its entries or its anchors. Not by the head alone: a
    tenant whose head row was deleted would otherwise not be verified at all."""
    found = select(audit_heads.c.tenant_id).union(select(A.tenant_id).distinct(), select(N.tenant_id).distinct())
    return sorted({str(r[0]) for r in conn.execute(found)})
