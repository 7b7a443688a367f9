"""Seal rows: written with each change to a sealed record, chained in batches, verified.

``core.seals`` says what a record's hash is; this module reads the rows, writes the seal rows
(``record_seals``), chains the pending ones into the audit log as Merkle roots, and verifies
every record of a tenant against its latest seal and every batch against its audit entry.

Writing is cheap on purpose: a run's terminal transition adds one read of its rows and one
insert, in the same transaction, and takes no lock another writer waits on (the chain's head
is locked only by the batch, once every few seconds, by the one leader).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import psycopg
from sqlalchemy import Connection, Table, and_, bindparam, func, select

from jobgate.core import merkle, seal_trails, seals
from jobgate.core.audit import AuditEvent
from jobgate.core.lineage import retry_source
from jobgate.core.records import Batch, BatchEntry, Finding, RecordsReport
from jobgate.core.seals import Record
from jobgate.core.states import TERMINAL, RunStatus
from jobgate.store import codec
from jobgate.store.errors import SealWritersBusy
from jobgate.store.sql import chains, driver
from jobgate.store.tables import (
    audit_heads,
    audit_log,
    dead_letters,
    job_runs,
    metadata,
    record_seals,
    run_transitions,
    seal_values,
    workflow_runs,
    workflow_steps,
    workflow_transitions,
)

S = record_seals.c
BATCH_ACTION = seals.BATCH_ACTION
BATCH_LIMIT = 50_000  # seals per batch entry: a long backlog becomes several entries
_TERMINAL = tuple(s.value for s in TERMINAL)
_WORKFLOW_TERMINAL = tuple(sorted(seal_trails.WORKFLOW_ENDED))
SEAL_COLUMNS = (
    "tenant_id",
    "kind",
    "record_id",
    "event",
    "extent",
    "identity",
    "outcome",
    "history",
    "seal",
    "content",
    "sealed_at",
)


def _row(tenant: str, kind: str, rid: str, event: str, parts: seals.Parts, now: int) -> tuple[Any, ...]:
    p = parts
    return _row_of(tenant, kind, rid, event, p.extent, p.identity, p.outcome, p.history, p.content, now)


def _row_of(
    tenant: str,
    kind: str,
    rid: str,
    event: str,
    extent: int | None,
    identity: str,
    outcome: str | None,
    history: str | None,
    content: str | None,
    now: int,
) -> tuple[Any, ...]:
    """A seal row in ``SEAL_COLUMNS`` order, its seal computed from the parts given."""
    seal = seals.seal_hash(kind, rid, event, extent, identity, outcome, history)
    return (tenant, kind, rid, event, extent, identity, outcome, history, seal, content, now)


def run_seal_row(
    tenant: str, job_run_id: str, identity: Sequence[Any], outcome: Sequence[Any], history: str, extent: int, now: int
) -> tuple[Any, ...]:
    """The seal row of a run's end, from the value lists of its identity and outcome
    (``core.seals.run_parts_of``) and the history its holder extended: built without the
    ``Parts`` object, as a worker seals hundreds of runs a transaction."""
    identity_hash, outcome_hash, content = seals.run_texts(identity, outcome)
    kind, event = seals.RUN, seals.SEALED
    return _row_of(tenant, kind, job_run_id, event, extent, identity_hash, outcome_hash, history, content, now)


_pg_insert_sql: list[str] = []


def _insert(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert seal rows, holding the seal writers' lock shared (see ``SEAL_WRITERS``): on
    PostgreSQL in the insert's own statement (a round trip per settlement less)."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        driver.insert_rows(conn, record_seals, SEAL_COLUMNS, rows)
        return
    if not _pg_insert_sql:
        source = driver.ordered_rows(conn.dialect, record_seals, SEAL_COLUMNS).replace(
            " ORDER BY x._ord", ", seal_writers ORDER BY x._ord"
        )
        _pg_insert_sql.append(
            driver.planned_once(
                f"WITH seal_writers AS (SELECT pg_advisory_xact_lock_shared({SEAL_WRITERS})) "
                f"INSERT INTO record_seals ({', '.join(SEAL_COLUMNS)}) {source}"
            )
        )
    for start in range(0, len(rows), 5000):
        driver.run_arrays(conn, _pg_insert_sql[0], rows[start : start + 5000])


def _by_run(rows: Iterable[Record], key: str = "job_run_id") -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = defaultdict(list)
    for r in rows:
        out[r[key]].append(r)
    return out


def _cols(table: Table, *names: Iterable[str]) -> list[Any]:
    """The named columns only: what a seal reads, whatever columns later versions add."""
    seen: dict[str, Any] = {}
    for group in names:
        for n in group:
            seen.setdefault(n, table.c[n])
    return list(seen.values())


_RUN_READ = ("job_run_id", "tenant_id", *seals.RUN_IDENTITY, *seals.RUN_OUTCOME)
# Verification also reads ``retry_of``, to compare it with the sealed trigger's payload
# (``_check_retry_of``), not to hash it: it repeats a value the identity already seals. Not in
# ``_RUN_READ``: migration 0021 seals runs through it before the column exists.
_RUN_VERIFY = (*_RUN_READ, "retry_of")
_TRANSITION_READ = ("id", "job_run_id", "tenant_id", *seals.TRANSITION_COLUMNS)
_LETTER_READ = ("job_run_id", "tenant_id", *seals.LETTER_COLUMNS)
_WORKFLOW_READ = ("workflow_run_id", "tenant_id", *seals.WORKFLOW_IDENTITY, *seals.WORKFLOW_OUTCOME)
_STEP_READ = ("workflow_run_id", *seals.STEP_COLUMNS)
_WT_READ = ("workflow_run_id", *seals.WORKFLOW_TRANSITION_COLUMNS)


def _spec_cols(spec: seals.Spec, table: Table) -> list[Any]:
    return _cols(table, ("tenant_id",), spec.key, spec.columns)


def _chunks(items: Sequence[Any], n: int = 500) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


# -- writing --------------------------------------------------------------------------------


def seal_runs(conn: Connection, job_run_ids: Sequence[str], now: int) -> int:
    """Seal the runs ``job_run_ids`` as their rows stand in this transaction (their terminal
    transition has just been written). Returns how many seals it wrote."""
    rows, history, letters = _read_runs(conn, job_run_ids)
    out = [
        _row(
            run["tenant_id"],
            seals.RUN,
            rid,
            seals.SEALED,
            seals.run_parts(run, history.get(rid, []), letters.get(rid, [])),
            now,
        )
        for rid, run in rows.items()
    ]
    _insert(conn, out)
    return len(out)


def _read_runs(
    conn: Connection, job_run_ids: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]], dict[str, list[Record]]]:
    """The sealed columns of each run, its transitions in order and its dead letters."""
    run_names, t_names = _unique(_RUN_READ), _unique(_TRANSITION_READ)
    rows: dict[str, dict[str, Any]] = {}
    history: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for chunk in _chunks(list(job_run_ids)):
        for r in _by_ids(conn, "job_runs", run_names, chunk):
            rows[r[0]] = dict(zip(run_names, r, strict=True))
        for t in _by_ids(conn, "run_transitions", t_names, chunk, order="job_run_id, id"):
            history[t[1]].append(dict(zip(t_names, t, strict=True)))
    lettered = [i for i in rows if _ever_dead_lettered(history.get(i, ()))]
    return rows, history, _letters(conn, lettered)


def _ever_dead_lettered(transitions: Iterable[Record]) -> bool:
    return any(t["to_status"] == RunStatus.DEAD_LETTERED.value for t in transitions)


def _letters(conn: Connection, job_run_ids: Sequence[str]) -> dict[str, list[Record]]:
    if not job_run_ids:
        return {}
    d = dead_letters.c
    q = (
        select(*_cols(dead_letters, _LETTER_READ))
        .where(d.job_run_id.in_(job_run_ids))
        .order_by(d.job_run_id, d.created_at, d.dead_letter_id)
    )
    return _by_run(conn.execute(q).mappings())


def reseal_run(conn: Connection, job_run_id: str, now: int) -> None:
    """Seal a terminal run again after a change that keeps it terminal (its dead letter resolved)."""
    status = conn.execute(select(job_runs.c.status).where(job_runs.c.job_run_id == job_run_id)).scalar()
    if status in _TERMINAL:
        seal_runs(conn, [job_run_id], now)


def retire_runs(conn: Connection, tenant_id: str, job_run_ids: Sequence[str], now: int) -> None:
    """Tombstones for runs retention deletes: the seal each closes is their identity."""
    latest = _latest_seals(conn, tenant_id, seals.RUN, job_run_ids)
    rows = []
    for rid in job_run_ids:
        closed = latest[rid]["seal"] if rid in latest else "unsealed"
        rows.append(_row(tenant_id, seals.RUN, rid, seals.RETIRED, seals.Parts(identity=closed), now))
    _insert(conn, rows)


def _latest_seals(conn: Connection, tenant_id: str, kind: str, ids: Sequence[str]) -> dict[str, Record]:
    return {rid: trail[-1] for rid, trail in _seals_of(conn, tenant_id, kind, ids).items()}


def _table(name: str) -> Table:
    return metadata.tables[name]


def reseal(conn: Connection, kind: str, tenant_id: str, match: Record) -> None:
    """Seal the single-row records of ``kind`` (``core.seals.SPECS``) that ``match`` names, as
    they stand in this transaction: a new seal for each whose content differs from its latest
    one; a tombstone when ``match`` names one record by its whole key and its row is gone."""
    spec = seals.SPECS[kind]
    table = _table(spec.table)
    where = [table.c[k] == v for k, v in match.items()]
    where.append(table.c.tenant_id == tenant_id)
    rows = conn.execute(select(*_spec_cols(spec, table)).where(and_(*where))).mappings().all()
    now = codec.to_us(datetime.now(UTC))
    if not rows:
        if set(spec.key) <= set(match):
            rid = "@".join(str(match[c]) for c in spec.key)
            latest = _latest_seals(conn, tenant_id, kind, [rid]).get(rid)
            if latest is not None and latest["event"] == seals.SEALED:
                tomb = _row(tenant_id, kind, rid, seals.DELETED, seals.Parts(identity=latest["seal"]), now)
                _insert(conn, [tomb])
        return
    ids = [seals.record_id(spec, row) for row in rows]
    latest_by_id = _latest_seals(conn, tenant_id, kind, ids)
    out = []
    for rid, row in zip(ids, rows, strict=True):
        parts = seals.row_parts(spec, row)
        latest = latest_by_id.get(rid)
        if latest is not None and latest["event"] == seals.SEALED and latest["identity"] == parts.identity:
            continue
        out.append(_row(tenant_id, kind, rid, seals.SEALED, parts, now))
    _insert(conn, out)


def seal_workflow(conn: Connection, workflow_run_id: str, now: int) -> None:
    """Seal a workflow run that has just ended: its row, its steps and its state sequence."""
    w = (
        conn.execute(
            select(*_cols(workflow_runs, _WORKFLOW_READ)).where(workflow_runs.c.workflow_run_id == workflow_run_id)
        )
        .mappings()
        .first()
    )
    if w is None or w["status"] not in _WORKFLOW_TERMINAL:
        return
    steps, ts = _workflow_rows(conn, {workflow_run_id: w["tenant_id"]})
    parts = seals.workflow_parts(w, steps.get(workflow_run_id, []), ts.get(workflow_run_id, []))
    row = _row(w["tenant_id"], seals.WORKFLOW, workflow_run_id, seals.SEALED, parts, now)
    _insert(conn, [row])


def _workflow_rows(
    conn: Connection, tenants: Mapping[str, str]
) -> tuple[dict[str, list[Record]], dict[str, list[Record]]]:
    """The steps and state transitions of the workflow runs ``tenants`` names (id -> its
    tenant), each kept only when it is of its workflow run's tenant: a step moved to another
    tenant leaves its run's outcome, and the run's seal then names the change. The tenant is
    read beside the sealed columns, not hashed (seals made before this rule still verify)."""
    st, wt = workflow_steps.c, workflow_transitions.c
    ids = list(tenants)
    steps = _by_run(
        _of_tenant(
            conn.execute(
                select(*_cols(workflow_steps, _STEP_READ), st.tenant_id)
                .where(st.workflow_run_id.in_(ids))
                .order_by(st.workflow_run_id, st.position, st.step_id)
            ).mappings(),
            tenants,
        ),
        "workflow_run_id",
    )
    ts = _by_run(
        _of_tenant(
            conn.execute(
                select(*_cols(workflow_transitions, _WT_READ), wt.tenant_id)
                .where(wt.workflow_run_id.in_(ids))
                .order_by(wt.workflow_run_id, wt.seq)
            ).mappings(),
            tenants,
        ),
        "workflow_run_id",
    )
    return steps, ts


def _of_tenant(rows: Iterable[Record], tenants: Mapping[str, str]) -> list[Record]:
    return [r for r in rows if r["tenant_id"] == tenants.get(r["workflow_run_id"])]


# -- chaining -------------------------------------------------------------------------------


# On PostgreSQL a seal's id is taken when it is inserted and becomes visible when its transaction
# commits, so a lower id can appear after a higher one. Every transaction that writes seals holds
# this advisory lock shared (``_insert``); the batch takes it exclusively for an instant
# before reading the highest id, so every id up to that horizon is committed (or gone) when it
# reads the batch's rows, and a batch is exactly the tenant's seals in an id range.
SEAL_WRITERS = 0x6A6F6273  # "jobs"
# How long the batch waits for that lock. While it waits, every new writer queues behind it
# (PostgreSQL grants locks in order): a review found one completion held open for 30 s (a slow
# effect, a paused worker) stopping every completion and heartbeat of the cluster until it
# ended. Writers hold the lock for milliseconds, so the wait is granted at once in a drain; when
# it is not, the batch is put off (``SealWritersBusy``) and the writers go on.
HORIZON_WAIT_MS = 100


def _horizon(conn: Connection) -> int:
    """The highest seal id below which every seal is committed (see ``SEAL_WRITERS``)."""
    if conn.dialect.name == "postgresql":  # a session lock, let go at once: writers wait an instant
        # In a savepoint, so that a wait given up leaves the transaction usable, and the timeout
        # set for this one statement is undone with it.
        driver.execute(conn, "SAVEPOINT jobgate_horizon")
        try:
            driver.execute(conn, f"SET LOCAL lock_timeout = '{HORIZON_WAIT_MS}ms'")
            driver.execute(conn, f"SELECT pg_advisory_lock({SEAL_WRITERS})")
        except psycopg.errors.LockNotAvailable:
            driver.execute(conn, "ROLLBACK TO SAVEPOINT jobgate_horizon")
            driver.execute(conn, "RELEASE SAVEPOINT jobgate_horizon")
            raise SealWritersBusy(
                f"a transaction writing seals has been open longer than {HORIZON_WAIT_MS} ms; the batch waits",
                field="seals",
            ) from None
        driver.execute(conn, f"SELECT pg_advisory_unlock({SEAL_WRITERS})")
        driver.execute(conn, "ROLLBACK TO SAVEPOINT jobgate_horizon")  # the lock timeout, undone
        driver.execute(conn, "RELEASE SAVEPOINT jobgate_horizon")
    return int(conn.execute(select(func.max(S.id))).scalar() or 0)


def batch_entries(conn: Connection, tenant_id: str) -> list[BatchEntry]:
    a = audit_log.c
    q = select(a.seq, a.payload).where(a.tenant_id == tenant_id, a.action == BATCH_ACTION).order_by(a.seq)
    out = []
    for seq, payload in conn.execute(q):
        try:
            doc = codec.loads(payload)
            out.append(BatchEntry(int(seq), int(doc["after"]), int(doc["last_id"]), int(doc["count"]), doc.get("root")))
        except (ValueError, KeyError, TypeError):
            out.append(BatchEntry(int(seq), -1, -1, -1, None))  # not a batch entry jobgate wrote
    return out


def _last_chained(conn: Connection, tenant_id: str, through_seq: int | None = None) -> int:
    """The last seal id a batch of the tenant chained (``through_seq``: a batch entry at or
    before that audit entry). An entry that does not read as a batch jobgate wrote (edited in the
    database) is passed over for the one before it: verification names it (``batch_entries``),
    and counting or chaining must not crash on it (a review's edit made ``audit verify
    --records`` and the leader's chaining exit with a KeyError)."""
    a = audit_log.c
    q = select(a.payload).where(a.tenant_id == tenant_id, a.action == BATCH_ACTION).order_by(a.seq.desc())
    if through_seq is not None:
        q = q.where(a.seq <= through_seq)
    latest = conn.execute(q.limit(1)).scalar()  # the common case: one row read
    if latest is None:
        return 0

    def older() -> Iterator[Any]:  # read only when the latest does not parse
        yield from conn.execute(q.offset(1)).scalars()

    for payload in itertools.chain([latest], older()):
        try:
            return int(codec.loads(payload)["last_id"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def seals_chained_through(conn: Connection, tenant_id: str, seq: int) -> int:
    """The last seal id chained by a batch entry at or before audit entry ``seq``: with ``seq``
    the last one an anchor covers, every seal up to it is under that anchor."""
    return _last_chained(conn, tenant_id, seq)


def seal_tenants(conn: Connection) -> list[str]:
    """The tenants with seals, read as a loose index scan of ``ix_record_seals_tenant`` (one
    probe per tenant): the leader asks every few seconds, and a ``DISTINCT`` over a table of
    millions of seals would read all of them each time."""
    sql = (
        "WITH RECURSIVE t(tenant_id) AS ("
        " SELECT min(tenant_id) FROM record_seals"
        " UNION ALL"
        " SELECT (SELECT min(s.tenant_id) FROM record_seals s WHERE s.tenant_id > t.tenant_id)"
        " FROM t WHERE t.tenant_id IS NOT NULL)"
        " SELECT tenant_id FROM t WHERE tenant_id IS NOT NULL"
    )
    return [str(r[0]) for r in driver.rows_sql(conn, sql, ())]


def pending_tenants(conn: Connection) -> list[str]:
    """The tenants with seals written since their last batch."""
    out = []
    for t in seal_tenants(conn):
        q = select(S.id).where(S.tenant_id == t, S.id > _last_chained(conn, t)).limit(1)
        if conn.execute(q).first() is not None:
            out.append(t)
    return out


def record_tenants(conn: Connection) -> list[str]:
    """Every tenant with a seal or a sealed kind of record: a tenant whose audit chain is gone
    still has its records checked."""
    found: set[str] = set()
    for table in (record_seals, job_runs, workflow_runs, *(_table(s.table) for s in seals.SPECS.values())):
        found.update(str(r[0]) for r in conn.execute(select(table.c.tenant_id).distinct()))
    return sorted(found)


def pending_count(conn: Connection, tenant_id: str | None = None) -> int:
    """Seals not chained yet: after the last batch of their tenant."""
    tenants = [tenant_id] if tenant_id else seal_tenants(conn)
    total = 0
    for t in tenants:
        q = select(func.count()).select_from(record_seals).where(S.tenant_id == t, S.id > _last_chained(conn, t))
        total += int(conn.execute(q).scalar_one())
    return total


def chain_pending(conn: Connection, tenant_id: str, at: datetime, append: Any) -> list[Batch]:
    """Chain the tenant's seals written since its last batch into its audit log, at most
    ``BATCH_LIMIT`` per entry; the entry records the id range (``after``, ``last_id``], its count
    and its Merkle root. ``append`` is the transaction's audit append (it locks the chain's head
    on PostgreSQL, so take this before any other lock another writer could hold)."""
    out: list[Batch] = []
    horizon = _horizon(conn)
    after = _last_chained(conn, tenant_id)
    while after < horizon:
        q = (
            select(S.id, S.seal, S.kind)
            .where(S.tenant_id == tenant_id, S.id > after, S.id <= horizon)
            .order_by(S.id)
            .limit(BATCH_LIMIT)
        )
        rows = conn.execute(q).all()
        if not rows:
            return out
        root = merkle.root([r[1] for r in rows])
        kinds: dict[str, int] = defaultdict(int)
        for r in rows:
            kinds[r[2]] += 1
        last = int(rows[-1][0])
        payload = {"root": root, "count": len(rows), "after": after, "last_id": last, "kinds": dict(kinds)}
        event = AuditEvent(tenant_id, "jobgate", BATCH_ACTION, "records", f"{after + 1}-{last}", at, payload=payload)
        (entry,) = append([event])
        out.append(Batch(tenant_id, entry.seq, len(rows), root))
        after = last
    return out


# -- verifying ------------------------------------------------------------------------------


MAX_FINDINGS = 100


def verify_records(conn: Connection, tenant_id: str, log_began: int | None = None) -> RecordsReport:
    """Recompute every record of ``tenant_id`` and compare it with its latest seal, read each
    record's seals in order by the rules of ``core.seal_trails`` (an old record changed and
    sealed again shows there), and check every batch of seals against the root its audit
    entry chained. ``log_began``: when the deployment's audit log began (``audit_log_began``,
    read beyond this tenant's rows; None: read here)."""
    if log_began is None:
        log_began = audit_log_began(conn)
    report = RecordsReport(tenant_id)
    report.pending = pending_count(conn, tenant_id)
    # Records first: a finding that names the record beats one that names the batch it is in.
    _verify_runs(conn, tenant_id, report)
    _verify_workflows(conn, tenant_id, report)
    for kind in seals.SPECS:
        _verify_rows(conn, tenant_id, kind, report, log_began)
    _verify_batches(conn, tenant_id, report)
    return report


def _add(report: RecordsReport, finding: Finding) -> None:
    if len(report.findings) < MAX_FINDINGS:
        report.findings.append(finding)


_statements: dict[tuple[str, str], Any] = {}


def _statement(conn: Connection, name: str, build: Callable[[], Any]) -> Any:
    """A streamed query, built once per dialect (``driver`` compiles each statement object once)."""
    key = (name, conn.dialect.name)
    found = _statements.get(key)
    if found is None:
        found = _statements[key] = build()
    return found


def _collate(conn: Connection, column: Any) -> Any:
    """Byte order on both backends: the merge below compares ids the way Python does."""
    return column.collate("C") if conn.dialect.name == "postgresql" else column


def _verify_batches(conn: Connection, tenant_id: str, report: RecordsReport) -> None:
    """Each batch entry against the seals in its id range, the ranges one after the other."""
    entries = batch_entries(conn, tenant_id)
    report.batches = len(entries)
    q = select(S.id, S.seal).where(S.tenant_id == tenant_id).order_by(S.id)
    result = conn.execution_options(yield_per=20_000).execute(q)
    try:
        _walk_batches(entries, iter(result), report)
    finally:
        result.close()  # the seals after the last batch are not read (a server-side cursor on PostgreSQL)


def _walk_batches(entries: Sequence[BatchEntry], seals_iter: Iterator[Any], report: RecordsReport) -> None:
    current = next(seals_iter, None)
    # Seal ids start at 1 and batches cover them from there: a seal below that is in no batch's
    # range, never pending, and was skipped unread (found by a regression review).
    while current is not None and int(current[0]) < 1:
        _add(report, Finding("seal", f"#{current[0]}", "outside_batches", seal_id=int(current[0])))
        current = next(seals_iter, None)
    previous_last = 0
    for e in entries:
        name = f"{e.seq} (seals {e.after + 1}-{e.last_id})"
        if e.after != previous_last:
            _add(report, Finding("audit entry", name, "batch_gap"))
        leaves: list[str] = []
        while current is not None and int(current[0]) <= e.last_id:
            if int(current[0]) > e.after:
                leaves.append(str(current[1]))
            current = next(seals_iter, None)
        if not leaves and e.count:
            _add(report, Finding("audit entry", name, "batch_missing"))
        elif e.count != len(leaves) or e.root != (merkle.root(leaves) if leaves else None):
            _add(report, Finding("audit entry", name, "batch_changed"))
        previous_last = max(previous_last, e.last_id)


def _latest_stream(conn: Connection, tenant_id: str, kind: str) -> Iterator[dict[str, Any]]:
    """The latest seal of each record of ``kind``, in record id order; a record sealed more than
    once has its earlier seals, in id order, under ``"earlier"``."""
    q = _statement(
        conn,
        "latest",
        lambda: (
            select(record_seals)
            .where(S.tenant_id == bindparam("tenant"), S.kind == bindparam("kind"))
            .order_by(_collate(conn, S.record_id), S.id)
        ),
    )
    previous: dict[str, Any] | None = None
    earlier: list[dict[str, Any]] = []
    for r in driver.stream(conn, q, {"tenant": tenant_id, "kind": kind}, size=20_000):
        if previous is not None:
            if previous["record_id"] != r["record_id"]:
                if earlier:
                    previous["earlier"], earlier = earlier, []
                yield previous
            else:
                earlier.append(previous)
        previous = r
    if previous is not None:
        if earlier:
            previous["earlier"] = earlier
        yield previous


def _trail(seal: Record | None) -> list[Record]:
    """Every seal of the record ``seal`` is the latest of, in id order."""
    return [] if seal is None else [*seal.get("earlier", ()), seal]


def _check_trail(kind: str, rid: str, trail: Sequence[Record], report: RecordsReport) -> bool:
    """Every seal of one record hashes to its own parts, and the record's tombstones are ones
    jobgate writes: a ``deleted`` one for a kind it deletes, a ``retired`` one for a run, each
    closing the seal before it, and nothing sealed after one (but a deleted schedule's id used
    again). False when a finding was added."""
    for s in trail:
        if not _check_seal(kind, rid, s, report):
            return False
    for before, after in pairwise(trail):
        if before["event"] != seals.SEALED and kind not in seal_trails.DELETABLE:
            _add(report, Finding(kind, rid, "sealed_after_tombstone", seal_id=after["id"], detail=f"#{before['id']}"))
            return False
        if after["event"] == seals.SEALED:
            continue
        expected = seals.DELETED if kind in seal_trails.DELETABLE else seals.RETIRED if kind == seals.RUN else None
        if after["event"] != expected:
            _add(report, Finding(kind, rid, "deleted", seal_id=before["id"], detail=f"tombstone #{after['id']}"))
            return False
        if before["event"] == seals.SEALED and after["identity"] != before["seal"]:
            _add(report, Finding(kind, rid, "tombstone_mismatch", seal_id=after["id"]))
            return False
    return True


def _row_trail(kind: str, rid: str, trail: Sequence[Record], report: RecordsReport) -> None:
    """Consecutive seals of one single-row record by its kind's rule (``core.seal_trails``)."""
    sealed = [x for x in trail if x["event"] == seals.SEALED]
    problem = seal_trails.row_trail(kind, sealed, lambda x: x["content"])
    if problem is not None:
        _add(report, _resealed(kind, rid, problem))


def _resealed(kind: str, rid: str, p: seal_trails.TrailProblem) -> Finding:
    return Finding(kind, rid, p.problem, p.part, p.column, p.seal_id, p.detail)


def _grouped(rows: Iterable[Record], key: str) -> Iterator[tuple[str, list[Record]]]:
    current: str | None = None
    group: list[Record] = []
    for r in rows:
        if r[key] != current:
            if current is not None:
                yield current, group
            current, group = r[key], []
        group.append(r)
    if current is not None:
        yield current, group


def _merge(
    records: Iterator[Record], key: str, latest: Iterator[Record]
) -> Iterator[tuple[str, Record | None, Record | None]]:
    """Pair each record with its latest seal (either may be missing), both in id order."""
    r = next(records, None)
    s = next(latest, None)
    while r is not None or s is not None:
        rid = None if r is None else r[key]
        sid = None if s is None else s["record_id"]
        if sid is None or (rid is not None and rid < sid):
            assert rid is not None
            yield rid, r, None
            r = next(records, None)
        elif rid is None or sid < rid:
            yield sid, None, s
            s = next(latest, None)
        else:
            yield rid, r, s
            r, s = next(records, None), next(latest, None)


def _check_seal(kind: str, rid: str, seal: Record, report: RecordsReport) -> bool:
    parts = seals.Parts(seal["identity"], seal["outcome"], seal["history"], seal["extent"])
    if seals.seal_of(kind, rid, seal["event"], parts) != seal["seal"]:
        _add(report, Finding(kind, rid, "seal_changed", seal_id=seal["id"]))
        return False
    return True


def _explain(content: str | None, part: str, names: Sequence[str], now: Sequence[Any]) -> tuple[str | None, str | None]:
    """The column of ``part`` that differs from the values kept with the seal, and a short
    "sealed X, now Y" (None when the seal kept no values: made by an older version)."""
    if not content:
        return None, None
    try:
        kept = json.loads(content)
        digests = kept.get("digests")
        sealed = kept.get(part) if digests is None else seals.split_digests(digests.get(part))
    except (ValueError, AttributeError):
        return None, None
    if not isinstance(sealed, list):
        return None, None
    if digests is not None:  # a run's seal keeps a digest per column: the column, not the values
        found = seals.difference(names, sealed, seals.column_digests(list(now)))
        return (None, None) if found is None else (found[0], None)
    found = seals.difference(names, sealed, list(now))
    if found is None:
        return None, None
    name, was, is_ = found
    sealed_text, now_text = seal_trails.shown_pair(was, is_)
    return name, f"sealed {sealed_text}, now {now_text}"


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


class _KeptValues:
    """The values a seal kept: its ``content``, or, when that points at packed values
    (``core.seals.packed_ref``), the run's entry in that ``seal_values`` row. Read only for a
    record that differs, the last few rows kept (a tamper tends to touch neighbours)."""

    _KEEP = 16

    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self._conn, self._tenant = conn, tenant_id
        self._read: dict[int, bytes | None] = {}

    def of(self, seal: Record) -> str | None:
        content: str | None = seal["content"]
        values_id = seals.packed_id(content)
        if values_id is None:
            return content
        if values_id not in self._read:
            if len(self._read) >= self._KEEP:
                self._read.clear()
            v = seal_values.c
            q = select(v.packed).where(v.id == values_id, v.tenant_id == self._tenant)
            self._read[values_id] = self._conn.execute(q).scalar()
        packed = self._read[values_id]
        return None if packed is None else seals.unpacked_content(bytes(packed), str(seal["record_id"]))


def _verify_runs(conn: Connection, tenant_id: str, report: RecordsReport) -> None:
    r, t = job_runs.c, run_transitions.c
    runs = driver.stream(
        conn,
        _statement(
            conn,
            "runs",
            lambda: (
                select(*_cols(job_runs, _RUN_VERIFY))
                .where(r.tenant_id == bindparam("tenant"))
                .order_by(_collate(conn, r.job_run_id))
            ),
        ),
        {"tenant": tenant_id},
    )
    trans = driver.stream(
        conn,
        _statement(
            conn,
            "transitions",
            lambda: (
                select(*_cols(run_transitions, _TRANSITION_READ))
                .where(t.tenant_id == bindparam("tenant"))
                .order_by(_collate(conn, t.job_run_id), t.id)
            ),
        ),
        {"tenant": tenant_id},
        size=20_000,
    )
    history = _grouped(trans, "job_run_id")
    letters = _by_run(
        conn.execute(
            select(*_cols(dead_letters, (*_LETTER_READ, "job_class")))
            .where(dead_letters.c.tenant_id == tenant_id)
            .order_by(dead_letters.c.job_run_id, dead_letters.c.created_at, dead_letters.c.dead_letter_id)
        ).mappings()
    )
    pending_history = next(history, None)
    checked = 0
    kept = _KeptValues(conn, tenant_id)
    retired = _retired_by_retention(conn, tenant_id)
    requeues = _requeues_audited(conn, tenant_id)
    for rid, run, seal in _merge(runs, "job_run_id", _latest_stream(conn, tenant_id, seals.RUN)):
        ts: list[Record] = []
        while pending_history is not None and pending_history[0] < rid:
            _add(report, Finding(seals.RUN, pending_history[0], "transitions_without_run"))
            pending_history = next(history, None)
        if pending_history is not None and pending_history[0] == rid:
            ts = pending_history[1]
            pending_history = next(history, None)
        checked += run is not None  # a retired run's tombstone is checked, but it is not a run
        ls = letters.get(rid, [])
        try:
            _verify_run(rid, run, seal, ts, ls, report, kept, retired, requeues.get(rid, ()))
        except (TypeError, ValueError):  # a value no encoder takes (or no number): named, not a crash
            _add(report, _unreadable(seals.RUN, rid, run or {}, *ts, *ls))
    while pending_history is not None:
        _add(report, Finding(seals.RUN, pending_history[0], "transitions_without_run"))
        pending_history = next(history, None)
    _verify_retired_triggers(conn, tenant_id, retired, report)
    report.checked[seals.RUN] = checked


def _retired_by_retention(conn: Connection, tenant_id: str) -> dict[str, tuple[str | None, str | None]]:
    """The runs retention says it deleted (its ``retention.deleted`` audit entries name them),
    each with the digests of its key and slot, and of its definition, end and times, the entry
    holds (None in entries written before retention remembered them): a run's ``retired``
    tombstone that none names was not written by retention."""
    a = audit_log.c
    q = select(a.payload).where(a.tenant_id == tenant_id, a.action == seal_trails.RETENTION_DELETED)
    out: dict[str, tuple[str | None, str | None]] = {}
    for (payload,) in conn.execute(q):
        try:
            document = json.loads(payload)
            runs = document.get("runs")
            triggers, records = document.get(seal_trails.RETIRED_TRIGGERS), document.get(seal_trails.RETIRED_RECORDS)
        except (ValueError, AttributeError):
            continue
        if not isinstance(runs, list):
            continue
        if not isinstance(triggers, list) or len(triggers) != len(runs):
            triggers = [None] * len(runs)
        if not isinstance(records, list) or len(records) != len(runs):
            records = [None] * len(runs)
        out.update(
            (str(r), (None if t is None else str(t), None if d is None else str(d)))
            for r, t, d in zip(runs, triggers, records, strict=True)
        )
    return out


def _verify_retired_triggers(
    conn: Connection, tenant_id: str, audited: Mapping[str, tuple[str | None, str | None]], report: RecordsReport
) -> None:
    """One run per trigger, ever, after retention: every run a retention entry names keeps its
    ``retired_runs`` row as the entry describes it (the digest of its key and slot); every row
    is one a retention entry names; and no run holds a retired run's key or slot. Deleting or
    rewriting a row, or adding a run for a retired trigger, is named."""
    from jobgate.store.tables import retired_runs

    x, r = retired_runs.c, job_runs.c
    columns = (x.job_run_id, x.idempotency_key, x.slot, x.job_definition_id, x.status, x.created_at, x.ended_at)
    kept = {row.job_run_id: row for row in conn.execute(select(*columns, x.retired_at).where(x.tenant_id == tenant_id))}
    for rid, (digest, record) in audited.items():
        row = kept.get(rid)
        if digest is None:
            continue  # named before retention remembered triggers: nothing to hold the row to
        if row is None:
            _add(report, Finding(seals.RUN, rid, "retired_record_missing"))
        elif seal_trails.retired_trigger(row.idempotency_key, row.slot) != digest:
            _add(report, Finding(seals.RUN, rid, "retired_record_changed", column="idempotency_key, slot"))
        elif record is not None and record != seal_trails.retired_record(
            row.job_definition_id, row.status, row.created_at, row.ended_at, row.retired_at
        ):
            _add(
                report,
                Finding(
                    seals.RUN, rid, "retired_record_changed",
                    column="job_definition_id, status, created_at, ended_at, retired_at",
                ),
            )  # fmt: skip
    for rid in kept.keys() - audited.keys():
        _add(report, Finding(seals.RUN, rid, "retired_record_unexplained"))
    by_key = (
        select(r.job_run_id, x.job_run_id)
        .select_from(job_runs)
        .join(retired_runs, and_(x.tenant_id == r.tenant_id, x.idempotency_key == r.idempotency_key))
    )
    by_slot = (
        select(r.job_run_id, x.job_run_id)
        .select_from(job_runs)
        .join(
            retired_runs, and_(x.tenant_id == r.tenant_id, x.job_definition_id == r.job_definition_id, x.slot == r.slot)
        )
    )
    reused: dict[str, str] = {}
    for q in (by_key, by_slot):
        for holder, retired in conn.execute(q.where(r.tenant_id == tenant_id, r.job_run_id != x.job_run_id)):
            reused.setdefault(holder, retired)
    for holder, retired in sorted(reused.items()):
        _add(report, Finding(seals.RUN, holder, "trigger_reused", detail=retired))


_PLAIN = (str, int, float, bool, type(None))  # what jobgate's writes store, and seals encode


def _unreadable(kind: str, rid: str, *rows: Record) -> Finding:
    """A record one of whose rows holds a value no jobgate write stores (bytes in a text column,
    which SQLite lets a direct write put there): the finding names the column."""
    for row in rows:
        for column, value in row.items():
            if not isinstance(value, _PLAIN):
                return Finding(kind, rid, "unreadable", column=str(column), detail=type(value).__name__)
    return Finding(kind, rid, "unreadable")


def _requeues_audited(conn: Connection, tenant_id: str) -> dict[str, list[tuple[str, int]]]:
    """Who requeued each run, and when, by the tenant's ``run.requeued`` audit entries: written
    in the requeue's own transaction, in the hash-chained log (``ix_audit_log_action``)."""
    a = audit_log.c
    q = (
        select(a.target_id, a.actor, a.at)
        .where(a.tenant_id == tenant_id, a.action == seal_trails.RUN_REQUEUED_ACTION)
        .order_by(a.seq)
    )
    out: dict[str, list[tuple[str, int]]] = {}
    for target, actor, at in conn.execute(q):
        out.setdefault(target, []).append((actor, int(at)))
    return out


def _changes_audited(conn: Connection, tenant_id: str, action: str) -> dict[str, list[tuple[str, int, Any]]]:
    """The tenant's audit entries of ``action``, by target: (actor, time, payload)."""
    a = audit_log.c
    q = select(a.target_id, a.actor, a.at, a.payload).where(a.tenant_id == tenant_id, a.action == action)
    out: dict[str, list[tuple[str, int, Any]]] = {}
    for target, actor, at, payload in conn.execute(q.order_by(a.seq)):
        try:
            body = codec.loads(payload) if payload else None
        except ValueError:
            body = None  # an entry edited into no JSON: its chain check names it
        out.setdefault(str(target), []).append((str(actor), int(at), body))
    return out


def audit_log_began(conn: Connection) -> int | None:
    """When the deployment's audit log began: the time of the first entry of any tenant (µs),
    None without one. Any tenant's, not the record's own: a tenant made by a forger has a log
    that begins with its forged records' seals, and a record dated before that would pass as
    one older than the log (records from before migration 0010 are older than every entry).
    Read in a transaction that sees every tenant's rows (row security scopes a tenant's)."""
    a = audit_log.c
    tenants = [t for (t,) in conn.execute(select(audit_heads.c.tenant_id))]
    firsts = [
        conn.execute(select(a.at).where(a.tenant_id == t).order_by(a.tenant_id, a.at).limit(1)).scalar()
        for t in tenants
    ]
    found = [int(f) for f in firsts if f is not None]
    return min(found) if found else None


def _check_requeues(
    rid: str, ts: Sequence[Record], audited: Sequence[tuple[str, int]], seal: Record, report: RecordsReport
) -> bool:
    """Every requeue in a run's history is one an operator made (``seal_trails.unaudited_requeue``);
    False when a finding was added."""
    n = seal_trails.unaudited_requeue(ts, audited)
    if n is None:
        return True
    detail = f"requeued by {_short(ts[n]['actor'])} with no run.requeued audit entry of it"
    _add(report, Finding(seals.RUN, rid, "changed", "history", f"transition {n + 1}", seal["id"], detail))
    return False


def _verify_run(
    rid: str,
    run: Record | None,
    seal: Record | None,
    ts: Sequence[Record],
    ls: Sequence[Record],
    report: RecordsReport,
    kept: _KeptValues,
    retired: Mapping[str, tuple[str | None, str | None]],
    requeues: Sequence[tuple[str, int]],
) -> None:
    trail = _trail(seal) if seal is not None and "earlier" in seal else None  # most runs: one seal
    if trail is not None:
        if not _check_trail(seals.RUN, rid, trail, report):
            return
    elif seal is not None and not _check_seal(seals.RUN, rid, seal, report):
        return
    if seal is not None and seal["event"] == seals.RETIRED and rid not in retired:
        _add(report, Finding(seals.RUN, rid, "retired_unexplained", seal_id=seal["id"]))
        return
    if run is None:
        if seal is not None and seal["event"] != seals.RETIRED:
            _add(report, Finding(seals.RUN, rid, "deleted", seal_id=seal["id"]))
        return
    ended = seal_trails.run_ended(run["status"], (x["to_status"] for x in ts))
    if seal is not None and seal["event"] != seals.SEALED:  # its row was deleted, and is back
        _add(report, Finding(seals.RUN, rid, "back_after_tombstone", seal_id=seal["id"], detail=seal["event"]))
        return
    if seal is None:
        if ended:
            _add(report, Finding(seals.RUN, rid, "unsealed"))
        return
    _check_retry_of(rid, run, seal, report)
    _check_letter_class(rid, run, ls, seal, report)
    extent = int(seal["extent"] or 0)
    if (trail is not None or len(ts) > extent) and not _check_requeues(rid, ts, requeues, seal, report):
        return  # a run sealed more than once, or moved on since its seal: only a requeue does that
    if trail is not None and not _run_trail(rid, [s for s in trail if s["event"] == seals.SEALED], ts, report, kept):
        return
    if len(ts) < extent:
        _add(report, Finding(seals.RUN, rid, "history_cut", part="history", seal_id=seal["id"]))
        return
    if len(ts) > extent:  # moved on since: only a requeue does that, and it ends in a new seal
        if run["status"] in seal_trails.RUN_ENDED:
            _add(report, Finding(seals.RUN, rid, "unsealed", seal_id=seal["id"], detail=f"{extent} of {len(ts)}"))
            return
        _verify_requeued(rid, run, seal, ts, ls, report, kept)
        return
    _compare_run(rid, seal, seals.run_values(run, ts, ls), report, kept, outcome=True)


def _run_trail(
    rid: str, sealed: Sequence[Record], ts: Sequence[Record], report: RecordsReport, kept: _KeptValues
) -> bool:
    """A run's seals in order (``core.seal_trails.run_trail``); False when a finding was added."""
    if len(sealed) < 2:
        return True
    values = [[t[c] for c in seals.TRANSITION_COLUMNS] for t in ts]
    problem = seal_trails.run_trail(sealed, values, kept.of)
    if problem is not None:
        _add(report, _resealed(seals.RUN, rid, problem))
    return problem is None


def _verify_requeued(
    rid: str,
    run: Record,
    seal: Record,
    ts: Sequence[Record],
    ls: Sequence[Record],
    report: RecordsReport,
    kept: _KeptValues,
) -> None:
    """A run with transitions beyond its latest seal: the first must be a requeue of the sealed
    (dead-lettered or escalated) run; the sealed prefix, the identity (but a raised
    ``max_attempts``) and the sealed dead letters still hold."""
    extent = int(seal["extent"] or 0)
    values = seals.run_values(run, ts[:extent], ls)
    detail = seal_trails.moved_on_without_requeue(seal, [[t[c] for c in seals.TRANSITION_COLUMNS] for t in ts])
    if detail is not None:
        _add(report, Finding(seals.RUN, rid, "changed", "history", f"transition {extent + 1}", seal["id"], detail))
        return
    if seals.history_of(values["history"]) != seal["history"]:
        _compare_run(rid, seal, values, report, kept, outcome=False)
        return
    content = kept.of(seal)
    if seals.value_hash(values["identity"]) != seal["identity"]:
        sealed = seal_trails.kept_values(content, "identity", seal["identity"])
        if sealed is None:
            _compare_run(rid, seal, values, report, kept, outcome=False)
            return
        column = seal_trails.run_identity_change(sealed, values["identity"], requeued=True)
        if column is not None:
            i = seals.RUN_IDENTITY.index(column)
            sealed_text, now_text = seal_trails.shown_pair(sealed[i], values["identity"][i])
            detail = f"sealed {sealed_text}, now {now_text}"
            _add(report, Finding(seals.RUN, rid, "changed", "identity", column, seal["id"], detail))
            return
    outcome = seal_trails.kept_values(content, "outcome", seal["outcome"])
    if outcome is None:  # the dead letters it sealed cannot be checked: fail closed
        detail = f"the values seal #{seal['id']} kept are gone: its dead letters cannot be checked"
        _add(report, Finding(seals.RUN, rid, "changed", "outcome", "dead_letters", seal["id"], detail))
        return
    letter = seal_trails.letters_change(outcome[-1], values["outcome"][-1])
    if letter is not None:
        detail = f"dead letter {letter} removed or rewritten after seal #{seal['id']}"
        _add(report, Finding(seals.RUN, rid, "changed", "outcome", "dead_letters", seal["id"], detail))


def _check_letter_class(rid: str, run: Record, ls: Sequence[Record], seal: Record, report: RecordsReport) -> None:
    """A dead letter's ``job_class`` (what ``dlq list`` shows) is a copy of its run's, which the
    run's identity seals: the copy is held to it, as ``retry_of`` is to the trigger."""
    for letter in ls:
        if letter.get("job_class", run["job_class"]) != run["job_class"]:
            detail = f"dead letter {letter['dead_letter_id']} says {_short(letter['job_class'])}"
            _add(report, Finding(seals.RUN, rid, "changed", "outcome", "dead_letters", seal["id"], detail))
            return


def _check_retry_of(rid: str, run: Record, seal: Record, report: RecordsReport) -> None:
    """A run's ``retry_of`` column must say what its sealed trigger's payload says: the column
    is not hashed itself (adding it to the identity would have changed every seal made before
    it existed), so this comparison is what covers it. The trigger is decoded only when either
    side names a retry, which few runs do."""
    stored, trigger = run.get("retry_of"), run["trigger"]
    text = trigger if isinstance(trigger, str) else None
    if stored is None and (text is None or "retry_of" not in text):
        return
    try:
        document = json.loads(text or "{}")
    except ValueError:
        document = None
    sealed = retry_source(document if isinstance(document, dict) else None)
    if sealed != stored:
        detail = f"trigger says {_short(sealed)}, column says {_short(stored)}"
        _add(report, Finding(seals.RUN, rid, "changed", "identity", "retry_of", seal["id"], detail))


def _compare_run(
    rid: str, seal: Record, values: Mapping[str, list[Any]], report: RecordsReport, kept: _KeptValues, *, outcome: bool
) -> None:
    for part in ("identity", "history", "outcome"):
        if part == "outcome" and not outcome:
            continue
        hashed = seals.history_of(values[part]) if part == "history" else seals.value_hash(values[part])
        if hashed == seal[part]:
            continue
        names: Sequence[str] = {
            "identity": seals.RUN_IDENTITY,
            "outcome": (*seals.RUN_OUTCOME, "dead_letters"),
            "history": [f"transition {i + 1}" for i in range(len(values["history"]) + 1)],
        }[part]
        column, detail = _explain(kept.of(seal), part, names, values[part])
        _add(report, Finding(seals.RUN, rid, "changed", part, column, seal["id"], detail))
        return


def _verify_workflows(conn: Connection, tenant_id: str, report: RecordsReport) -> None:
    w = workflow_runs.c
    rows = conn.execute(
        select(*_cols(workflow_runs, _WORKFLOW_READ))
        .where(w.tenant_id == tenant_id)
        .order_by(_collate(conn, w.workflow_run_id))
    ).mappings()
    checked = 0
    batch: list[tuple[str, Record | None, Record | None]] = []
    for item in _merge(iter(rows), "workflow_run_id", _latest_stream(conn, tenant_id, seals.WORKFLOW)):
        batch.append(item)
        if len(batch) >= 500:
            checked += _verify_workflow_batch(conn, batch, report)
            batch = []
    checked += _verify_workflow_batch(conn, batch, report)
    report.checked[seals.WORKFLOW] = checked


def _verify_workflow_batch(
    conn: Connection,
    batch: Sequence[tuple[str, Record | None, Record | None]],
    report: RecordsReport,
) -> int:
    if not batch:
        return 0
    steps, ts = _workflow_rows(conn, {rid: row["tenant_id"] for rid, row, _ in batch if row is not None})
    for rid, row, seal in batch:
        if not _check_trail(seals.WORKFLOW, rid, _trail(seal), report) or not _workflow_trail(
            rid, _trail(seal), report
        ):
            continue
        if row is None:
            if seal is not None and seal["event"] == seals.SEALED:
                _add(report, Finding(seals.WORKFLOW, rid, "deleted", seal_id=seal["id"]))
            continue
        ended = row["status"] in _WORKFLOW_TERMINAL
        if seal is None:
            if ended:
                _add(report, Finding(seals.WORKFLOW, rid, "unsealed"))
            continue
        try:
            parts = seals.workflow_parts(row, steps.get(rid, []), ts.get(rid, []))
        except (TypeError, ValueError):
            _add(report, _unreadable(seals.WORKFLOW, rid, row, *steps.get(rid, []), *ts.get(rid, [])))
            continue
        for part in ("identity", "history", "outcome"):
            if getattr(parts, part) != seal[part]:
                _add(report, Finding(seals.WORKFLOW, rid, "changed", part, None, seal["id"]))
                break
    return len(batch)


def _workflow_trail(rid: str, trail: Sequence[Record], report: RecordsReport) -> bool:
    """Consecutive seals of one workflow run (``core.seal_trails.workflow_trail``)."""
    problem = seal_trails.workflow_trail([x for x in trail if x["event"] == seals.SEALED], lambda x: x["content"])
    if problem is not None:
        _add(report, _resealed(seals.WORKFLOW, rid, problem))
    return problem is None


def _verify_rows(conn: Connection, tenant_id: str, kind: str, report: RecordsReport, log_began: int | None) -> None:
    """``log_began``: when the deployment's audit log began (``_check_audited``)."""
    spec = seals.SPECS[kind]
    table = _table(spec.table)
    latest = {r["record_id"]: r for r in _latest_stream(conn, tenant_id, kind)}
    rules = seal_trails.AUDITED_CHANGES.get(kind, ())
    intact: list[tuple[str, int, dict[str, Any]]] = []  # rows as sealed, held to their audit entries below
    checked = 0
    for row in conn.execute(select(*_spec_cols(spec, table)).where(table.c.tenant_id == tenant_id)).mappings():
        checked += 1
        rid = seals.record_id(spec, row)
        seal = latest.pop(rid, None)
        if seal is None or seal["event"] != seals.SEALED:
            _add(report, Finding(kind, rid, "unsealed"))
            continue
        trail = _trail(seal)
        if not _check_trail(kind, rid, trail, report):
            continue
        _row_trail(kind, rid, trail, report)
        try:
            parts = seals.row_parts(spec, row)
        except (TypeError, ValueError):
            _add(report, _unreadable(kind, rid, row))
            continue
        if parts.identity != seal["identity"]:
            column, detail = _explain(seal["content"], "identity", spec.columns, [row[c] for c in spec.columns])
            _add(report, Finding(kind, rid, "changed", "content", column, seal["id"], detail))
        elif rules:
            intact.append((rid, seal["id"], dict(row)))
    _check_audited(conn, tenant_id, kind, rules, intact, report, log_began)
    for rid, seal in sorted(latest.items()):  # sealed records whose row is gone
        trail = _trail(seal)
        if not _check_trail(kind, rid, trail, report):
            continue
        if seal["event"] == seals.SEALED:
            _add(report, Finding(kind, rid, "deleted", seal_id=seal["id"]))
        else:
            _row_trail(kind, rid, trail, report)
    report.checked[kind] = checked


def _check_audited(
    conn: Connection,
    tenant_id: str,
    kind: str,
    rules: Sequence[seal_trails.AuditedChange],
    rows: Sequence[tuple[str, int, dict[str, Any]]],
    report: RecordsReport,
    log_began: int | None,
) -> None:
    """Each opening and closing of a sealed row accounted for by the audit entry its one door
    writes (``seal_trails.AUDITED_CHANGES``): a record inserted or closed by a database write,
    with a seal computed for it, is none jobgate made. The log is read only for the actions of
    rows that have such a change. ``log_began``: a closing dated before it is excused."""
    for rule in rules:
        applying = [r for r in rows if rule.applies(r[2])]
        if not applying:
            continue
        audited = _changes_audited(conn, tenant_id, rule.action)
        for i in seal_trails.unaudited(rule, [r for _, _, r in applying], audited, log_began):
            rid, seal_id, values = applying[i]
            detail = f"{rule.by} {_short(values[rule.by])} with no {rule.action} audit entry of it"
            _add(report, Finding(kind, rid, "changed", "content", rule.by, seal_id, detail))


def batch_leaves(conn: Connection, tenant_id: str, entry: BatchEntry) -> list[tuple[int, str]]:
    q = select(S.id, S.seal).where(S.tenant_id == tenant_id, S.id > entry.after, S.id <= entry.last_id).order_by(S.id)
    return [(int(r[0]), str(r[1])) for r in conn.execute(q)]


# -- the auditor's export: raw rows and the proofs of their seals ------------------------------


def _plain(rows: Iterable[Record]) -> list[dict[str, Any]]:
    return [dict(r) for r in rows]


def raw_runs(conn: Connection, job_run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Each run as its seal covers it: the sealed columns of its row, its transitions in order and
    its dead letters (what ``core.seals.run_parts`` takes), in the order asked."""
    out: dict[str, dict[str, Any]] = {}
    for chunk in _chunks(list(job_run_ids)):
        runs = conn.execute(select(*_cols(job_runs, _RUN_READ)).where(job_runs.c.job_run_id.in_(chunk))).mappings()
        history = _by_run(
            conn.execute(
                select(*_cols(run_transitions, _TRANSITION_READ))
                .where(run_transitions.c.job_run_id.in_(chunk))
                .order_by(run_transitions.c.job_run_id, run_transitions.c.id)
            ).mappings()
        )
        letters = _letters(conn, list(chunk))
        for r in runs:
            rid = r["job_run_id"]
            out[rid] = {
                "row": {c: r[c] for c in (*seals.RUN_IDENTITY, *seals.RUN_OUTCOME)},
                "transitions": [{c: t[c] for c in seals.TRANSITION_COLUMNS} for t in history.get(rid, [])],
                "dead_letters": [{c: d[c] for c in seals.LETTER_COLUMNS} for d in letters.get(rid, [])],
            }
    return [out[i] for i in job_run_ids if i in out]


def raw_workflow(conn: Connection, workflow_run_id: str) -> dict[str, Any] | None:
    w = (
        conn.execute(
            select(*_cols(workflow_runs, _WORKFLOW_READ)).where(workflow_runs.c.workflow_run_id == workflow_run_id)
        )
        .mappings()
        .first()
    )
    if w is None:
        return None
    steps, ts = _workflow_rows(conn, {workflow_run_id: w["tenant_id"]})
    return {
        "row": {c: w[c] for c in (*seals.WORKFLOW_IDENTITY, *seals.WORKFLOW_OUTCOME)},
        "steps": [{c: s[c] for c in seals.STEP_COLUMNS} for s in steps.get(workflow_run_id, [])],
        "transitions": [{c: t[c] for c in seals.WORKFLOW_TRANSITION_COLUMNS} for t in ts.get(workflow_run_id, [])],
    }


def raw_rows(conn: Connection, kind: str, tenant_id: str, match: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sealed columns of the single-row records of ``kind`` that ``match`` names."""
    spec = seals.SPECS[kind]
    table = _table(spec.table)
    where = [table.c[k] == v for k, v in match.items()] + [table.c.tenant_id == tenant_id]
    rows = conn.execute(select(*_cols(table, spec.columns)).where(and_(*where))).mappings()
    return [{c: r[c] for c in spec.columns} for r in rows]


def seal_proofs(conn: Connection, tenant_id: str, records: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Every seal of each (kind, record id), in id order, with its Merkle proof in its batch
    (when chained): what ties a record in an export to the ``records.sealed`` entries, and so to
    the anchors. A record sealed more than once comes with the values each seal kept
    (``content``, unpacked), so an export is read by the same rules of what may change between
    two seals as the database (``core.seal_trails``)."""
    out: list[dict[str, Any]] = []
    entries = batch_entries(conn, tenant_id)
    leaves_of: dict[int, list[tuple[int, str]]] = {}
    by_kind: dict[str, list[str]] = defaultdict(list)
    kept = _KeptValues(conn, tenant_id)
    for kind, rid in records:
        by_kind[kind].append(rid)
    for kind, ids in sorted(by_kind.items()):
        trails = _seals_of(conn, tenant_id, kind, ids)
        for rid in ids:
            trail = trails.get(rid, [])
            for s in trail:
                doc = {
                    c: s[c]
                    for c in ("id", "kind", "record_id", "event", "extent", "identity", "outcome", "history", "seal")
                }
                if len(trail) > 1:
                    doc["content"] = kept.of(s)
                entry = next((e for e in entries if e.after < int(s["id"]) <= e.last_id), None)
                doc["batch_seq"] = None if entry is None else entry.seq
                if entry is not None:
                    if entry.seq not in leaves_of:
                        leaves_of[entry.seq] = batch_leaves(conn, tenant_id, entry)
                    leaves = leaves_of[entry.seq]
                    index = next(i for i, (sid, _) in enumerate(leaves) if sid == int(s["id"]))
                    doc["proof"] = [list(step) for step in merkle.proof([x[1] for x in leaves], index)]
                out.append(doc)
    return out


def _seals_of(conn: Connection, tenant_id: str, kind: str, ids: Sequence[str]) -> dict[str, list[Record]]:
    """Every seal of each record, in id order."""
    out: dict[str, list[Record]] = defaultdict(list)
    for chunk in _chunks(list(ids)):
        q = (
            select(record_seals)
            .where(S.tenant_id == tenant_id, S.kind == kind, S.record_id.in_(chunk))
            .order_by(S.record_id, S.id)
        )
        for r in conn.execute(q).mappings():
            out[r["record_id"]].append(r)
    return out


# -- sealing before the write lock -----------------------------------------------------------


def presealed(
    conn: Connection, changes: Sequence[Any], transitions: Mapping[str, tuple[Any, ...]]
) -> dict[str, tuple[Any, ...]]:
    """Seal rows for terminal ``changes`` computed *before* their write transaction, from the rows
    as they stand now and the change itself: the worker reads and hashes while other writers hold
    SQLite's one write lock, and inside it only inserts.

    Sound because a change is applied only by compare-and-set on the run's status (and, for a
    worker, its fencing token): if it is applied, nothing else changed the run's transitions or
    sealed columns since it was read here (progress, lease renewals and stop requests touch none
    of them). Changes that write a dead letter are sealed in the transaction (their letter may be
    renumbered there)."""
    wanted = [ch for ch in changes if ch.to_status in TERMINAL and ch.dead_letter is None]
    if not wanted:
        return {}
    rows, history, letters = _read_runs(conn, [ch.job_run_id for ch in wanted])
    out: dict[str, tuple[Any, ...]] = {}
    for ch in wanted:
        row = rows.get(ch.job_run_id)
        if row is None:
            continue
        after = chains.row_after(row, ch)
        new = dict(zip(codec.TRANSITION_COLUMNS, transitions[ch.job_run_id], strict=True))
        ts = [*history.get(ch.job_run_id, []), new]
        parts = seals.run_parts(after, ts, letters.get(ch.job_run_id, []))
        out[ch.job_run_id] = _row(
            ch.tenant_id, seals.RUN, ch.job_run_id, seals.SEALED, parts, codec.to_us(ch.transition.at)
        )
    return out


def _by_ids(
    conn: Connection, table: str, names: Sequence[str], ids: Sequence[str], *, order: str = ""
) -> list[tuple[Any, ...]]:
    """Rows of ``table`` whose ``job_run_id`` is one of ``ids``, straight through the driver: the
    worker reads these for every run it ends, and SQLAlchemy's row processing cost more than the
    query (the columns are plain integers and text)."""
    tail = f" ORDER BY {order}" if order else ""
    cols = ", ".join(names)
    if conn.dialect.name == "postgresql":
        if len(ids) == 1:  # equality on an indexed column: a plan the server may keep
            return driver.rows_sql(conn, _one_run_sql(table, cols, tail), [ids[0]])
        return driver.rows_sql(conn, f"SELECT {cols} FROM {table} WHERE job_run_id = ANY(%s){tail}", [list(ids)])
    marks = ", ".join("?" * len(ids))
    return driver.rows_sql(conn, f"SELECT {cols} FROM {table} WHERE job_run_id IN ({marks}){tail}", list(ids))


@functools.cache
def _one_run_sql(table: str, cols: str, tail: str) -> str:
    """``_by_ids``' statement for one run, marked once (``driver.planned_once``)."""
    return str(driver.planned_once(f"SELECT {cols} FROM {table} WHERE job_run_id = %s{tail}"))


def _unique(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` without repeats, in order (what ``_cols`` selects)."""
    return tuple(dict.fromkeys(names))


_CONTENT = SEAL_COLUMNS.index("content")
_VALUES_COLUMNS = ("tenant_id", "packed")
PACKED_COLUMNS = (*SEAL_COLUMNS[:_CONTENT], *SEAL_COLUMNS[_CONTENT + 1 :])  # a row whose values are packed


def without_content(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A seal row (``SEAL_COLUMNS`` order) in ``PACKED_COLUMNS`` order."""
    return row[:_CONTENT] + row[_CONTENT + 1 :]


def pack(rows: Iterable[tuple[Any, ...]]) -> dict[str, bytes]:
    """The values kept by seal rows (``SEAL_COLUMNS`` order), packed by tenant
    (``core.seals.pack_contents``): pure work a worker does before its write transaction."""
    by_tenant: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in rows:
        if row[_CONTENT] is not None:
            by_tenant[row[0]].append((row[2], row[_CONTENT]))
    return {tenant: seals.pack_contents(contents) for tenant, contents in by_tenant.items()}


def insert_sealed(conn: Connection, rows: Sequence[tuple[Any, ...]], packed: Mapping[str, bytes] | None = None) -> None:
    """Insert seal rows computed before the transaction (a worker's ended runs), their values
    packed: one ``seal_values`` row a tenant, each seal row pointing at it. ``packed``: the
    values ``pack`` made of these rows (or of more: a run whose change did not apply is packed
    for nothing), made here if not given."""
    if not rows:
        return
    packs = pack(rows) if packed is None else packed
    refs: dict[str, str] = {}
    for tenant in sorted({row[0] for row in rows} & packs.keys()):
        made = driver.insert_rows(conn, seal_values, _VALUES_COLUMNS, [(tenant, packs[tenant])], suffix="RETURNING id")
        refs[tenant] = seals.packed_ref(int(made[0][0]))
    if refs:
        rows = [(*row[:_CONTENT], refs.get(row[0], row[_CONTENT]), *row[_CONTENT + 1 :]) for row in rows]
    _insert(conn, rows)
