"""Run status changes at the store's door: each a compare-and-set on the expected status and
fencing token, grouped by (from, to) shape into one statement per group; a change that does not
match writes nothing at all, not even its transition, events or seal. Events leave through the
outbox rows written here, in the same transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Connection,
    Dialect,
)

from jobgate.core import seals
from jobgate.core.states import LEASED, TERMINAL, RunStatus
from jobgate.core.transitions import RunChange, check_change
from jobgate.store import codec
from jobgate.store.sql import driver, letters
from jobgate.store.sql import seals as record_seals
from jobgate.store.sql.outbox import OUTBOX_COLUMNS, event_rows
from jobgate.store.sql.predicates import (
    chunks,
)
from jobgate.store.tables import (
    dead_letters,
    job_runs,
    outbox,
    run_transitions,
    seal_values,
)
from jobgate.store.tables import record_seals as record_seals_table

C = job_runs.c


_GroupKey = tuple[RunStatus, RunStatus, bool, bool, bool, bool, tuple[str, ...]]


def _cas_sets(key: _GroupKey, value: Any) -> str:
    """The SET list of a group's compare-and-set; ``value(i)`` names the i-th new value."""
    _src, dst, _fenced, revoke, start, _expiry, columns = key
    sets = [f"status = '{dst.value}'", "transition_count = job_runs.transition_count + 1"]  # its transition
    if dst not in LEASED:
        sets += ["lease_owner = NULL", "lease_expires_at = NULL", "stop_requested = false"]
    if revoke:
        sets.append("lease_token = job_runs.lease_token + 1")
    if start:
        sets.append("attempt = job_runs.attempt + 1")
    sets += [f"{c} = {value(i)}" for i, c in enumerate(columns)]
    return ", ".join(sets)


def _cas_where(key: _GroupKey, v_id: str, v_token: str, v_expired: str, *, status: str | None = None) -> str:
    src, _dst, fenced, _revoke, _start, expiry, _columns = key
    expected = status or f"'{src.value}'"
    where = [f"job_runs.job_run_id = {v_id}", f"job_runs.status = {expected}"]
    if fenced:
        where.append(f"job_runs.lease_token = {v_token}")
    if expiry:
        where.append(f"job_runs.lease_expires_at < {v_expired}")
    return " AND ".join(where)


def _cas_sqlite_sql(key: _GroupKey, n: int) -> str:
    """A group's compare-and-set for ``n`` rows as one SQLite ``UPDATE ... FROM (VALUES ...)``.

    Each VALUES row is ``(id, token, expired_before, *new values)``, SQLite names its columns
    ``column1``, ``column2``, ...; the join on the primary key touches only the listed rows.
    """
    sets = _cas_sets(key, lambda i: f"v.column{4 + i}")
    where = _cas_where(key, "v.column1", "v.column2", "v.column3")
    row = "(" + ", ".join(["?"] * (3 + len(key[6]))) + ")"
    return f"UPDATE job_runs SET {sets} FROM (VALUES {', '.join([row] * n)}) AS v WHERE {where}"


def _cas_postgres_sql(dialect: Dialect, key: _GroupKey, *, one_row: bool = False) -> str:
    """The same for PostgreSQL, the rows as one array per column (``unnest``): one statement
    text whatever the number of rows, where ``executemany`` paid a statement per row.

    ``one_row``: the values of a single run as scalar parameters of a sub-select, which the
    planner folds into the statement, so the run is found by its key in any plan: one that the
    server keeps (``driver.planned_once``). Joined from ``unnest``, even one row's generic plan
    scanned the table (``tests/runtime/test_planned_once.py``)."""
    columns = key[6]
    named = ("job_run_id", "lease_token", "lease_expires_at", *columns)
    if one_row:
        types = driver.pg_array_types(dialect, job_runs, named)
        rows = "(SELECT " + ", ".join(f"%b::{t.removesuffix('[]')}" for t in types) + ")"
    else:
        rows = driver.unnest(dialect, job_runs, named)
    names = ", ".join(["id", "token", "expired_before", *(f"c{i}" for i in range(len(columns)))])
    sets = _cas_sets(key, lambda i: f"v.c{i}")
    # The expected status is a sub-select, not a literal: a literal matches the predicate of the
    # partial index on leased runs, and with the statistics of a table that grew since its last
    # ANALYZE the planner then read every leased run (and the dead index entries of runs that
    # left the lease) to find a batch: 3.4 of a 9.7 ms settlement with 12,000 entries, where the
    # batch needs one primary-key probe per row.
    where = _cas_where(key, "v.id", "v.token", "v.expired_before", status=f"(SELECT '{key[0].value}'::varchar)")
    return f"UPDATE job_runs SET {sets} FROM {rows} AS v({names}) WHERE {where}"


def _apply_postgres_sql(dialect: Dialect, key: _GroupKey, with_events: bool, with_seals: bool, one_row: bool) -> str:
    """A group's compare-and-set, the transitions, the events and the precomputed seals of the
    rows it changed, as one statement: the rows that did not match write nothing, and no
    savepoint or second round trip is needed to learn which they were (``RETURNING``)."""

    def insert_changed(name: str, table: Any, columns: tuple[str, ...]) -> str:
        rows = driver.ordered_rows(dialect, table, columns, "x.job_run_id IN (SELECT job_run_id FROM changed)")
        return f"{name} AS (INSERT INTO {table.name} ({', '.join(columns)}) {rows})"

    parts = [
        f"changed AS ({_cas_postgres_sql(dialect, key, one_row=one_row)} RETURNING job_runs.job_run_id)",
        insert_changed("recorded", run_transitions, codec.TRANSITION_COLUMNS),
    ]
    if with_events:
        parts.append(insert_changed("announced", outbox, OUTBOX_COLUMNS))
    if with_seals:  # holding the seal writers' lock shared, as every seal insert does
        parts.append(f"seal_writers AS (SELECT pg_advisory_xact_lock_shared({record_seals.SEAL_WRITERS}))")
        parts += _packed_seals_sql(dialect)
    return "WITH " + ", ".join(parts) + " SELECT job_run_id FROM changed"


def _packed_seals_sql(dialect: Dialect) -> list[str]:
    """The seal rows of the runs a group changed, their values packed (``core.seals``): the
    packs first (``tenant_id``, ``packed`` arrays), then the rows without their content, each
    pointing at its tenant's pack. A pack whose runs' changes all missed (a lease lost) stays,
    pointed at by nothing: diagnosis only, and rarer than a round trip to avoid it is worth."""
    packs = driver.unnest(dialect, seal_values, ("tenant_id", "packed"))
    columns = record_seals.PACKED_COLUMNS
    source = driver.unnest(dialect, record_seals_table, columns)
    names = ", ".join(columns)
    listed = ", ".join(f"x.{c}" for c in columns)
    ref = "'{\"" + seals.PACKED + "\":' || p.id || '}'"
    return [
        f"packed AS (INSERT INTO seal_values (tenant_id, packed) SELECT * FROM {packs} RETURNING id, tenant_id)",
        f"sealed AS (INSERT INTO record_seals ({names}, content)"
        f" SELECT {listed}, CASE WHEN p.id IS NULL THEN NULL ELSE {ref} END"
        f" FROM {source} WITH ORDINALITY AS x({names}, _ord)"
        " LEFT JOIN packed p ON p.tenant_id = x.tenant_id CROSS JOIN seal_writers"
        " WHERE x.record_id IN (SELECT job_run_id FROM changed) ORDER BY x._ord)",
    ]


_apply_sql_cache: dict[tuple[_GroupKey, bool, bool, bool], str] = {}


def _apply_postgres(conn: Connection, prepared: PreparedChanges) -> tuple[list[RunChange], set[str]]:
    """PostgreSQL's ``runs_apply`` for changes without dead letters: one statement per group.
    Returns the changes applied and the runs whose precomputed seals the statements wrote."""
    accepted: set[str] = set()
    sealed: set[str] = set()
    for key, items, rows in prepared.groups:
        transitions = [prepared.transitions[ch.job_run_id] for ch in items]
        events = [row for ch in items for row in prepared.events[ch.job_run_id]]
        ready = [prepared.seals[ch.job_run_id] for ch in items if ch.job_run_id in prepared.seals]
        one_row = len(rows) == 1
        shape = (key, bool(events), bool(ready), one_row)
        sql = _apply_sql_cache.get(shape)
        if sql is None:
            sql = _apply_postgres_sql(conn.dialect, *shape)
            _apply_sql_cache[shape] = driver.planned_once(sql) if one_row else sql
        row_sets = [transitions] + ([events] if events else [])
        if ready:
            row_sets += [list(record_seals.pack(ready).items()), [record_seals.without_content(r) for r in ready]]
        if one_row:  # the run's values as scalars, the rest as arrays
            params = [*rows[0], *(list(column) for r in row_sets for column in zip(*r, strict=True))]
            changed = {r[0] for r in driver.rows_sql(conn, sql, params)}
        else:
            changed = {r[0] for r in driver.run_arrays(conn, sql, rows, *row_sets)[1]}
        accepted |= changed
        sealed |= {ch.job_run_id for ch in items if ch.job_run_id in prepared.seals} & changed
    return [ch for ch in prepared.changes if ch.job_run_id in accepted], sealed


_cas_sql_cache: dict[tuple[_GroupKey, int], str] = {}


def _cas_rows(conn: Connection, key: _GroupKey, rows: Sequence[tuple[Any, ...]]) -> int:
    """Apply one group's compare-and-sets; returns how many rows matched."""
    if conn.dialect.name == "sqlite":
        changed = 0
        for chunk in chunks(rows, 200):
            sql = _cas_sql_cache.get((key, len(chunk)))
            if sql is None:
                sql = _cas_sql_cache[(key, len(chunk))] = _cas_sqlite_sql(key, len(chunk))
            changed += driver.run_sql(conn, sql, [value for row in chunk for value in row])
        return changed
    sql = _cas_sql_cache.get((key, 0))
    if sql is None:
        sql = _cas_sql_cache[(key, 0)] = _cas_postgres_sql(conn.dialect, key)
    return driver.run_arrays(conn, sql, rows)[0]


def _values(ch: RunChange, values: Mapping[str, Any], columns: tuple[str, ...]) -> tuple[Any, ...]:
    expired = None if ch.lease_expired_before is None else codec.to_us(ch.lease_expired_before)
    return (ch.job_run_id, ch.expected_token, expired, *(codec.column(values[c]) for c in columns))


@dataclass(frozen=True)
class PreparedChanges:
    """Changes turned into rows, ready to execute.

    Preparing is pure Python and needs no connection, so a worker does it before it takes the
    database's write lock: the lock is then held only while the rows are written.
    """

    changes: list[RunChange]
    groups: list[tuple[_GroupKey, list[RunChange], list[tuple[Any, ...]]]]
    transitions: dict[str, tuple[Any, ...]]
    events: dict[str, list[tuple[Any, ...]]]
    letters: dict[str, dict[str, Any]]
    seals: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # precomputed seal rows, by run
    # Their values packed by tenant (``store.sql.seals.pack``), when packed before the transaction.
    packed: dict[str, bytes] = field(default_factory=dict)
    # The history chain each chained change leaves if it applies (``store.sql.chains``).
    chains: dict[str, Any] = field(default_factory=dict)


def prepare_changes(
    changes: Sequence[RunChange],
    *,
    values: Mapping[str, Mapping[str, Any]] | None = None,
    transitions: Mapping[str, tuple[Any, ...]] | None = None,
) -> PreparedChanges:
    """Group ``changes`` by kind and make their rows. ``values``: columns set besides a change's
    own, by run (the history chains, ``store.sql.chains``); ``transitions``: transition rows
    already made, by run."""
    groups: dict[_GroupKey, list[tuple[RunChange, Mapping[str, Any]]]] = defaultdict(list)
    for ch in changes:
        more = values.get(ch.job_run_id) if values else None
        columns = {**ch.values, **more} if more else ch.values
        key = (
            ch.from_status,
            ch.to_status,
            ch.expected_token is not None,
            ch.revoke_lease,
            ch.start_attempt,
            ch.lease_expired_before is not None,
            tuple(sorted(columns)),
        )
        groups[key].append((ch, columns))
    made = transitions or {}
    return PreparedChanges(
        changes=list(changes),
        groups=[
            (k, [ch for ch, _ in items], [_values(ch, columns, k[6]) for ch, columns in items])
            for k, items in groups.items()
        ],
        transitions={
            ch.job_run_id: made.get(ch.job_run_id) or codec.transition_values(ch.transition, ch.tenant_id)
            for ch in changes
        },
        events={ch.job_run_id: event_rows(ch.job_run_id, ch.tenant_id, ch.events, ch.transition.at) for ch in changes},
        letters={ch.job_run_id: codec.dead_letter_row(ch.dead_letter) for ch in changes if ch.dead_letter},
    )


def runs_apply(conn: Connection, changes: Sequence[RunChange] | PreparedChanges) -> list[RunChange]:
    """Apply compare-and-set status changes; return those that matched, in input order.

    Each kind of change is one batch. On PostgreSQL the batch's ``RETURNING`` says which rows
    matched, and its transitions and events are written in the same statement for those alone.
    Otherwise (SQLite, or a batch with dead letters to number): when every row matched (the
    normal case) that is all; when some did not, the group is rolled back to a savepoint and
    applied row by row, so the caller learns exactly which changes were made and writes
    consequences only for those.
    """
    prepared = changes if isinstance(changes, PreparedChanges) else prepare_changes(changes)
    for ch in prepared.changes:  # made by ``core.transitions``, which checked; checked again at the door
        check_change(ch)
    written: set[str] = set()
    if conn.dialect.name == "postgresql" and not prepared.letters:
        done, written = _apply_postgres(conn, prepared)
    else:
        done = _apply_generic(conn, prepared)
    # Every run that has just ended is sealed in the transaction that ended it (``core.seals``):
    # with the seal computed before the lock where the caller could (``Store.prepare_changes``:
    # on PostgreSQL then written by the change's own statement), else here.
    ended = [ch.job_run_id for ch in done if ch.to_status in TERMINAL and ch.job_run_id not in written]
    if ended:
        ready = [prepared.seals[i] for i in ended if i in prepared.seals]
        record_seals.insert_sealed(conn, ready, prepared.packed or None)
        rest = [i for i in ended if i not in prepared.seals]
        if rest:
            record_seals.seal_runs(conn, rest, codec.to_us(max(ch.transition.at for ch in done)))
    return done


def _apply_generic(conn: Connection, prepared: PreparedChanges) -> list[RunChange]:
    """SQLite's ``runs_apply`` (and PostgreSQL's for batches with dead letters to number)."""
    accepted: set[str] = set()
    for key, items, rows in prepared.groups:
        driver.execute(conn, "SAVEPOINT jobgate_cas")
        if _cas_rows(conn, key, rows) == len(rows):
            driver.execute(conn, "RELEASE SAVEPOINT jobgate_cas")
            accepted.update(ch.job_run_id for ch in items)
            continue
        driver.execute(conn, "ROLLBACK TO SAVEPOINT jobgate_cas")
        driver.execute(conn, "RELEASE SAVEPOINT jobgate_cas")
        for ch, row in zip(items, rows, strict=True):
            if _cas_rows(conn, key, [row]) == 1:
                accepted.add(ch.job_run_id)
    done = [ch for ch in prepared.changes if ch.job_run_id in accepted]
    if done:
        transitions = [prepared.transitions[ch.job_run_id] for ch in done]
        driver.insert_rows(conn, run_transitions, codec.TRANSITION_COLUMNS, transitions)
        derived = {ch.job_run_id: ch.dead_letter.dead_letter_id for ch in done if ch.dead_letter is not None}
        # A run requeued and dead-lettered again at the same attempt: its repeat is numbered.
        repeats = letters.letters_renumber(conn, derived) if derived else {}
        if repeats:
            done = [ch.with_dead_letter_id(repeats[ch.job_run_id]) if ch.job_run_id in repeats else ch for ch in done]
        if derived:
            conn.execute(
                _INSERT_DEAD_LETTERS,
                [
                    codec.dead_letter_row(ch.dead_letter)
                    if ch.job_run_id in repeats
                    else prepared.letters[ch.job_run_id]
                    for ch in done
                    if ch.dead_letter is not None
                ],
            )
        events = [
            row
            for ch in done
            for row in (
                event_rows(ch.job_run_id, ch.tenant_id, ch.events, ch.transition.at)
                if ch.job_run_id in repeats
                else prepared.events[ch.job_run_id]
            )
        ]
        driver.insert_rows(conn, outbox, OUTBOX_COLUMNS, events)
    return done


_INSERT_DEAD_LETTERS = dead_letters.insert()
