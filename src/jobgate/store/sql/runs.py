"""Runs: creation keyed by idempotency key, reads, lists. (Worker writes live in ``claims``.)"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, ColumnElement, Connection, Select, String, and_, bindparam, func, or_, select

from jobgate.core import seals
from jobgate.core.history import attempts_from_transitions
from jobgate.core.models import Attempt, DeadLetter, JobRun, Transition
from jobgate.core.states import RunStatus
from jobgate.scheduling import plan
from jobgate.store import codec
from jobgate.store.base import RunCreate, RunFilter
from jobgate.store.sql import driver
from jobgate.store.sql.predicates import starts_with
from jobgate.store.tables import dead_letters, job_runs, retired_runs, run_transitions

_RUN_INSERT_COLUMNS = (
    "job_run_id",
    "tenant_id",
    "idempotency_key",
    "job_definition_id",
    "definition_version",
    "definition_digest",
    "job_class",
    "trigger_id",
    "trigger_type",
    "trigger",
    "scope",
    "params",
    "workflow_run_id",
    "config_snapshot_id",
    "config_digest",
    "status",
    "attempt",
    "max_attempts",
    "priority",
    "priority_rank",
    "queue",
    "retry_policy",
    "retry_policy_doc",
    "concurrency_limit",
    "rate_limit_per_second",
    "execution_timeout_us",
    "requested_by",
    "created_at",
    "due_at",
    "queue_deadline_at",
    "lease_token",
    "stop_requested",
    "reviewed_by",
    "slot",
    "transition_count",
    "history_hash",
    "history_extent",
    "retry_of",
)


def run_values(c: RunCreate, transitions: Sequence[tuple[Any, ...]]) -> tuple[object, ...]:
    """A new run's column values, in ``_RUN_INSERT_COLUMNS`` order; ``transitions`` are its
    creation's transitions as rows (their history chain is kept on the run)."""
    r = c.run
    return (
        r.job_run_id,
        r.tenant_id,
        r.idempotency_key,
        r.job_definition_id,
        r.definition_version,
        r.definition_digest,
        str(r.job_class),
        r.trigger_id,
        r.trigger_type.value,
        codec.dumps(c.trigger),
        codec.dumps(r.scope),
        codec.dumps(r.params),
        r.workflow_run_id,
        r.config_snapshot_id,
        r.config_digest,
        r.status.value,
        r.attempt,
        r.max_attempts,
        r.priority.value,
        r.priority.rank,
        r.queue,
        r.retry_policy,
        None if r.bound_retry_policy is None else codec.dumps(r.bound_retry_policy),
        c.concurrency_limit,
        c.rate_limit_per_second,
        None if r.execution_timeout is None else int(r.execution_timeout.total_seconds() * 1e6),
        r.requested_by,
        codec.to_us(r.created_at),
        codec.to_us(r.due_at),
        codec.opt_us(r.queue_deadline_at),
        0,
        False,
        r.reviewed_by,
        r.slot,
        len(transitions),
        seals.history_of([t[2:] for t in transitions]),
        len(transitions),
        r.retry_of,
    )


def _insert_ignoring_duplicates(conn: Connection, rows: list[tuple[object, ...]]) -> set[str]:
    """INSERT ... ON CONFLICT DO NOTHING RETURNING: the database decides who was first (the
    idempotency key is unique), and tells us which rows this statement made (a concurrent
    creator's rows are not ours)."""
    suffix = "ON CONFLICT DO NOTHING RETURNING job_run_id"
    return {r[0] for r in driver.insert_rows(conn, job_runs, _RUN_INSERT_COLUMNS, rows, suffix=suffix)}


def _create_in_one_statement(
    conn: Connection,
    run_rows: list[tuple[object, ...]],
    transition_rows: list[tuple[Any, ...]],
    notify_channel: str | None,
    then: Sequence[tuple[Any, dict[str, Any]]] = (),
) -> tuple[set[str], list[list[dict[str, Any]]]]:
    """PostgreSQL: the runs, the transitions of those this statement made, and the wake-up, in
    one round trip (data-modifying ``WITH``) where they were three: a single submission waits
    on each round trip in turn; ``then``'s statements travel after it. Returns the ids of the
    runs it made and the rows of ``then``'s statements."""
    sql = _create_sql(conn, notify_channel)
    params: list[Any] = [list(col) for col in zip(*run_rows, strict=True)]
    params += [list(col) for col in zip(*transition_rows, strict=True)]
    if notify_channel is not None:
        params.append(notify_channel)
    made, after = driver.rows_sql_then(conn, sql, params, then)
    return {row[0] for row in made}, after


_create_sqls: dict[str | None, str] = {}


def _create_sql(conn: Connection, notify_channel: str | None) -> str:
    sql = _create_sqls.get(notify_channel)
    if sql is None:
        runs_in = driver.ordered_rows(conn.dialect, job_runs, _RUN_INSERT_COLUMNS)
        moves_in = driver.ordered_rows(
            conn.dialect, run_transitions, codec.TRANSITION_COLUMNS, where="x.job_run_id IN (SELECT id FROM made)"
        )
        announce = ", pg_notify(%s, '')" if notify_channel is not None else ""
        sql = _create_sqls[notify_channel] = driver.planned_once(
            f"WITH made AS (INSERT INTO job_runs ({', '.join(_RUN_INSERT_COLUMNS)}) {runs_in} "
            "ON CONFLICT DO NOTHING RETURNING job_run_id AS id), "
            f"moved AS (INSERT INTO run_transitions ({', '.join(codec.TRANSITION_COLUMNS)}) {moves_in}) "
            f"SELECT id{announce} FROM made"
        )
    return sql


def _insert_order(fresh: dict[str, RunCreate]) -> list[RunCreate]:
    """The runs to insert, in run id order, each slot's first request only (the one a row per
    row insert would have let in; the others find it as the slot's holder).

    Run id order because runs created together share the id's time prefix, and ties in the
    claim order (priority, due time) fall to the row's place in the table: a claim then takes
    runs whose rows, and whose transitions in the index by run, lie side by side. Inserted in
    the callers' order, a claim of 40 runs of one bulk submission dirtied about one index page
    a run (measured: WAL frames by table while a worker drained a backlog)."""
    slots: set[tuple[str, str, str]] = set()  # a slot is a tenant's job's, as the unique index
    first: list[RunCreate] = []
    for c in fresh.values():
        if c.run.slot is not None:
            slot = _slot_of(c.run)
            if slot in slots:
                continue
            slots.add(slot)
        first.append(c)
    first.sort(key=lambda c: c.run.job_run_id)
    return first


def runs_create(
    conn: Connection,
    creates: Sequence[RunCreate],
    *,
    notify_channel: str | None = None,
    then: Sequence[tuple[Any, dict[str, Any]]] = (),
    answers: list[list[dict[str, Any]]] | None = None,
) -> list[tuple[JobRun, bool]]:
    """Insert the runs whose idempotency key and slot are new; return, for every request in
    order, the run stored under its key (or holding its slot) and whether this call created it
    (a key or slot repeated in one call is created once, for its first occurrence).

    ``notify_channel`` (PostgreSQL): announced on it when a run was created, delivered at commit.
    ``then``: statements run after the insert (its round trip, where it is one statement), their
    rows appended to ``answers``."""
    if not creates:
        if answers is not None:
            answers.extend(driver.returning_each(conn, then))
        return []
    fresh: dict[str, RunCreate] = {}
    for c in creates:
        fresh.setdefault(c.run.idempotency_key, c)
    held = _legacy_window_holders(conn, [c.run for c in fresh.values()])
    if held:
        fresh = {key: c for key, c in fresh.items() if key not in held}
    recorded = {key: [codec.transition_values(t, c.run.tenant_id) for t in c.transitions] for key, c in fresh.items()}
    order = _insert_order(fresh)
    run_rows = [run_values(c, recorded[c.run.idempotency_key]) for c in order]
    all_transitions = [row for c in order for row in recorded[c.run.idempotency_key]]
    if conn.dialect.name == "postgresql" and 0 < len(all_transitions) <= driver.PG_ROWS >= len(run_rows):
        made, after = _create_in_one_statement(conn, run_rows, all_transitions, notify_channel, then)
    else:
        made = _insert_ignoring_duplicates(conn, run_rows)
        rows = [row for c in order if c.run.job_run_id in made for row in recorded[c.run.idempotency_key]]
        driver.insert_rows(conn, run_transitions, codec.TRANSITION_COLUMNS, rows)
        if notify_channel is not None and made:
            driver.execute(conn, f"NOTIFY {notify_channel}")
        after = driver.returning_each(conn, then)  # its own round trip here (a bulk insert)
    if answers is not None:
        answers.extend(after)
    if len(made) == len(fresh):
        stored = {key: c.run for key, c in fresh.items()}
    else:
        stored = holders(conn, [c.run for c in fresh.values()])
        _by_id_where_missing(conn, stored, fresh)
    stored.update(held)
    out: list[tuple[JobRun, bool]] = []
    for c in creates:
        run = stored[c.run.idempotency_key]
        out.append((run, run.job_run_id in made))
        made.discard(run.job_run_id)  # a key repeated inside one call is created once
    return out


def _by_id_where_missing(conn: Connection, stored: dict[str, JobRun], fresh: dict[str, RunCreate]) -> None:
    """A run not inserted whose key and slot hold nothing met its own id: the stored run of that
    id is its holder (a retry's id derives from its source run, ``idempotency.retry_run_id``;
    the insert stores nothing when that id exists). Asked only after a conflict."""
    missing = {c.run.job_run_id: key for key, c in fresh.items() if key not in stored}
    if missing:
        for run in runs_by_ids(conn, list(missing)):
            stored[missing[run.job_run_id]] = run


def holders(conn: Connection, runs: Sequence[JobRun]) -> dict[str, JobRun]:
    """For each of these (unstored) runs that has one, the stored run under its idempotency key
    or, failing that, holding its slot; keyed by the given run's idempotency key."""
    by_key = runs_by_keys(conn, [r.idempotency_key for r in runs])
    keys = {r.idempotency_key for r in by_key}
    slots = [r.slot for r in runs if r.idempotency_key not in keys and r.slot is not None]
    return holders_from(conn, runs, by_key, _runs_where(conn, job_runs.c.slot, slots) if slots else [])


def holder_queries(run: JobRun) -> list[tuple[Any, dict[str, Any]]]:
    """``holders`` of one run as statements that can travel together (PostgreSQL's pipeline,
    ``store.sql.ahead``): the runs under its key and, when it has a slot, those holding it."""
    queries: list[tuple[Any, dict[str, Any]]] = [(_BY_ONE["idempotency_key"], {"value": run.idempotency_key})]
    if run.slot is not None:
        queries.append((_by_any("slot"), {"values": [run.slot]}))
    return queries


def holders_from(
    conn: Connection, runs: Sequence[JobRun], by_key: Sequence[JobRun], by_slot: Sequence[JobRun]
) -> dict[str, JobRun]:
    """``holders`` from the runs found under the candidates' keys and slots: a key's run
    first, else the slot's."""
    found = {r.idempotency_key: r for r in by_key}
    wanted = [r for r in runs if r.idempotency_key not in found and r.slot is not None]
    if not wanted:
        return found
    slotted = {_slot_of(r): r for r in by_slot}
    for w in wanted:
        holder = slotted.get(_slot_of(w))
        if holder is not None:
            found[w.idempotency_key] = holder
    found.update(_legacy_window_holders(conn, [w for w in wanted if w.idempotency_key not in found]))
    return found


def _slot_of(run: JobRun) -> tuple[str, str, str]:
    """What a slot is unique over (``ux_job_runs_slot``): the tenant, the job and the slot's name.
    The job is part of it: a schedule id deleted and added again for another job names the same
    instants, and the other job's runs did none of this job's work."""
    return run.tenant_id, run.job_definition_id, run.slot or ""


def _legacy_window_holders(conn: Connection, runs: Sequence[JobRun]) -> dict[str, JobRun]:
    """For each of these runs whose slot is a batch window, the run made before migration 0026
    that holds the same window under the name it had then (the window's end alone), keyed by the
    given run's idempotency key. Such a run holds the slot only if it ran this job over this very
    window, read from its stored trigger: a window of another length ending at the same instant
    is another slot. A store holds such runs only until retention removes them."""
    legacy: dict[str, list[JobRun]] = {}
    for r in runs:
        if r.slot and (name := plan.legacy_window_slot(r.slot)) is not None:
            legacy.setdefault(name, []).append(r)
    if not legacy:
        return {}
    rows = conn.execute(select(job_runs).where(job_runs.c.slot.in_(list(legacy)))).mappings().all()
    out: dict[str, JobRun] = {}
    for row in rows:
        try:
            window = (codec.loads(row["trigger"]) or {}).get("window")
        except (ValueError, AttributeError):  # a trigger no jobgate write made holds nothing
            continue
        for wanted in legacy[row["slot"]]:
            same_job = (row["tenant_id"], row["job_definition_id"]) == (wanted.tenant_id, wanted.job_definition_id)
            if same_job and window == plan.slot_window(wanted.slot or ""):
                out[wanted.idempotency_key] = codec.run_from_row(row)
    return out


def runs_by_ids(conn: Connection, ids: Sequence[str]) -> list[JobRun]:
    return _runs_where(conn, job_runs.c.job_run_id, ids)


def runs_holding_slots(
    conn: Connection, tenant_id: str, pairs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], JobRun]:
    """The run of ``tenant_id`` holding each (job, slot) pair that one holds."""
    wanted = set(pairs)
    if not wanted:
        return {}
    found = _runs_where(conn, job_runs.c.slot, sorted({slot for _, slot in wanted}))
    return {
        (r.job_definition_id, r.slot): r
        for r in found
        if r.slot is not None and r.tenant_id == tenant_id and (r.job_definition_id, r.slot) in wanted
    }


def runs_by_keys(conn: Connection, keys: Sequence[str]) -> list[JobRun]:
    """The runs stored under these idempotency keys (those that exist)."""
    return _runs_where(conn, job_runs.c.idempotency_key, keys)


def _runs_where(conn: Connection, column: ColumnElement[str], values: Sequence[str]) -> list[JobRun]:
    """Runs whose ``column`` is one of ``values``, straight through the driver: a submission
    looks its key up once or twice, and SQLAlchemy's execution and row processing cost more
    than SQLite's own work."""
    if len(values) == 1 and column.key in _BY_ONE:
        return [codec.run_from_row(r) for r in driver.returning(conn, _BY_ONE[column.key], {"value": values[0]})]
    if conn.dialect.name == "postgresql":
        # One array parameter: the same statement text for any number of values. An IN list
        # of 500 parameters was a new text for psycopg to parse on every batch, 17 % of a bulk
        # submit's time (py-spy).
        found = driver.returning(conn, _by_any(column.key), {"values": list(values)})
        return [codec.run_from_row(r) for r in found]
    out: list[JobRun] = []
    for start in range(0, len(values), _IN_CHUNK):
        chunk = values[start : start + _IN_CHUNK]
        size = 1 << (len(chunk) - 1).bit_length()  # a few statement sizes; the spare places NULL
        params = {f"v{i}": chunk[i] if i < len(chunk) else None for i in range(size)}
        out.extend(codec.run_from_row(r) for r in driver.returning(conn, _by_in(column.key, size), params))
    return out


_IN_CHUNK = 512
_VALUES = bindparam("values", type_=ARRAY(String))


# One run by its id or its key: equality on a unique column, a plan the server may keep
# (``driver.planned_once``).
_BY_ONE = {
    name: driver.planned_once(select(job_runs).where(job_runs.c[name] == bindparam("value")))
    for name in ("job_run_id", "idempotency_key")
}
_BY_ID_LOCKED = driver.planned_once(_BY_ONE["job_run_id"].with_for_update())


@functools.cache
def _by_any(column: str) -> Select[Any]:
    """Runs whose ``column`` is any of an array (PostgreSQL), built once a column: a submission
    looks its key up, and building the statement cost more than running it."""
    return select(job_runs).where(job_runs.c[column] == func.any(_VALUES))


@functools.cache
def _by_in(column: str, n: int) -> Select[Any]:
    """``_by_any`` for SQLite: ``IN`` over ``n`` parameters, a power of two (a submission's 1,
    a batch's 512): each statement is built and compiled once."""
    return select(job_runs).where(job_runs.c[column].in_([bindparam(f"v{i}") for i in range(n)]))


def run_get(conn: Connection, job_run_id: str, tenant_id: str | None = None) -> JobRun | None:
    # By its id alone, the tenant compared here: a statement naming both kept a plan that
    # found the tenant's runs by an index on the tenant and filtered them for the id.
    found = driver.returning(conn, _BY_ONE["job_run_id"], {"value": job_run_id})
    if not found or (tenant_id is not None and found[0]["tenant_id"] != tenant_id):
        return None
    return codec.run_from_row(found[0])


def run_lock(conn: Connection, job_run_id: str, *, lock_rows: bool) -> JobRun | None:
    """The run, its row locked until the transaction ends (PostgreSQL; SQLite's one writer holds
    everything already): two changes that each decide from the run's state (a requeue and a
    retry of it) then take turns, the second seeing what the first committed."""
    statement = _BY_ID_LOCKED if lock_rows else _BY_ONE["job_run_id"]
    found = driver.returning(conn, statement, {"value": job_run_id})
    return codec.run_from_row(found[0]) if found else None


def runs_lock_free(conn: Connection, job_run_ids: Sequence[str], *, lock_rows: bool) -> set[str]:
    """Of ``job_run_ids``, the stored runs whose rows this transaction could lock at once, now
    locked until it ends (PostgreSQL, ``SKIP LOCKED``; SQLite's one writer holds them all). A
    run another transaction holds is left for a later pass: a rescuer waiting on a settlement
    whose completion effect outlasts its lease stalled the whole worker it runs in (found by a
    review: 1,414 runs waited 15 s behind one effect)."""
    if not job_run_ids:
        return set()
    c = job_runs.c
    q = select(c.job_run_id).where(c.job_run_id.in_(sorted(set(job_run_ids))))
    if lock_rows:
        q = q.with_for_update(skip_locked=True)
    return {str(r[0]) for r in conn.execute(q)}


def run_retries(conn: Connection, tenant_id: str, source_job_run_id: str, limit: int = 100) -> list[JobRun]:
    """The runs of ``tenant_id`` that retry ``source_job_run_id`` (``retry_of``), oldest first:
    a source run's retry edges (``ix_job_runs_retry_of``). The contract keeps one; a store
    written before it could hold more, and every one is an edge."""
    c = job_runs.c
    q = (
        select(job_runs)
        .where(c.tenant_id == tenant_id, c.retry_of == source_job_run_id)
        .order_by(c.created_at, c.job_run_id)
        .limit(limit)
    )
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def runs_list(conn: Connection, f: RunFilter) -> list[JobRun]:
    c = job_runs.c
    q = select(job_runs)
    if f.tenant_id is not None:
        q = q.where(c.tenant_id == f.tenant_id)
    if f.statuses:
        q = q.where(c.status.in_([s.value for s in f.statuses]))
    if f.job_definition_id:
        q = q.where(c.job_definition_id == f.job_definition_id)
    if f.job_definition_ids is not None:
        q = q.where(c.job_definition_id.in_(f.job_definition_ids))
    if f.job_class:
        q = q.where(c.job_class == f.job_class)
    if f.trigger_type:
        q = q.where(c.trigger_type == f.trigger_type)
    if f.trigger_prefix:
        q = q.where(starts_with(c.trigger_id, f.trigger_prefix))
    if f.created_from:
        q = q.where(c.created_at >= codec.to_us(f.created_from))
    if f.created_to:
        q = q.where(c.created_at < codec.to_us(f.created_to))
    if f.before:
        at, rid = codec.to_us(f.before[0]), f.before[1]
        q = q.where(or_(c.created_at < at, and_(c.created_at == at, c.job_run_id < rid)))
    q = q.order_by(c.created_at.desc(), c.job_run_id.desc()).limit(f.limit)
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def run_transitions_list(conn: Connection, job_run_id: str) -> list[Transition]:
    q = select(run_transitions).where(run_transitions.c.job_run_id == job_run_id).order_by(run_transitions.c.id)
    return [codec.transition_from_row(r) for r in conn.execute(q).mappings()]


def run_attempts_list(conn: Connection, job_run_id: str) -> list[Attempt]:
    return attempts_from_transitions(run_transitions_list(conn, job_run_id))


def dead_letters_list(
    conn: Connection,
    tenant_id: str | None,
    *,
    open_only: bool,
    limit: int = 100,
    before: tuple[datetime, str] | None = None,
) -> list[DeadLetter]:
    """Newest first; ``before`` (created_at, dead_letter_id) of the last row seen pages on."""
    d = dead_letters.c
    q = select(dead_letters)
    if tenant_id is not None:
        q = q.where(d.tenant_id == tenant_id)
    if open_only:
        q = q.where(d.resolved_at.is_(None))
    if before is not None:
        at, did = codec.to_us(before[0]), before[1]
        q = q.where(or_(d.created_at < at, and_(d.created_at == at, d.dead_letter_id < did)))
    q = q.order_by(d.created_at.desc(), d.dead_letter_id.desc()).limit(limit)
    return [codec.dead_letter_from_row(r) for r in conn.execute(q).mappings()]


def runs_created_count(conn: Connection, tenant_id: str, start: datetime, end: datetime) -> int:
    """Runs of ``tenant_id`` created in [start, end): every state and retry counts (seed 001 quota)."""
    c = job_runs.c
    q = select(func.count()).where(
        c.tenant_id == tenant_id, c.created_at >= codec.to_us(start), c.created_at < codec.to_us(end)
    )
    return int(conn.execute(q).scalar_one())


def run_trigger(conn: Connection, job_run_id: str) -> dict[str, Any] | None:
    """The trigger document a run was created with (who, why, request id, payload)."""
    row = conn.execute(select(job_runs.c.trigger).where(job_runs.c.job_run_id == job_run_id)).first()
    return None if row is None else dict(codec.loads(row[0]))


def run_progress_get(conn: Connection, job_run_id: str) -> tuple[float | None, str | None]:
    c = job_runs.c
    row = conn.execute(select(c.progress, c.progress_message).where(c.job_run_id == job_run_id)).first()
    return (None, None) if row is None else (row[0], row[1])


def dead_letter_open_for(conn: Connection, job_run_id: str) -> DeadLetter | None:
    q = select(dead_letters).where(dead_letters.c.job_run_id == job_run_id, dead_letters.c.resolved_at.is_(None))
    row = conn.execute(q).mappings().first()
    return None if row is None else codec.dead_letter_from_row(row)


def runs_due_summary(conn: Connection, tenant_id: str | None, now: datetime) -> tuple[int, datetime | None]:
    """Claimable runs already due (of ``tenant_id``, or all) and the oldest due time: the
    queue's depth and how long its head has waited."""
    c = job_runs.c
    q = select(func.count(), func.min(c.due_at)).where(
        c.status.in_([RunStatus.SCHEDULED.value, RunStatus.RETRY_WAIT.value]), c.due_at <= codec.to_us(now)
    )
    if tenant_id is not None:
        q = q.where(c.tenant_id == tenant_id)
    count, oldest = conn.execute(q).one()
    return int(count), None if oldest is None else codec.from_us(oldest)


OPEN_STATUSES = (RunStatus.SCHEDULED, RunStatus.RETRY_WAIT, RunStatus.DISPATCHED, RunStatus.RUNNING, RunStatus.HELD)


def _limited(q: Select[Any], tenant_id: str | None, job_definition_ids: Sequence[str] | None) -> Select[Any]:
    c = job_runs.c
    if tenant_id is not None:
        q = q.where(c.tenant_id == tenant_id)
    if job_definition_ids is not None:
        q = q.where(c.job_definition_id.in_(list(job_definition_ids)))
    return q


def runs_open_counts(
    conn: Connection, tenant_id: str | None, job_definition_ids: Sequence[str] | None = None
) -> dict[tuple[str, str], int]:
    """Open (not terminal) runs by (status, job class): read from the partial indexes' rows
    only, so the count stays cheap however many finished runs the table holds. With
    ``job_definition_ids``: only those definitions' runs (a token limited to them)."""
    c = job_runs.c
    q = select(c.status, c.job_class, func.count()).where(c.status.in_([s.value for s in OPEN_STATUSES]))
    q = _limited(q, tenant_id, job_definition_ids).group_by(c.status, c.job_class)
    return {(status, job_class): int(n) for status, job_class, n in conn.execute(q)}


def runs_held_counts(
    conn: Connection, tenant_id: str | None, job_definition_ids: Sequence[str] | None = None
) -> dict[tuple[str, str], int]:
    """Held runs by (hold reason, job class): the partial index of held runs only."""
    c = job_runs.c
    q = select(c.hold_reason, c.job_class, func.count()).where(c.status == RunStatus.HELD.value)
    q = _limited(q, tenant_id, job_definition_ids).group_by(c.hold_reason, c.job_class)
    return {(str(reason), job_class): int(n) for reason, job_class, n in conn.execute(q)}


def runs_ended_by_bucket(
    conn: Connection,
    tenant_id: str,
    since: datetime,
    bucket_us: int,
    created_since: datetime,
    job_definition_ids: Sequence[str] | None = None,
) -> list[tuple[int, str, int]]:
    """Runs that ended at or after ``since``, counted by (bucket, final status): bucket ``i``
    holds the ends in ``[since + i*bucket, since + (i+1)*bucket)``. ``created_since`` bounds the
    read to the tenant's creation index: a run ends no later than the maximum run age after it
    was created, so the caller passes ``since`` minus that age and no run is missed."""
    c = job_runs.c
    start = codec.to_us(since)
    bucket = ((c.ended_at - start) // bucket_us).label("bucket")
    q = select(bucket, c.status, func.count()).where(
        c.created_at >= codec.to_us(created_since), c.ended_at.is_not(None), c.ended_at >= start
    )
    q = _limited(q, tenant_id, job_definition_ids).group_by(bucket, c.status)
    return [(int(b), str(status), int(n)) for b, status, n in conn.execute(q)]


def run_ids_ending(conn: Connection, suffix: str, tenant_id: str | None, limit: int) -> list[str]:
    """Run ids that end with ``suffix`` (hex digits only: checked by the caller), at most
    ``limit``: the lookup of a short id a person typed. A scan of the key index, for people,
    never on a hot path. Runs retention retired count too (``retired_runs``): their full id is
    what tells a person the run was retired, and when."""
    if not suffix or any(ch not in "0123456789abcdef" for ch in suffix):
        raise ValueError("a run id's end is hex digits")
    found: set[str] = set()
    for table in (job_runs, retired_runs):
        q = select(table.c.job_run_id).where(table.c.job_run_id.like(f"%{suffix}"))
        if tenant_id is not None:
            q = q.where(table.c.tenant_id == tenant_id)
        found.update(str(r) for r in conn.execute(q.order_by(table.c.job_run_id).limit(limit)).scalars())
    return sorted(found)[:limit]
