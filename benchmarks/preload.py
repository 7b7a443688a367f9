"""A history to benchmark against: a million finished runs in the database before the clock starts.

A queue's tables grow for as long as it runs: every finished run keeps its row, its transitions,
its events, its seal and its audit entries (retention prunes them, on its own schedule). Claiming
and settling must stay fast with that history under them, so ``throughput.py --preload N``
measures with ``N`` finished runs already stored.

The rows are copies of one real run that went through the whole product (submitted, claimed,
executed, settled, sealed), made by the database itself (``generate_series`` on PostgreSQL, a
recursive ``WITH`` on SQLite) in chunks, in a tenant of their own (``preload``): they share every
table and index with the measured runs, and their audit chain is apart from the measured one.
The copies are not a verifiable history (each carries its template's hashes); they are the
weight a busy year leaves in the tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import Table, text

from jobgate.store.sqlstore import Store
from jobgate.store.tables import audit_log, job_runs, outbox, record_seals, run_transitions
from jobgate.testing import connection

TENANT = "preload"
CHUNK = 50_000

# table -> (the column naming the run, replacements of other columns by SQL expressions)
_COPIED: list[tuple[Table, str, dict[str, str]]] = [
    (job_runs, "job_run_id", {"idempotency_key": "'preload-' || {n}", "slot": "NULL"}),
    (run_transitions, "job_run_id", {}),
    (outbox, "job_run_id", {"delivered_at": "COALESCE(src.delivered_at, src.created_at)"}),
    (record_seals, "record_id", {}),
    # one chain position per copy and entry: the copies' seqs never meet (16 entries a run at most)
    (audit_log, "target_id", {"seq": "{n} * 16 + src.seq % 16"}),
]


def _run_id(dialect: str) -> str:
    """A copy's run id: the product's prefix and 32 hex digits of its number (real ids begin with
    a timestamp, so none is small enough to meet these)."""
    if dialect == "postgresql":
        return "'TGJOBRUN-' || lpad(to_hex(s.n), 32, '0')"
    return "printf('TGJOBRUN-%032x', s.n)"


def _copy_sql(dialect: str, table: Table, key: str, replaced: dict[str, str]) -> str:
    columns = [c.name for c in table.columns if not (c.primary_key and c.autoincrement is not False and c.name == "id")]
    values = {name: f"src.{name}" for name in columns}
    values.update({name: expr.format(n="s.n") for name, expr in replaced.items()})
    values[key] = _run_id(dialect)
    values["tenant_id"] = f"'{TENANT}'"
    listed = ", ".join(values[c] for c in columns)
    select = f"SELECT {listed} FROM {table.name} AS src, {{series}} WHERE src.{key} = :template"
    insert = f"INSERT INTO {table.name} ({', '.join(columns)}) "
    if dialect == "postgresql":
        return insert + select.format(series="generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS s(n)")
    return (
        "WITH RECURSIVE s(n) AS (SELECT :lo UNION ALL SELECT n + 1 FROM s WHERE n < :hi) "
        + insert
        + select.format(series="s")
    )


def preload(store: Store, template_run_id: str, n: int, *, progress: Callable[[str], None] = print) -> float:
    """Store ``n`` finished copies of ``template_run_id`` (its transitions, events, seal and
    audit entries with it); returns the seconds it took. Chunks of ``CHUNK`` runs, one
    transaction each, with progress; the planner's statistics are refreshed at the end."""

    started = time.perf_counter()
    statements = [text(_copy_sql(store.dialect, t, key, replaced)) for t, key, replaced in _COPIED]
    for lo in range(1, n + 1, CHUNK):
        hi = min(n, lo + CHUNK - 1)
        with store.write() as tx:
            for statement in statements:
                connection(tx).execute(statement, {"lo": lo, "hi": hi, "template": template_run_id})
        done = hi
        rate = done / (time.perf_counter() - started)
        progress(f"preload: {done:,} of {n:,} finished runs stored ({rate:,.0f}/s)")
    with store.write() as tx:
        conn = connection(tx)
        if store.dialect == "sqlite":  # the copies' events are delivered: move the cursor past them
            conn.exec_driver_sql("UPDATE outbox_cursors SET delivered_through = (SELECT max(id) FROM outbox)")
        # The copies' chain head is their last entry, so the tenant's next entries follow them
        conn.exec_driver_sql(
            "INSERT INTO audit_heads (tenant_id, seq, entry_hash) "
            f"SELECT tenant_id, seq, entry_hash FROM audit_log WHERE tenant_id = '{TENANT}' ORDER BY seq DESC LIMIT 1"
        )
        # ... and their seals are chained into it, as the product's sealing would have done
        # over the year: the measured workers' leader then has only the measured runs to chain.
        batches = tx.seals_chain(TENANT, datetime.now(UTC))
        progress(f"preload: the copies' seals chained in {len(batches):,} audit entries")
    with store.write() as tx:
        connection(tx).exec_driver_sql("ANALYZE")  # plans for the tables as they now are
    # The copies' pages written out now, not by a checkpoint in the middle of the measurement
    # (PostgreSQL: a gigabyte of dirty buffers; SQLite: the write-ahead log copied back).
    if store.dialect == "postgresql":
        with store.write() as tx:
            connection(tx).exec_driver_sql("CHECKPOINT")
    else:
        store.checkpoint()  # outside any transaction: SQLite refuses a checkpoint inside one
    return time.perf_counter() - started
