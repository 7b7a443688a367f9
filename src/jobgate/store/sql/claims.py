"""The worker's claim: the gates' lock, the admission facts of candidates, rate and
concurrency limits, and the one statement that claims (and may start) a batch of runs.

Everything here runs inside the caller's write transaction and is batched. Status changes
after the claim are ``changes``; leases, stop requests and the rescuer's scans are ``leases``.

On SQLite every batch is one statement that yields at most one row: the ``sqlite3`` driver
releases the GIL at each row step, and each release can cost a wait behind the worker's
executor threads while the database's single write lock is held (see ``driver``). So the
compare-and-sets are one ``UPDATE ... FROM (VALUES ...)``, claimed rows are read back as one
``json_group_array``, and inserts are multi-row. On PostgreSQL rows travel as one binary
array per column (``unnest``), and a group of status changes is one statement that also
writes the transitions and events of the rows it changed.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

import orjson
import psycopg
from sqlalchemy import (
    ARRAY,
    Connection,
    String,
    bindparam,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    update,
)

from jobgate.core import events, ratelimit
from jobgate.core.models import JobRun
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.store import codec
from jobgate.store.base import ClaimedRuns, RunsClaim
from jobgate.store.errors import GatesBusy
from jobgate.store.sql import chains, driver
from jobgate.store.sql.outbox import OUTBOX_COLUMNS, event_rows
from jobgate.store.sql.predicates import (
    IS_CLAIMABLE,
    IS_LEASED,
)
from jobgate.store.tables import (
    LEASED_SQL,
    job_runs,
    outbox,
    rate_limits,
    run_transitions,
)

_LIMITS_LOCK = 0x6A6F626C  # "jobl": the advisory lock of limited claims on PostgreSQL
# "jobG": claims that ask the admission rule hold it shared, writes that close a gate (revoking an
# approval, switching safe mode on, suspending a definition) exclusive. See ``gates_closing``.
_GATES_LOCK = 0x6A6F6247
_GATES_SHARED = f"SELECT pg_advisory_xact_lock_shared({_GATES_LOCK})"
_GATES_EXCLUSIVE = f"SELECT pg_advisory_xact_lock({_GATES_LOCK})"


def gates_shared(conn: Connection) -> None:
    """The shared side of ``gates_closing``: taken by a transaction that asks the admission rule."""
    if conn.dialect.name == "postgresql":
        driver.owe(conn, _GATES_SHARED)  # with the transaction's next statement, before it locks a row


def gates_closing(conn: Connection, *, patient: bool = False) -> None:
    """Serialise a gate-closing write with the claims deciding attempts (PostgreSQL).

    Under READ COMMITTED a claim's candidate read sees the approvals and safe-mode periods as of
    its statement's start; without this, a revocation that committed while that read ran could
    be followed by an attempt started on the approval it had just revoked. With it, a claim
    either commits before the revocation is written, or reads after it committed. SQLite's single
    writer serialises them already. An advisory lock lives in memory: taking it costs a claim one
    round trip and writes nothing (the shared side travels with the claim's next statement:
    ``driver.owe``).

    The exclusive request is made ``GATES_WAIT_MS`` at a time, a pause between: while it waits,
    PostgreSQL queues every claim behind it, and a worker's transaction can hold the shared side
    for long (a slow completion effect, a paused worker: a review's froze the cluster behind
    the seal batch's lock the same way). Past ``GATES_PATIENCE_S`` the write is refused
    (``GatesBusy``: 503, exit 69) with nothing stored; ``patient`` (an automatic switch that
    nobody would repeat) goes on asking until it is granted."""
    if conn.dialect.name != "postgresql":
        return
    deadline = time.monotonic() + GATES_PATIENCE_S
    while True:
        driver.execute(conn, "SAVEPOINT jobgate_gates")
        try:
            driver.execute(conn, f"SET LOCAL lock_timeout = '{GATES_WAIT_MS}ms'")
            driver.execute(conn, _GATES_EXCLUSIVE)
        except psycopg.errors.LockNotAvailable:
            driver.execute(conn, "ROLLBACK TO SAVEPOINT jobgate_gates")
            driver.execute(conn, "RELEASE SAVEPOINT jobgate_gates")
            if not patient and time.monotonic() >= deadline:
                raise GatesBusy(
                    f"a worker's transaction has held the admission gates for over {GATES_PATIENCE_S} s"
                    " (a slow completion effect, a paused worker); nothing was changed: try again",
                    field="gates",
                ) from None
            time.sleep(GATES_PAUSE_S)  # the claims queued behind the request go on meanwhile
            continue
        driver.execute(conn, "RELEASE SAVEPOINT jobgate_gates")  # the lock is the transaction's now
        driver.execute(conn, "SET LOCAL lock_timeout TO DEFAULT")
        return


GATES_WAIT_MS = 100
GATES_PAUSE_S = 0.3
GATES_PATIENCE_S = 30.0


C = job_runs.c


def _candidates_statement(queue_filter: Any, excluded: Any = None) -> Any:
    """Built once: constructing SQLAlchemy expressions per call costs more than running them.

    ``excluded``: an extra filter for the variant that skips runs of given definition digests
    (those waiting for a dependency that is down); the ordinary claim does not pay for it.

    Each candidate comes with the columns the admission rule judges it by (``core.governance``);
    the approvals, lifecycle statuses and safe-mode periods those name are read once per claim
    for the distinct definitions among them (``admission_facts``)."""
    active = job_runs.alias("active")
    at_limit = (
        select(func.count())
        .where(active.c.job_definition_id == C.job_definition_id, text("active." + LEASED_SQL))
        .scalar_subquery()
    )
    rate_blocked = (
        select(rate_limits.c.key)
        .where(rate_limits.c.key == literal("definition:") + C.job_definition_id, rate_limits.c.tat > bindparam("now"))
        .exists()
    )
    # Runs of a definition at its concurrency limit, or whose rate limit has no room now, are
    # skipped in SQL so they cannot block the runs queued behind them (no head-of-line blocking).
    candidates = (
        select(*_candidate_columns())
        .where(IS_CLAIMABLE, queue_filter, C.due_at <= bindparam("now"))
        .where((C.queue_deadline_at.is_(None)) | (C.queue_deadline_at > bindparam("now")))
        .where(or_(C.concurrency_limit.is_(None), C.concurrency_limit > at_limit))
        .where(or_(C.rate_limit_per_second.is_(None), ~rate_blocked))
        .order_by(C.priority_rank, C.due_at)
        .limit(bindparam("limit"))
    )
    return candidates if excluded is None else candidates.where(excluded)


def _candidate_columns(runs: Any = job_runs) -> list[Any]:
    """The columns of a ``Candidate``, in its field order, for rows of ``runs``."""
    R = runs.c
    return [
        R.job_run_id, R.status, R.job_definition_id, R.queue, R.concurrency_limit, R.rate_limit_per_second,
        R.tenant_id, R.definition_version, R.trigger_type, R.reviewed_by,
    ]  # fmt: skip


@dataclass(frozen=True)
class AdmissionFacts:
    """What the database says of a claim's definitions and tenants, read in its transaction: the
    newest active approval of each version (its id; the row behind an id never changes; a
    version has one digest), each definition's lifecycle status, each tenant's open safe-mode
    period (its activation)."""

    approvals: dict[tuple[str, str, int], int]
    statuses: dict[tuple[str, str], str]
    safe_modes: dict[str, int]


# One statement for the three: a claim reads them for its distinct definitions, not per candidate
# (three correlated sub-selects per candidate had doubled the candidate read on SQLite).
# (kind, tenant, definition, status, number, version): 'a' an approval (its id, its version), 'h'
# a definition's lifecycle status, 's' a tenant's open safe-mode period (its activation).
_FACTS_SQLITE = (
    "SELECT 'a', tenant_id, job_definition_id, NULL, max(approval_id), version FROM definition_approvals"
    " WHERE revoked_at IS NULL AND tenant_id IN (SELECT value FROM json_each(:tenants))"
    " AND job_definition_id IN (SELECT value FROM json_each(:jobs)) GROUP BY tenant_id, job_definition_id, version"
    " UNION ALL SELECT 'h', tenant_id, job_definition_id, status, NULL, NULL FROM definition_heads"
    " WHERE tenant_id IN (SELECT value FROM json_each(:tenants))"
    " AND job_definition_id IN (SELECT value FROM json_each(:jobs))"
    " UNION ALL SELECT 's', tenant_id, NULL, NULL, max(activation), NULL FROM safe_mode_periods"
    " WHERE deactivated_at IS NULL AND tenant_id IN (SELECT value FROM json_each(:tenants)) GROUP BY tenant_id"
)
_FACTS_POSTGRES = (
    "SELECT 'a', tenant_id, job_definition_id, NULL::varchar, max(approval_id)::bigint, version"
    " FROM definition_approvals WHERE revoked_at IS NULL AND tenant_id = ANY(%(tenants)s::varchar[])"
    " AND job_definition_id = ANY(%(jobs)s::varchar[]) GROUP BY tenant_id, job_definition_id, version"
    " UNION ALL SELECT 'h', tenant_id, job_definition_id, status, NULL::bigint, NULL::integer FROM definition_heads"
    " WHERE tenant_id = ANY(%(tenants)s::varchar[]) AND job_definition_id = ANY(%(jobs)s::varchar[])"
    " UNION ALL SELECT 's', tenant_id, NULL::varchar, NULL::varchar, max(activation)::bigint, NULL::integer"
    " FROM safe_mode_periods WHERE deactivated_at IS NULL AND tenant_id = ANY(%(tenants)s::varchar[])"
    " GROUP BY tenant_id"
)


# One definition's facts (a light load's claim): equality on each index, planned once
# (``driver.planned_once``); arrays of several are planned for their values at each claim.
_FACTS_POSTGRES_ONE = driver.planned_once(
    _FACTS_POSTGRES.replace("= ANY(%(tenants)s::varchar[])", "= %(tenant)s::varchar").replace(
        "= ANY(%(jobs)s::varchar[])", "= %(job)s::varchar"
    )
)


def admission_facts(conn: Connection, candidates: Sequence[Any]) -> AdmissionFacts:
    """The approvals, lifecycle statuses and safe-mode periods of ``candidates``' definitions and
    tenants (anything with their ``tenant_id`` and ``job_definition_id``), in one statement."""
    tenants = sorted({c.tenant_id for c in candidates})
    jobs = sorted({c.job_definition_id for c in candidates})
    if conn.dialect.name == "sqlite":
        found = driver.rows_sql(
            conn, _FACTS_SQLITE, {"tenants": orjson.dumps(tenants).decode(), "jobs": orjson.dumps(jobs).decode()}
        )
    elif len(tenants) == 1 and len(jobs) == 1:  # one definition's: a plan the server keeps
        found = driver.rows_sql(conn, _FACTS_POSTGRES_ONE, {"tenant": tenants[0], "job": jobs[0]})
    else:
        found = driver.rows_sql(conn, _FACTS_POSTGRES, {"tenants": tenants, "jobs": jobs})
    facts = AdmissionFacts({}, {}, {})
    for kind, tenant, job, status, number, version in found:
        if kind == "a":
            facts.approvals[(tenant, job, int(version))] = int(number)
        elif kind == "h":
            facts.statuses[(tenant, job)] = status
        elif number is not None:
            facts.safe_modes[tenant] = int(number)
    return facts


_pg_candidates_cache: dict[tuple[int, bool, bool], Any] = {}


def _pg_candidates(queues: int, excluding: bool, skip_locked: bool) -> Any:
    """PostgreSQL's candidate read for ``queues`` queue names, built once per shape.

    It runs straight through the driver (``fast.rows``), which needs a fixed list of parameters
    (``queue_0``, ``queue_1``, ...) where an expanding ``IN`` is rendered anew for every call:
    SQLAlchemy's execution and row processing of a claim's candidates had cost about a fifth of
    the claim in a worker's loop. Runs waiting for a dependency (``RunsClaim.exclude_digests``,
    one array parameter) are not candidates."""
    key = (queues, excluding, skip_locked)
    stmt = _pg_candidates_cache.get(key)
    if stmt is None:
        named = C.queue.in_([bindparam(f"queue_{i}") for i in range(queues)])
        excluded = C.definition_digest != func.all(bindparam("exclude", type_=ARRAY(String))) if excluding else None
        stmt = _candidates_statement(named, excluded)
        if skip_locked:
            stmt = stmt.with_for_update(skip_locked=True, of=job_runs)
        _pg_candidates_cache[key] = stmt
    return stmt


class Candidate(NamedTuple):
    """A claimable run as the claim reads it, with the facts the admission rule needs."""

    job_run_id: str
    status: str
    job_definition_id: str
    queue: str
    concurrency_limit: int | None
    rate_limit_per_second: float | None
    tenant_id: str
    definition_version: int
    trigger_type: str
    reviewed_by: str | None


_CANDIDATE_FIELDS = len(Candidate._fields)
# A candidate from its row without ``Candidate.__new__``'s argument handling: half the cost, for
# every candidate of every claim (the row has exactly the fields, in order).
_candidate = functools.partial(tuple.__new__, Candidate)


def _json_values(name: str) -> Any:
    """``SELECT value FROM json_each(:name)``: a whole list as one parameter, so a statement is
    the same text (and the same prepared statement) whatever the batch size."""
    return select(func.json_each(bindparam(name)).table_valued("value").c.value).scalar_subquery()


def _sqlite_claim_statements() -> tuple[Any, Any, Any, Any]:
    """SQLite's claim: one queue's candidates as one JSON row (rank and due time come along so
    the order is restored in Python rather than trusted to the aggregate; one queue at a time so
    the claim index yields them in order instead of a sort of the whole backlog), the two
    updates by a JSON list of ids, and the claimed rows read back as one JSON row."""
    read_candidates = _sqlite_read_candidates()
    claim = {
        "lease_owner": bindparam("owner"),
        "lease_token": C.lease_token + literal_column("1"),
        "lease_expires_at": bindparam("exp"),
    }
    ids = C.job_run_id.in_(_json_values("ids"))
    start = (
        update(job_runs)
        .where(ids, IS_CLAIMABLE, C.attempt < C.max_attempts)
        .values(
            status=literal_column(f"'{RunStatus.RUNNING.value}'"),
            attempt=C.attempt + literal_column("1"),
            started_at=func.coalesce(C.started_at, bindparam("now")),
            progress=null(),
            progress_message=null(),
            transition_count=C.transition_count + literal_column("2"),  # claimed, started
            **claim,
        )
    )
    dispatch = (
        update(job_runs)
        .where(ids, IS_CLAIMABLE)
        .values(
            status=literal_column(f"'{RunStatus.DISPATCHED.value}'"),
            transition_count=C.transition_count + literal_column("1"),
            **claim,
        )
    )
    # SQLite's json_array takes at most 127 arguments; a run row has fewer columns.
    read_claimed = select(func.json_group_array(func.json_array(*job_runs.c))).where(
        ids, C.lease_owner == bindparam("owner"), IS_LEASED
    )
    return read_candidates, start, dispatch, read_claimed


def _sqlite_read_candidates(excluded: Any = None) -> Any:
    candidates = _candidates_statement(C.queue == bindparam("queue"), excluded)
    sub = candidates.add_columns(C.priority_rank, C.due_at).subquery()
    return select(func.json_group_array(func.json_array(*sub.c)))


_RUN_COLUMNS = tuple(c.name for c in job_runs.c)
assert _RUN_COLUMNS[0] == "job_run_id"  # SQLite's claimed rows are read by position
_SQLITE_CANDIDATES, _SQLITE_START, _SQLITE_DISPATCH, _SQLITE_CLAIMED = _sqlite_claim_statements()
_SQLITE_CANDIDATES_EXCLUDING = _sqlite_read_candidates(C.definition_digest.not_in(_json_values("exclude")))


def _pg_claim_sql(start: bool, *, one: bool = False) -> str:
    """One statement (PostgreSQL) that claims the runs the candidate read locked and records
    their transitions: the run rows come back, the transitions never leave the server.

    ``start``: claim and start in one row write, for runs a worker thread is free to execute
    now; the record still gets both transitions, claimed then started, at the same instant.
    Without it the runs are only claimed (DISPATCHED). The ids and the status each run had come
    as two arrays in claim order; transitions are numbered in that order, claimed before started.

    The rows are found by primary key alone. The candidate read locked them (``FOR UPDATE SKIP
    LOCKED``), so their status cannot have changed and is not checked again. Checking it here
    let the planner pick the claim index, whose predicate the status test matches: with
    statistics from a freshly filled table it estimated 25 claimable rows, then walked a backlog
    of 20,000 to find the 64 ids (19 ms instead of under 1 ms, the largest single cost of a
    claim). Building the transitions in Python and sending them back as arrays had cost a tenth
    of a worker loop's time per claimed run, and a statement per cycle.
    """
    sets = [
        f"status = '{(RunStatus.RUNNING if start else RunStatus.DISPATCHED).value}'",
        "lease_owner = %(owner)s",
        "lease_token = job_runs.lease_token + 1",
        "lease_expires_at = %(exp)s",
        f"transition_count = job_runs.transition_count + {2 if start else 1}",
    ]
    where = "job_runs.job_run_id = picked.id"
    claimed_step = f"(1, c.claimed_from, '{_DISPATCHED}', c.attempt{' - 1' if start else ''}, '{_CLAIMED}')"
    steps = [claimed_step]
    if start:
        sets += [
            "attempt = job_runs.attempt + 1",
            "started_at = coalesce(job_runs.started_at, %(now)s)",
            "progress = NULL",
            "progress_message = NULL",
        ]
        where += " AND job_runs.attempt < job_runs.max_attempts"
        steps.append(f"(2, '{_DISPATCHED}', '{_RUNNING}', c.attempt, '{_STARTED}')")
    picked = (
        # One run (a light load's claim): its id a scalar the planner folds in, so the run is
        # found by its key in any plan, one the server keeps (``driver.planned_once``).
        "SELECT %(id)s::varchar AS id, %(previous)s::varchar AS previous, 1::bigint AS ord"
        if one
        else "SELECT * FROM unnest(%(ids)b::varchar[], %(previous)b::varchar[]) WITH ORDINALITY AS p(id, previous, ord)"
    )
    return (
        f"WITH picked AS ({picked}),"
        f" claimed AS (UPDATE job_runs SET {', '.join(sets)} FROM picked WHERE {where}"
        " RETURNING picked.previous AS claimed_from, picked.ord AS claimed_order, job_runs.*),"
        f" recorded AS (INSERT INTO run_transitions ({', '.join(codec.TRANSITION_COLUMNS)})"
        " SELECT c.job_run_id, c.tenant_id, s.from_status, s.to_status, s.attempt, s.reason, %(owner)s, %(now)s, NULL"
        f" FROM claimed c CROSS JOIN LATERAL (VALUES {', '.join(steps)})"
        " AS s(step, from_status, to_status, attempt, reason) ORDER BY c.claimed_order, s.step)"
        " SELECT * FROM claimed"
    )


_DISPATCHED = RunStatus.DISPATCHED.value
_RUNNING = RunStatus.RUNNING.value
_CLAIMED = TransitionReason.CLAIMED.value
_STARTED = TransitionReason.STARTED.value
_PG_START, _PG_DISPATCH = _pg_claim_sql(True), _pg_claim_sql(False)
_PG_START_ONE = driver.planned_once(_pg_claim_sql(True, one=True))
_PG_DISPATCH_ONE = driver.planned_once(_pg_claim_sql(False, one=True))


def _pg_claim(conn: Connection, start: bool, ids: Sequence[str], previous: dict[str, str], base: dict[str, Any]) -> Any:
    """Claim ``ids`` (started or dispatched), one run's by its scalar statement."""
    if len(ids) == 1:
        values = {**base, "id": ids[0], "previous": previous[ids[0]]}
        return driver.returning_sql(conn, _PG_START_ONE if start else _PG_DISPATCH_ONE, values)
    values = {**base, "ids": list(ids), "previous": [previous[i] for i in ids]}
    return driver.returning_sql(conn, _PG_START if start else _PG_DISPATCH, values)


def _candidates(conn: Connection, p: RunsClaim, now: int, *, skip_locked: bool) -> list[Candidate]:
    """The first ``p.limit`` claimable runs by priority, then due time (locked on PostgreSQL).

    Exactly as many as the claim may take: reading more, as headroom for runs a limit refuses
    within the batch, locked rows no worker could claim until this one committed, and cost a
    row lock (written to the page and the log) and a decoded row each. A batch cut short by a
    limit is topped up by the next cycle (``ClaimedRuns.more``)."""
    queues = list(dict.fromkeys(p.queues))  # a queue named twice is searched once
    if conn.dialect.name == "sqlite":
        found = []
        stmt, excluding = _SQLITE_CANDIDATES, {}
        if p.exclude_digests:
            stmt = _SQLITE_CANDIDATES_EXCLUDING
            excluding = {"exclude": orjson.dumps(sorted(p.exclude_digests)).decode()}
        for queue in queues:
            one = {"queue": queue, "now": now, "limit": p.limit, **excluding}
            found.extend(orjson.loads(driver.rows(conn, stmt, one)[0][0]))
        found.sort(key=lambda r: (r[_CANDIDATE_FIELDS], r[_CANDIDATE_FIELDS + 1]))
        return [_candidate(r[:_CANDIDATE_FIELDS]) for r in found[: p.limit]]
    params: dict[str, Any] = {f"queue_{i}": q for i, q in enumerate(queues)}
    params.update(now=now, limit=p.limit)
    if p.exclude_digests:
        params["exclude"] = sorted(p.exclude_digests)
    stmt = _pg_candidates(len(queues), bool(p.exclude_digests), skip_locked)
    return [_candidate(r) for r in driver.rows(conn, stmt, params)]


class _Claimed(NamedTuple):
    """What the claim itself records about each run it took (transitions, started events)."""

    job_run_id: str
    tenant_id: str
    status: str
    attempt: int
    job_class: str
    job_definition_id: str
    idempotency_key: str
    config_snapshot_id: str


_FACT_INDEXES = tuple(_RUN_COLUMNS.index(name) for name in _Claimed._fields)


def _by_claim_order(runs: list[JobRun]) -> list[JobRun]:
    runs.sort(key=lambda r: (r.priority.rank, r.due_at))
    return runs


def _claim_ids(
    conn: Connection, start_ids: Sequence[str], dispatch_ids: Sequence[str], previous: dict[str, str], p: RunsClaim
) -> tuple[list[_Claimed], ClaimedRuns]:
    """Start ``start_ids`` (those with an attempt left), dispatch the rest and the others, and
    record their transitions (``previous``: each run's status before the claim). Returns the
    facts of the runs claimed and the runs."""
    now, exp = codec.to_us(p.now), codec.to_us(p.lease_expires_at)
    if conn.dialect.name != "sqlite":
        claimed: list[JobRun] = []
        raws: list[dict[str, Any]] = []
        base = {"owner": p.worker_id, "exp": exp, "now": now}
        if start_ids:
            raws.extend(_pg_claim(conn, True, start_ids, previous, base))
            claimed.extend(codec.run_from_row(r) for r in raws)
        started = {r.job_run_id for r in claimed}
        rest = [i for i in start_ids if i not in started] + list(dispatch_ids)  # no attempt left: dispatch
        if rest:
            dispatched = _pg_claim(conn, False, rest, previous, base)
            raws.extend(dispatched)
            claimed.extend(codec.run_from_row(r) for r in dispatched)
        facts = [
            _Claimed(
                r.job_run_id,
                r.tenant_id,
                r.status.value,
                r.attempt,
                str(r.job_class),
                r.job_definition_id,
                r.idempotency_key,
                r.config_snapshot_id,
            )
            for r in claimed
        ]
        done = _by_claim_order(claimed)
        out = ClaimedRuns(lambda: done, len(done))
        out.chains = lambda: _chains(raws, _claim_transitions(facts, previous, p, now))
        return facts, out
    # SQLite: the write lock is ours, so the rows leased to us among these ids after the two
    # updates are exactly the ones they changed (candidates were unleased when read). Started
    # rows are no longer claimable, so the dispatch over every id changes only the others.
    every = orjson.dumps([*start_ids, *dispatch_ids]).decode()
    if start_ids:
        driver.run(
            conn,
            _SQLITE_START,
            {"ids": orjson.dumps(list(start_ids)).decode(), "owner": p.worker_id, "exp": exp, "now": now},
        )
    driver.run(conn, _SQLITE_DISPATCH, {"ids": every, "owner": p.worker_id, "exp": exp})
    found = orjson.loads(driver.rows(conn, _SQLITE_CLAIMED, {"ids": every, "owner": p.worker_id})[0][0])
    facts = [_Claimed(*(row[i] for i in _FACT_INDEXES)) for row in found]
    made = _claim_transitions(facts, previous, p, now)
    driver.insert_rows(conn, run_transitions, codec.TRANSITION_COLUMNS, made)

    def decode() -> list[JobRun]:
        runs: list[JobRun] = []
        for row in found:
            try:
                runs.append(codec.run_from_values(_RUN_COLUMNS, row))
            except Exception as exc:  # one unreadable row must not cost the others their start
                batch.unreadable.append((str(row[0]), f"{type(exc).__name__}: {exc}"))
        return _by_claim_order(runs)

    batch = ClaimedRuns(decode, len(found))
    batch.chains = functools.partial(_chains, found, made)
    return facts, batch


def _chains(
    rows: Sequence[Mapping[str, Any] | Sequence[Any]], made: Sequence[tuple[Any, ...]]
) -> list[tuple[str, chains.Chain | None]]:
    """Each claimed run's history chain, extended by the claim's own transitions ``made`` (rows
    as mappings, or as SQLite's value lists in ``_RUN_COLUMNS`` order). Called after commit."""
    by_run: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for t in made:
        by_run[t[0]].append(t)
    out: list[tuple[str, chains.Chain | None]] = []
    for r in rows:
        if isinstance(r, Mapping):
            out.append((r["job_run_id"], chains.from_claim(r, by_run[r["job_run_id"]])))
        else:  # SQLite's value lists: the run id is the first column
            out.append((r[0], chains.from_values(_RUN_COLUMNS, r, by_run[r[0]])))
    return out


def _claim_transitions(
    facts: Sequence[_Claimed], previous: dict[str, str], p: RunsClaim, now: int
) -> list[tuple[Any, ...]]:
    """SQLite's transitions of a claim, as PostgreSQL's claim statement writes them: claimed,
    then started for the runs started at once."""
    rows: list[tuple[Any, ...]] = []
    for r in facts:
        was_started = r.status == _RUNNING
        attempt = r.attempt - 1 if was_started else r.attempt
        was = previous[r.job_run_id]
        rows.append((r.job_run_id, r.tenant_id, was, _DISPATCHED, attempt, _CLAIMED, p.worker_id, now, None))
        if was_started:
            rows.append((r.job_run_id, r.tenant_id, _DISPATCHED, _RUNNING, r.attempt, _STARTED, p.worker_id, now, None))
    return rows


def runs_claim(conn: Connection, p: RunsClaim, *, skip_locked: bool) -> ClaimedRuns:
    """Claim up to ``p.limit`` due runs by priority, then due time, honouring per-definition
    concurrency limits and per-definition and per-queue rate limits across every worker.

    The first ``p.start_now`` of them (those with an attempt left) are also started: they come
    back RUNNING with their attempt counted; the rest come back DISPATCHED. The claim writes
    their transitions (claimed, and started) and the started runs' ``job_started`` events.
    """
    now = codec.to_us(p.now)
    p = _without_queues_at_their_rate(conn, p, now)
    if not p.queues:
        return ClaimedRuns(list, 0)
    candidates = _candidates(conn, p, now, skip_locked=skip_locked)
    if not candidates:
        return ClaimedRuns(list, 0)
    more = len(candidates) >= p.limit  # the read was cut at the limit: more runs may be waiting
    refused: list[tuple[Candidate, Any]] = []
    if p.admit is not None:
        # The admission rule, asked for every attempt about to start, inside this transaction;
        # the refused runs are not claimed (the caller holds or cancels them in this transaction).
        verdicts = p.admit(candidates)
        if verdicts:
            refused = [(c, verdicts[c.job_run_id]) for c in candidates if c.job_run_id in verdicts]
            candidates = [c for c in candidates if c.job_run_id not in verdicts]
    chosen = _apply_limits(conn, candidates, p, now) if candidates else []
    if not chosen:
        # Every candidate refused by a limit: claiming again at once would refuse them again.
        nothing = ClaimedRuns(list, 0, more=more and bool(refused))
        nothing.refused = refused
        return nothing
    previous = {row.job_run_id: row.status for row in candidates}
    facts, claimed = _claim_ids(conn, chosen[: p.start_now], chosen[p.start_now :], previous, p)
    claimed.more = more
    claimed.refused = refused
    started: list[tuple[Any, ...]] = []
    for r in facts:
        if r.status == _RUNNING:
            fact = events.StartedRun(
                r.job_run_id,
                r.job_class,
                r.job_definition_id,
                r.tenant_id,
                r.idempotency_key,
                r.config_snapshot_id,
                r.attempt,
            )
            started.extend(event_rows(r.job_run_id, r.tenant_id, [events.started_event(fact, p.now)], p.now))
    driver.insert_rows(conn, outbox, OUTBOX_COLUMNS, started)
    return claimed


def _without_queues_at_their_rate(conn: Connection, p: RunsClaim, now: int) -> RunsClaim:
    """``p`` without the rate-limited queues that have no room for a run now.

    Definitions at their limits are skipped by the candidate read itself; a queue's rate is the
    worker's setting, not the runs', so it is read here. Without this, the runs of a queue at its
    rate filled the candidate read (it takes exactly as many as the claim may) and hid the runs
    of the other queues behind them. ``_apply_limits`` still decides, under its lock."""
    rated = [q for q in dict.fromkeys(p.queues) if q in p.queue_rates]
    if not rated:
        return p
    keys = {f"queue:{q}": q for q in rated}
    tats = dict(conn.execute(select(rate_limits.c.key, rate_limits.c.tat).where(rate_limits.c.key.in_(keys))).all())
    now_dt = codec.from_us(now)
    full = set()
    for key, queue in keys.items():
        rate, burst = p.queue_rates[queue]
        tat = None if tats.get(key) is None else codec.from_us(tats[key])
        if ratelimit.admit(tat, now_dt, rate=rate, burst=burst, wanted=1)[0] == 0:
            full.add(queue)
    return replace(p, queues=tuple(q for q in p.queues if q not in full)) if full else p


def _apply_limits(conn: Connection, candidates: Sequence[Candidate], p: RunsClaim, now: int) -> list[str]:
    if not p.queue_rates and all(r.concurrency_limit is None and r.rate_limit_per_second is None for r in candidates):
        return [r.job_run_id for r in candidates[: p.limit]]  # nothing limited: the common case
    if conn.dialect.name == "postgresql":
        # Limits are read, decided and written back: serialise the deciding claims cluster-wide
        # (claims with nothing limited never get here).
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LIMITS_LOCK})
    limited_defs = {r.job_definition_id for r in candidates if r.concurrency_limit is not None}
    active: dict[str, int] = {}
    if limited_defs:
        rows = conn.execute(
            select(C.job_definition_id, func.count())
            .where(IS_LEASED, C.job_definition_id.in_(limited_defs))
            .group_by(C.job_definition_id)
        ).all()
        active = {r[0]: r[1] for r in rows}
    # Rate-limit keys in play and their current theoretical arrival times.
    rated: dict[str, tuple[float, int]] = {}
    for r in candidates:
        if r.rate_limit_per_second:
            rated[f"definition:{r.job_definition_id}"] = (r.rate_limit_per_second, 1)
        if r.queue in p.queue_rates:
            rated[f"queue:{r.queue}"] = p.queue_rates[r.queue]
    tats: dict[str, datetime | None] = dict.fromkeys(rated)
    if rated:
        for key, tat in conn.execute(select(rate_limits.c.key, rate_limits.c.tat).where(rate_limits.c.key.in_(rated))):
            tats[key] = codec.from_us(tat)
    now_dt = codec.from_us(now)
    chosen: list[str] = []
    for r in candidates:
        if len(chosen) >= p.limit:
            break
        if r.concurrency_limit is not None and active.get(r.job_definition_id, 0) >= r.concurrency_limit:
            continue
        keys = [k for k in (f"definition:{r.job_definition_id}", f"queue:{r.queue}") if k in rated]
        admitted = True
        new_tats: dict[str, datetime] = {}
        for key in keys:
            rate, burst = rated[key]
            n, tat = ratelimit.admit(tats[key], now_dt, rate=rate, burst=burst, wanted=1)
            if n == 0:
                admitted = False
                break
            new_tats[key] = tat
        if not admitted:
            continue
        tats.update(new_tats)
        active[r.job_definition_id] = active.get(r.job_definition_id, 0) + 1
        chosen.append(r.job_run_id)
    touched = {k: v for k, v in tats.items() if v is not None}
    if touched:
        _upsert_tats(conn, {k: codec.to_us(v) for k, v in touched.items()})
    return chosen


def _upsert_tats(conn: Connection, tats: dict[str, int]) -> None:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
    stmt = insert(rate_limits)
    stmt = stmt.on_conflict_do_update(index_elements=[rate_limits.c.key], set_={"tat": stmt.excluded.tat})
    conn.execute(stmt, [{"key": k, "tat": v} for k, v in tats.items()])


# (from, to, fenced, revoke lease, start attempt, lease must be expired, value columns)
