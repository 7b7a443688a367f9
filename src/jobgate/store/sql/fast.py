"""``executemany`` straight to the driver for the hot path's bulk rows.

SQLAlchemy's per-row parameter processing costs more than SQLite's own work for the small
rows a worker writes (transitions, outbox events, attempts). Statements are still built with
SQLAlchemy Core, compiled once per dialect, and executed on the transaction's own DBAPI
connection, so they commit or roll back with everything else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, bindparam
from sqlalchemy.sql.dml import Insert

# Keyed by the statement object's id; the entry keeps the statement alive so the id stays unique.
_compiled: dict[tuple[int, str], tuple[str, tuple[str, ...] | None, Any]] = {}


def insert_of(table: Table, columns: Sequence[str]) -> Insert:
    """An INSERT naming exactly ``columns``, each bound by its own name."""
    return table.insert().values({c: bindparam(c) for c in columns})


def _compile(conn: Connection, stmt: Any) -> tuple[str, tuple[str, ...] | None]:
    key = (id(stmt), conn.dialect.name)
    entry = _compiled.get(key)
    if entry is None:
        compiled = stmt.compile(dialect=conn.dialect)
        names = tuple(compiled.positiontup) if compiled.positiontup else None
        entry = (str(compiled), names, stmt)
        _compiled[key] = entry
    return entry[0], entry[1]


def execute(conn: Connection, sql: str) -> None:
    """A parameterless statement (SAVEPOINT, RELEASE) on the transaction's own connection."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql)
    finally:
        cursor.close()


def executemany(conn: Connection, stmt: Any, rows: Sequence[Mapping[str, Any]]) -> int:
    """Run ``stmt`` once per row; returns the number of rows the statement changed in total."""
    if not rows:
        return 0
    sql, names = _compile(conn, stmt)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        if names is not None:
            cursor.executemany(sql, [tuple(r[n] for n in names) for r in rows])
        else:
            cursor.executemany(sql, rows)
        return int(cursor.rowcount)
    finally:
        cursor.close()


def returning(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Execute one statement with RETURNING straight through the driver; rows as plain dicts."""
    sql, names = _compile(conn, stmt)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, tuple(params[n] for n in names) if names is not None else params)
        columns = [d[0] for d in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    finally:
        cursor.close()
