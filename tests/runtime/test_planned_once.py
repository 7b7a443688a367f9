"""Statements PostgreSQL plans once (``driver.planned_once``) keep a plan that never reads rows
it does not want as tables grow: checked on each one's generic plan over empty, never analysed
tables, the state in which a cached plan can go wrong (a scan of a near-empty table, or of a
tenant's runs by an index on the tenant, kept as the table grows)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from runtime_support import running_worker, wait_status

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sql import driver
from jobgate.store.tables import metadata
from jobgate.testing import connection

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s|%[sbt]")


def _numbered(sql: str) -> tuple[str, int]:
    """``sql`` with PostgreSQL's ``$n`` parameters for psycopg's (a name keeps its number)."""
    names: dict[str, int] = {}
    count = 0

    def number(found: re.Match[str]) -> str:
        nonlocal count
        if found.group(0) == "%%":
            return "%"
        name = found.group(1)
        if name is not None and name in names:
            return f"${names[name]}"
        count += 1
        if name is not None:
            names[name] = count
        return f"${count}"

    return _PLACEHOLDER.sub(number, sql), count


def _forms(sql: str) -> list[str]:
    """The statement as written and, for one with array parameters, its one-row form (what
    a single row's statement is sent as: ``driver._one_row_form``)."""
    single, _ = driver._one_row_form(sql, [[None]] * 200)
    return [sql] if single == sql else [sql, single]


def _generic_plan(engine: Engine, sql: str, name: str) -> str:
    numbered, count = _numbered(sql)
    with engine.store.write() as tx:
        conn = connection(tx)
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.exec_driver_sql(f"PREPARE {name} AS {numbered}".replace("%", "%%"))
        try:
            args = ", ".join(["NULL"] * count)
            plan = conn.exec_driver_sql(f"EXPLAIN EXECUTE {name}({args})" if count else f"EXPLAIN EXECUTE {name}")
            return "\n".join(str(row[0]) for row in plan)
        finally:
            conn.exec_driver_sql(f"DEALLOCATE {name}")


_SCAN = re.compile(r"(Index Scan|Index Only Scan)(?: Backward)? using (\S+) on|(Bitmap Heap Scan|Seq Scan) on")


def _wasteful_scans(plan: str, unique: dict[str, int]) -> list[str]:
    """The scans of ``plan`` that may read rows they do not want as tables grow: a full scan,
    or a scan filtering rows on a parameter (``$n``) through an index whose condition does not
    bind every column of a unique index (a shorter prefix of what the statement compares: all
    of a tenant's runs read to find one). ``unique``: unique indexes and their key columns.

    A filter on constants (``revoked_at IS NULL``) is the statement's own, the same in a plan
    made for its values: what a kept plan must not do is read by less than a plan made afresh
    would. Checked in one state, tables empty and never analysed (where a kept plan is made
    before a queue's tables grow); PostgreSQL plans a kept statement again after each ANALYZE."""
    found = []
    node: tuple[str, str | None, int] | None = None
    for line in plan.splitlines():
        text = line.strip()
        scan = _SCAN.search(line)
        if scan:
            node = (text, scan.group(2), 0)
            if scan.group(3) == "Seq Scan":
                found.append(text)
        elif "->" in line:
            node = None  # another kind of node: its filter is not a scan's
        elif node is not None and text.startswith("Index Cond:"):
            node = (node[0], node[1], text.count(" AND ") + 1)
        elif node is not None and text.startswith("Filter:") and re.search(r"\$[1-9]", text):
            index, bound = node[1], node[2]
            if index is None or bound < unique.get(index, 10**6):
                found.append(f"{node[0]} / {text}")
    return found


def test_statements_planned_once_never_scan_a_table_in_full(engine: Engine) -> None:
    if engine.store.dialect != "postgresql":
        pytest.skip("plans kept on the server are PostgreSQL's")
    # A run submitted, claimed, started and settled: the statements built on first use are built.
    job = define(engine)
    run = engine.submit(SubmitRequest(job, request_id="planned")).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    later = engine.clock.now() + timedelta(hours=1)
    pending = engine.submit(SubmitRequest(job, request_id="cancelled", due_at=later)).run
    control.cancel_run(engine, pending.job_run_id, actor="tester")  # a change by id, a run locked
    with engine.store.read() as tx:
        assert tx.run_get(run.job_run_id, run.tenant_id) is not None
    with engine.store.write() as tx:  # empty and never analysed: where a kept plan is made too early
        connection(tx).exec_driver_sql("TRUNCATE " + ", ".join(t.name for t in metadata.sorted_tables))
    texts, statements = driver.planned_once_statements()
    dialect = engine.store._writer.dialect
    texts |= {str(stmt.compile(dialect=dialect)) for stmt in statements}
    assert len(texts) >= 10  # the submission's own at least
    assert any(t.startswith("WITH changed AS (UPDATE job_runs") for t in texts)  # one run's settlement
    with engine.store.read() as tx:
        unique_sql = "SELECT indexrelid::regclass::text, indnkeyatts FROM pg_index WHERE indisunique"
        found = connection(tx).exec_driver_sql(unique_sql)
        unique = {str(name).split(".")[-1]: int(keys) for name, keys in found}
    scans: dict[str, Any] = {}
    for i, sql in enumerate(sorted(texts)):
        for j, form in enumerate(_forms(sql)):
            plan = _generic_plan(engine, form, f"planned_once_{i}_{j}")
            if _wasteful_scans(plan, unique):
                scans[form[:160]] = plan
    assert scans == {}, "\n\n".join(f"{sql}\n{plan}" for sql, plan in scans.items())
