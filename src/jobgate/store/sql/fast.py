"""Straight to the driver for the hot path's statements and bulk rows.

SQLAlchemy's per-row parameter processing costs more than SQLite's own work for the small
rows a worker writes (transitions, outbox events). Statements are still built with
SQLAlchemy Core where they can be, compiled once per dialect, and executed on the
transaction's own DBAPI connection, so they commit or roll back with everything else.

Bulk rows go in as one multi-row ``INSERT`` per chunk rather than ``executemany``. The
reason is the GIL, not SQLite: the ``sqlite3`` module releases the GIL at every step of a
statement, i.e. once per row of an ``executemany``, and in a worker whose executor threads
are busy each release costs a wait to get the GIL back, all while the database's only write
lock is held. Measured here with eight busy threads, 200 rows took 12-28 ms through
``executemany`` and 4-5 ms as one statement (1.2 ms either way with no other threads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

from sqlalchemy import Connection, Table

# Keyed by the statement object's id; the entry keeps the statement alive so the id stays unique.
_compiled: dict[tuple[int, str], tuple[str, tuple[str, ...] | None, dict[str, Any], Any]] = {}


def _compile(conn: Connection, stmt: Any) -> tuple[str, tuple[str, ...] | None, dict[str, Any]]:
    """SQL text, positional parameter names (None for named styles) and the values of the
    parameters the compiler added itself (SQLite renders ``LIMIT ? OFFSET ?`` for a limit)."""
    key = (id(stmt), conn.dialect.name)
    entry = _compiled.get(key)
    if entry is None:
        compiled = stmt.compile(dialect=conn.dialect)
        names = tuple(compiled.positiontup) if compiled.positiontup else None
        defaults = {k: v for k, v in compiled.params.items() if v is not None}
        entry = (str(compiled), names, defaults, stmt)
        _compiled[key] = entry
    return entry[0], entry[1], entry[2]


def _bind(names: tuple[str, ...] | None, defaults: dict[str, Any], params: Mapping[str, Any]) -> Any:
    if names is None:
        return {**defaults, **params} if defaults else params
    if defaults:
        params = {**defaults, **params}
    return tuple(params[n] for n in names)


_PLACEHOLDER = {"sqlite": "?", "postgresql": "%s"}
_MAX_PARAMS = 30000  # below SQLite's 32766 host parameters and PostgreSQL's 65535
_MAX_ROWS = 500
_insert_sql: dict[tuple[str, str, tuple[str, ...], int], str] = {}


def _multi_insert_sql(dialect: str, table: str, columns: tuple[str, ...], n: int) -> str:
    key = (dialect, table, columns, n)
    sql = _insert_sql.get(key)
    if sql is None:
        width = len(columns)
        if dialect == "postgresql":  # numbered, for ``_cursor``'s raw cursor
            rows = ("(" + ", ".join(f"${r * width + c + 1}" for c in range(width)) + ")" for r in range(n))
        else:
            rows = ("(" + ", ".join([_PLACEHOLDER[dialect]] * width) + ")" for _ in range(n))
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES " + ", ".join(rows)
        _insert_sql[key] = sql
    return sql


def _cursor(conn: Connection) -> Any:
    """A cursor on the transaction's own connection. On PostgreSQL a raw cursor, which takes
    ``$1``-numbered SQL as it is: psycopg's usual cursor parses every statement for ``%s``
    marks, and a multi-row INSERT of 500 runs (22,000 marks, too long for its cache) took
    30 ms to parse each time, half of a bulk submit's time."""
    dbapi = conn.connection.dbapi_connection
    if conn.dialect.name == "postgresql":
        import psycopg

        return psycopg.RawCursor(dbapi)  # type: ignore[call-overload]
    return dbapi.cursor()  # type: ignore[union-attr]


def insert_rows(
    conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Sequence[Any]], *, suffix: str = ""
) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (tuples in ``columns`` order) with one statement per chunk of rows.

    ``suffix`` ends each statement (``ON CONFLICT DO NOTHING RETURNING ...``); whatever the
    statements return comes back.
    """
    if not rows:
        return []
    per_statement = max(1, min(_MAX_ROWS, _MAX_PARAMS // len(columns)))
    dialect = conn.dialect.name
    out: list[tuple[Any, ...]] = []
    cursor = _cursor(conn)
    try:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            sql = _multi_insert_sql(dialect, table.name, columns, len(chunk))
            cursor.execute(f"{sql} {suffix}" if suffix else sql, list(chain.from_iterable(chunk)))
            if cursor.description is not None:  # the suffix returns rows
                out.extend(tuple(r) for r in cursor.fetchall())
    finally:
        cursor.close()
    return out


def run(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> int:
    """Execute one statement with parameters; returns the number of rows it changed."""
    sql, names, defaults = _compile(conn, stmt)
    return run_sql(conn, sql, _bind(names, defaults, params))


def run_sql(conn: Connection, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> int:
    """Execute hand-built SQL in the driver's own parameter style; returns the rows changed."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, params)
        return int(cursor.rowcount)
    finally:
        cursor.close()


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
    sql, names, defaults = _compile(conn, stmt)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.executemany(sql, [_bind(names, defaults, r) for r in rows])
        return int(cursor.rowcount)
    finally:
        cursor.close()


def rows(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Execute one query straight through the driver; rows as plain tuples in select order."""
    sql, names, defaults = _compile(conn, stmt)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, _bind(names, defaults, params))
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


def returning(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Execute one statement with RETURNING straight through the driver; rows as plain dicts."""
    sql, names, defaults = _compile(conn, stmt)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, _bind(names, defaults, params))
        columns = [d[0] for d in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    finally:
        cursor.close()
