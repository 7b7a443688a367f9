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

import re
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain, count
from typing import Any

from sqlalchemy import Connection, Dialect, Table

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
        if id(stmt) in _planned_once_statements and conn.dialect.name == "postgresql":
            _planned_once.add(entry[0])
    return entry[0], entry[1], entry[2]


def _bind(names: tuple[str, ...] | None, defaults: dict[str, Any], params: Mapping[str, Any]) -> Any:
    if names is None:
        return {**defaults, **params} if defaults else params
    if defaults:
        params = {**defaults, **params}
    return tuple(params[n] for n in names)


# Statements whose plan does not depend on how many rows their tables hold (``planned_once``):
# Core statements by id (kept alive here, so the id stays theirs), and SQL texts.
_planned_once_statements: dict[int, Any] = {}
_planned_once: set[str] = set()


def planned_once(stmt: Any) -> Any:
    """Mark a statement (built once: a Core statement or PostgreSQL SQL text) as one PostgreSQL
    may plan once and keep the plan of: it is prepared on the server at its first use, and after
    a few executions its generic plan serves every later one, where every other statement is
    planned again for its parameters at each execution (``Store``: a plan made for a table of
    that moment must not outlive the table's growth).

    Only statements whose plan cannot go wrong as tables grow: inserts whose rows come from
    their parameters, and reads or updates that find their rows by equality on an index's
    columns, one value each (``= ANY(array)`` is not one: its generic plan may use a shorter
    prefix of an index and filter the rest; a join of parameter rows to a table, even of one
    row, may scan it: a run's compare-and-set is planned each time).
    ``tests/runtime/test_planned_once.py`` checks each one's generic plan over empty, never
    analysed tables: no table is scanned in full, none filtered through part of its key.
    Planning one of them took 0.1 to 0.4 ms of
    the server's time, more than running it; a single submission plans ten."""
    if isinstance(stmt, str):
        _planned_once.add(stmt)
    else:
        _planned_once_statements[id(stmt)] = stmt
    return stmt


def planned_once_statements() -> tuple[set[str], list[Any]]:
    """What ``planned_once`` marked: SQL texts, and Core statements (compiled per dialect)."""
    return set(_planned_once), list(_planned_once_statements.values())


def _execute(cursor: Any, sql: str, params: Any = None, *, marked: str | None = None) -> None:
    """``cursor.execute``, preparing ``sql`` on the server when it (or ``marked``, the text it
    was derived from) is ``planned_once``, with the statements the transaction owes sent ahead
    of it in the same round trip (``owe``). SQLite: a plain execute."""
    if not hasattr(cursor, "pgresult"):
        cursor.execute(sql) if params is None else cursor.execute(sql, params)
        return
    prepare = sql in _planned_once or marked in _planned_once
    dbapi = cursor.connection
    owed = _take_owed(dbapi)
    if owed is None:
        cursor.execute(sql, params, prepare=prepare)
    elif dbapi.pgconn.pipeline_status:  # in a pipeline already: queued with the rest
        _send(dbapi, owed)
        cursor.execute(sql, params, prepare=prepare)
    else:
        with dbapi.pipeline():
            _send(dbapi, owed)
            cursor.execute(sql, params, prepare=prepare)


# Statements a PostgreSQL transaction owes the server (``owe``), kept on its DBAPI connection:
# (SQL, parameters, whether to prepare it), and whether a write is among them.
_OWED = "_jobgate_owed"
_OWES_WRITE = "_jobgate_owes_write"
_Owed = list[tuple[str, Any, bool]]


def owe(conn: Connection, sql: str, params: Sequence[Any] | None = None, *, write: bool = False) -> None:
    """Run ``sql``, a statement whose answer nobody reads, ahead of the transaction's next
    statement: a transaction's lock, a local setting, or (``write``) a change that must commit
    with the transaction.

    On PostgreSQL it waits and travels with that statement, in one round trip through
    psycopg's pipeline, where it was a round trip of its own (a worker's cycle took the gates'
    lock that way first). The server still runs them in order: a lock owed is held before the
    next statement touches a row, a write owed is seen by it. A statement Core sends pays what
    is owed first (``owing``). A transaction that ends before its next statement never needed
    a lock or a setting, and the next transaction on the connection forgets them; a write owed
    travels with the ``COMMIT`` instead (a manual submission's audit entry, the last statement
    of its transaction: one round trip for both). A write that fails then fails the commit,
    and nothing of the transaction is kept. SQLite: at once."""
    if conn.dialect.name != "postgresql":
        conn.exec_driver_sql(sql, tuple(params) if params is not None else ())
        return
    dbapi: Any = conn.connection.dbapi_connection
    text, values = _one_row_form(sql, list(params) if params is not None else None)
    entry = (text, values, sql in _planned_once)
    owed: _Owed | None = getattr(dbapi, _OWED, None)
    if owed is None:
        setattr(dbapi, _OWED, [entry])
    else:
        owed.append(entry)
    if write:
        setattr(dbapi, _OWES_WRITE, True)


def _take_owed(dbapi: Any) -> _Owed | None:
    owed: _Owed | None = getattr(dbapi, _OWED, None)
    if owed is not None:
        setattr(dbapi, _OWED, None)
        setattr(dbapi, _OWES_WRITE, False)
    return owed


def _send(dbapi: Any, owed: _Owed) -> None:
    for sql, params, prepare in owed:
        dbapi.execute(sql, params, prepare=prepare)


def pay_owed(dbapi: Any) -> None:
    """Send what the transaction owes on its own (one round trip for all of it), when the next
    statement cannot take it along: one that Core sends, a server-side cursor."""
    owed = _take_owed(dbapi)
    if owed is None:
        return
    if dbapi.pgconn.pipeline_status:
        _send(dbapi, owed)
        return
    with dbapi.pipeline():
        _send(dbapi, owed)


def owing(engine: Any) -> None:
    """Install the listeners that keep ``owe``'s promise on a PostgreSQL engine: Core's
    statements pay what is owed first; a transaction that begins forgets what an earlier one
    owed and never sent (it ended before its next statement).

    A transaction's ``BEGIN`` is owed too. Left to psycopg, ``BEGIN`` goes out before a
    transaction's first statement and, inside a pipeline, is followed by a sync that waits for
    its answer: a round trip of its own in every transaction (a single submission's eighth).
    So psycopg's connections are in autocommit mode, where it sends no ``BEGIN``, and the
    transaction's own ``BEGIN`` is owed when SQLAlchemy begins it: it travels with the first
    statement. ``commit()`` and ``rollback()`` still end it (psycopg sends them whenever the
    server says a transaction is open); a transaction that ended before its first statement
    never began on the server, which is the same as one that began and did nothing."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _autocommit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.autocommit = True

    @event.listens_for(engine, "begin")
    def _begin_owed(conn: Connection) -> None:
        dbapi = conn.connection.dbapi_connection
        setattr(dbapi, _OWED, [("BEGIN", None, False)])
        setattr(dbapi, _OWES_WRITE, False)

    @event.listens_for(engine, "commit")
    def _commit_with_owed_writes(conn: Connection) -> None:
        dbapi: Any = conn.connection.dbapi_connection
        if not getattr(dbapi, _OWES_WRITE, False):
            return  # psycopg commits what began, if anything did
        owed = _take_owed(dbapi)
        assert owed is not None
        import psycopg

        try:
            with dbapi.pipeline():  # the writes and the COMMIT in one round trip; psycopg's own
                _send(dbapi, owed)  # commit() then finds no transaction open
                dbapi.execute("COMMIT")
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            # The session is gone (a killed backend, a restarted server): the pool must not
            # hand this connection out again, nor try to reset it (SQLAlchemy does so for the
            # errors it sees itself; this one is raised inside its commit event).
            conn.invalidate(exc)
            raise

    @event.listens_for(engine, "before_cursor_execute")
    def _pay_first(conn: Connection, *_: Any) -> None:
        pay_owed(conn.connection.dbapi_connection)


_MAX_PARAMS = 30000  # below SQLite's 32766 host parameters
_MAX_ROWS = 500
PG_ROWS = 5000  # rows per unnest statement: bounds the arrays held in memory at once
_insert_sql: dict[tuple[str, tuple[str, ...], int], str] = {}


def _multi_insert_sql(table: str, columns: tuple[str, ...], n: int) -> str:
    """SQLite's multi-row ``INSERT ... VALUES``."""
    key = (table, columns, n)
    sql = _insert_sql.get(key)
    if sql is None:
        rows = ("(" + ", ".join(["?"] * len(columns)) + ")" for _ in range(n))
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES " + ", ".join(rows)
        _insert_sql[key] = sql
    return sql


def pg_array_types(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> list[str]:
    """PostgreSQL array types of ``columns``, for ``%b::type[]`` parameters.

    Without lengths: a cast to ``varchar(n)`` cuts an over-long value short without a word,
    where storing it in the ``varchar(n)`` column refuses it, as a plain ``INSERT`` would."""
    out = []
    for name in columns:
        column_type = table.c[name].type
        bare = column_type.compile(dialect=dialect).split("(")[0]
        out.append(f"{bare}[]")
    return out


def unnest(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> str:
    """``unnest(%b::type[], ...)``: rows of ``columns`` of ``table`` as one array parameter each."""
    return "unnest(" + ", ".join(f"%b::{t}" for t in pg_array_types(dialect, table, columns)) + ")"


def ordered_rows(dialect: Dialect, table: Table, columns: tuple[str, ...], where: str = "") -> str:
    """``SELECT`` of array rows in the order they were given (``WITH ORDINALITY``), so ids a
    sequence assigns while inserting them follow that order: a run's events and transitions
    are read back by id."""
    listed = ", ".join(f"x.{c}" for c in columns)
    filtered = f" WHERE {where}" if where else ""
    source = unnest(dialect, table, columns)
    return f"SELECT {listed} FROM {source} WITH ORDINALITY AS x({', '.join(columns)}, _ord){filtered} ORDER BY x._ord"


_unnest_sql: dict[tuple[str, tuple[str, ...], str], str] = {}


def _unnest_insert_sql(dialect: Dialect, table: Table, columns: tuple[str, ...], suffix: str) -> str:
    key = (table.name, columns, suffix)
    sql = _unnest_sql.get(key)
    if sql is None:
        rows = ordered_rows(dialect, table, columns)
        sql = f"INSERT INTO {table.name} ({', '.join(columns)}) {rows} {suffix}".rstrip()
        _unnest_sql[key] = planned_once(sql)
    return sql


def insert_rows(
    conn: Connection, table: Table, columns: tuple[str, ...], rows: Sequence[Sequence[Any]], *, suffix: str = ""
) -> list[tuple[Any, ...]]:
    """Insert ``rows`` (tuples in ``columns`` order) with one statement per chunk of rows.

    ``suffix`` ends each statement (``ON CONFLICT DO NOTHING RETURNING ...``); whatever the
    statements return comes back.

    On PostgreSQL the rows go in as one array per column (``INSERT ... SELECT * FROM
    unnest(%b::varchar[], ...)``): the statement's text is the same whatever the number of
    rows, so it is parsed and planned like a small one, where a 500-row ``VALUES`` list has
    22,000 parameters to parse, send and plan one by one. The arrays travel in binary
    (``%b``): psycopg escapes each string of a text-format array with a regular expression,
    eight times slower (measured: 12 ms against 1.4 ms for 5,000 run ids).
    """
    if not rows:
        return []
    dialect = conn.dialect.name
    out: list[tuple[Any, ...]] = []
    if dialect == "postgresql":
        sql = _unnest_insert_sql(conn.dialect, table, columns, suffix)
        for start in range(0, len(rows), PG_ROWS):
            out.extend(run_arrays(conn, sql, rows[start : start + PG_ROWS])[1])
        return out
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        per_statement = max(1, min(_MAX_ROWS, _MAX_PARAMS // len(columns)))
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            sql = _multi_insert_sql(table.name, columns, len(chunk))
            cursor.execute(f"{sql} {suffix}" if suffix else sql, list(chain.from_iterable(chunk)))
            if cursor.description is not None:  # the suffix returns rows
                out.extend(tuple(r) for r in cursor.fetchall())
    finally:
        cursor.close()
    return out


def _column_names(cursor: Any) -> list[str]:
    """The names of the columns of a cursor's current result (one that returned rows).

    What ``[d[0] for d in cursor.description]`` says, without psycopg's ``Column`` object a
    column: building them took 155 µs for ``job_runs``' 54 columns (``timeit``, 2026-12-04),
    more than the statement's own time on the server, and a single submission reads several
    such results; the result's field names are read in 6 µs. Column names are ASCII
    identifiers, the same bytes in every client encoding. sqlite3's description is a plain
    tuple already."""
    result = getattr(cursor, "pgresult", None)
    if result is None:
        return [d[0] for d in cursor.description]
    return [result.fname(i).decode("utf-8") for i in range(result.nfields)]


def _returns_rows(cursor: Any) -> bool:
    """Whether the cursor's current result has rows to fetch (``cursor.description is not
    None``, without building the description): a result with columns. Every statement here
    that returns rows returns at least one column."""
    result = getattr(cursor, "pgresult", None)
    if result is None:
        return cursor.description is not None
    return bool(result.nfields)


# A parameter placeholder of hand-built PostgreSQL SQL (``%%`` is a literal percent sign); group
# 1 is the element type of an array parameter, ``%b::type[]``.
_PLACEHOLDER = re.compile(r"%%|%[sbt](?:::([A-Za-z][A-Za-z0-9_ ]*)\[\])?")
_array_params: dict[str, tuple[tuple[int, int, int, str], ...]] = {}
_one_row_forms: dict[tuple[str, tuple[int, ...]], str] = {}


def _one_row_form(sql: str, params: Any) -> tuple[str, Any]:
    """The statement with a scalar parameter for each array parameter that holds one value.

    Rows go to PostgreSQL as one array a column (``insert_rows``), which costs psycopg a list
    dumper a column, in Python: for a single submission's run, its transitions and its audit
    entry, dumping fifty small lists was a fifth of the client's CPU (py-spy). An array of one
    value is the same as ``ARRAY[value]``: ``%b::type[]`` becomes ``ARRAY[%b::type]`` and the
    value goes alone (the arrays of one ``unnest`` are all of one length, the rows', so they
    change together). Statements are built once each; the forms are kept by statement."""
    if not isinstance(params, list):
        return sql, params
    arrays = _array_params.get(sql)
    if arrays is None:
        if len(_array_params) >= 4096:  # statements are built once each; this only bounds a surprise
            _array_params.clear()
            _one_row_forms.clear()
        found_arrays = []
        index = 0
        for found in _PLACEHOLDER.finditer(sql):
            if found.group(0) == "%%":
                continue
            if found.group(1) is not None:
                found_arrays.append((index, found.start(), found.end(), found.group(1)))
            index += 1
        arrays = _array_params[sql] = tuple(found_arrays)
    single = tuple(i for i, _, _, _ in arrays if i < len(params) and type(params[i]) is list and len(params[i]) == 1)
    if not single:
        return sql, params
    text = _one_row_forms.get((sql, single))
    if text is None:
        pieces: list[str] = []
        last = 0
        for i, start, end, element in arrays:
            if i in single:
                pieces += (sql[last:start], f"ARRAY[%b::{element}]")
                last = end
        text = _one_row_forms[(sql, single)] = "".join(pieces) + sql[last:]
    scalars = list(params)
    for i in single:
        scalars[i] = params[i][0]
    return text, scalars


def run(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> int:
    """Execute one statement with parameters; returns the number of rows it changed."""
    sql, names, defaults = _compile(conn, stmt)
    return run_sql(conn, sql, _bind(names, defaults, params))


def run_arrays(conn: Connection, sql: str, *row_sets: Sequence[Sequence[Any]]) -> tuple[int, list[tuple[Any, ...]]]:
    """Execute PostgreSQL ``sql`` whose ``%b`` parameters take each of ``row_sets`` (in order,
    none empty) as one array per column; returns the number of rows it changed and the rows
    it returned (if any)."""
    params = [list(column) for rows in row_sets for column in zip(*rows, strict=True)]
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        _execute(cursor, *_one_row_form(sql, params), marked=sql)
        returned = [tuple(r) for r in cursor.fetchall()] if _returns_rows(cursor) else []
        return int(cursor.rowcount), returned
    finally:
        cursor.close()


def run_sql(conn: Connection, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> int:
    """Execute hand-built SQL in the driver's own parameter style; returns the rows changed."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        _execute(cursor, *_one_row_form(sql, params), marked=sql)
        return int(cursor.rowcount)
    finally:
        cursor.close()


def execute(conn: Connection, sql: str) -> None:
    """A parameterless statement (SAVEPOINT, RELEASE) on the transaction's own connection."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        _execute(cursor, sql)
    finally:
        cursor.close()


def rows(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Execute one query straight through the driver; rows as plain tuples in select order."""
    sql, names, defaults = _compile(conn, stmt)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        _execute(cursor, sql, _bind(names, defaults, params))
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


def rows_sql(conn: Connection, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """``rows`` for hand-built SQL in the driver's own parameter style."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        _execute(cursor, *_one_row_form(sql, params), marked=sql)
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


def returning(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Execute one statement with RETURNING straight through the driver; rows as plain dicts."""
    sql, names, defaults = _compile(conn, stmt)
    return returning_sql(conn, sql, _bind(names, defaults, params))


def first(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first row of a query built once (bind parameters, no expanding ones) as a dict of
    column names, or None: a submission's reads of definitions, approvals and safe mode, where
    building and compiling a statement per call cost more than SQLite's own work."""
    found = returning(conn, stmt, params)
    return found[0] if found else None


def returning_sql(conn: Connection, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> list[dict[str, Any]]:
    """``returning`` for hand-built SQL in the driver's own parameter style."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        _execute(cursor, *_one_row_form(sql, params), marked=sql)
        return _dict_rows(cursor)
    finally:
        cursor.close()


def _dict_rows(cursor: Any) -> list[dict[str, Any]]:
    """The cursor's current result as dicts of column names."""
    columns = _column_names(cursor)
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def returning_each(conn: Connection, queries: Sequence[tuple[Any, Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
    """``returning`` for several statements built once, their rows in order. On PostgreSQL they
    travel together through psycopg's pipeline mode: one round trip for all, where each waited
    for the last's answer (a submission's first reads; the audit chain's head and floors). The
    server still runs them one after the other, each statement seeing what committed before
    it started: a statement after a ``FOR UPDATE`` sees what the lock's previous holder wrote."""
    if not queries:
        return []  # an empty pipeline would still cost a round trip
    if conn.dialect.name != "postgresql":
        return [returning(conn, stmt, params) for stmt, params in queries]
    dbapi: Any = conn.connection.dbapi_connection
    cursors = [dbapi.cursor() for _ in queries]
    try:
        with dbapi.pipeline():
            for cursor, (stmt, params) in zip(cursors, queries, strict=True):
                sql, names, defaults = _compile(conn, stmt)
                _execute(cursor, sql, _bind(names, defaults, params))
        return [_dict_rows(cursor) for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()


def rows_sql_then(
    conn: Connection, sql: str, params: Sequence[Any], queries: Sequence[tuple[Any, Mapping[str, Any]]]
) -> tuple[list[tuple[Any, ...]], list[list[dict[str, Any]]]]:
    """``rows_sql``, then ``queries`` (statements built once) after it in the same pipeline on
    PostgreSQL: one round trip, the server running them in order (a lock the queries take is
    taken after what the first statement locked). Returns the first's rows and each query's."""
    if not queries:
        return rows_sql(conn, sql, params), []
    if conn.dialect.name != "postgresql":
        return rows_sql(conn, sql, params), [returning(conn, stmt, p) for stmt, p in queries]
    dbapi: Any = conn.connection.dbapi_connection
    cursors = [dbapi.cursor() for _ in range(len(queries) + 1)]
    try:
        with dbapi.pipeline():
            _execute(cursors[0], *_one_row_form(sql, list(params)), marked=sql)
            for cursor, (stmt, values) in zip(cursors[1:], queries, strict=True):
                text, names, defaults = _compile(conn, stmt)
                _execute(cursor, text, _bind(names, defaults, values))
        first = [tuple(row) for row in cursors[0].fetchall()] if _returns_rows(cursors[0]) else []
        return first, [_dict_rows(cursor) for cursor in cursors[1:]]
    finally:
        for cursor in cursors:
            cursor.close()


_streams = count()


def stream(
    conn: Connection, stmt: Any, params: Mapping[str, Any] | None = None, *, size: int = 10_000
) -> Iterator[dict[str, Any]]:
    """The rows of a query as dicts of column names, ``size`` at a time, straight through the
    driver: what verifying a million sealed runs reads, where SQLAlchemy's row objects cost
    more than hashing them. On PostgreSQL a server-side cursor, so the rows are never all in
    memory at once."""
    sql, names, defaults = _compile(conn, stmt)
    dbapi = conn.connection.dbapi_connection
    named = conn.dialect.name == "postgresql"
    if named:
        pay_owed(dbapi)  # a server-side cursor cannot travel in a pipeline
    cursor = dbapi.cursor(name=f"jobgate_stream_{next(_streams)}") if named else dbapi.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, _bind(names, defaults, params or {}))
        columns = _column_names(cursor)
        while True:
            chunk = cursor.fetchmany(size)
            if not chunk:
                return
            for row in chunk:
                yield dict(zip(columns, row, strict=True))
    finally:
        cursor.close()
