"""The worker's hot path: claim, apply status changes, renew leases, find expired leases.

Everything here runs inside the caller's write transaction and is batched: one claim
statement for a batch of runs, one compare-and-set per (from, to) group, one insert per
kind of row. A change that does not match its expected status and fencing token writes
nothing at all, not even its transition or events.

On SQLite every batch is one statement that yields at most one row: the ``sqlite3`` driver
releases the GIL at each row step, and each release can cost a wait behind the worker's
executor threads while the database's single write lock is held (see ``fast``). So the
compare-and-sets are one ``UPDATE ... FROM (VALUES ...)``, claimed rows are read back as one
``json_group_array``, and inserts are multi-row. On PostgreSQL rows travel as one binary
array per column (``unnest``), and a group of status changes is one statement that also
writes the transitions and events of the rows it changed.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple

import orjson
from sqlalchemy import (
    ARRAY,
    Connection,
    Dialect,
    String,
    bindparam,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    tuple_,
    update,
)

from jobgate.core import events, ratelimit
from jobgate.core.events import Event
from jobgate.core.models import JobRun
from jobgate.core.states import LEASED, TERMINAL, RunStatus, TransitionReason
from jobgate.core.transitions import RunChange, check_change
from jobgate.store import codec
from jobgate.store.base import ClaimedRuns, LeaseRenew, RunsClaim
from jobgate.store.sql import chains, fast, letters
from jobgate.store.sql import seals as record_seals
from jobgate.store.tables import (
    CLAIMABLE_SQL,
    HELD_SQL,
    LEASED_SQL,
    QUEUE_DEADLINE_SQL,
    dead_letters,
    job_runs,
    outbox,
    rate_limits,
    run_transitions,
    workers,
)
from jobgate.store.tables import record_seals as record_seals_table

_CHUNK = 400
_LIMITS_LOCK = 0x6A6F626C  # "jobl": the advisory lock of limited claims on PostgreSQL
# "jobG": claims that ask the admission rule hold it shared, writes that close a gate (revoking an
# approval, switching safe mode on, suspending a definition) exclusive. See ``gates_closing``.
_GATES_LOCK = 0x6A6F6247
_GATES_SHARED = f"SELECT pg_advisory_xact_lock_shared({_GATES_LOCK})"
_GATES_EXCLUSIVE = f"SELECT pg_advisory_xact_lock({_GATES_LOCK})"


def gates_shared(conn: Connection) -> None:
    """The shared side of ``gates_closing``: taken by a transaction that asks the admission rule."""
    if conn.dialect.name == "postgresql":
        fast.execute(conn, _GATES_SHARED)


def gates_closing(conn: Connection) -> None:
    """Serialise a gate-closing write with the claims deciding attempts (PostgreSQL).

    Under READ COMMITTED a claim's candidate read sees the approvals and safe-mode periods as of
    its statement's start; without this, a revocation that committed while that read ran could
    be followed by an attempt started on the approval it had just revoked. With it, a claim
    either commits before the revocation is written, or reads after it committed. SQLite's single
    writer serialises them already. An advisory lock lives in memory: taking it costs a claim one
    round trip and writes nothing."""
    if conn.dialect.name == "postgresql":
        fast.execute(conn, _GATES_EXCLUSIVE)


_LEASED = [s.value for s in LEASED]
# Literal predicates, identical to the partial indexes' WHERE clauses: with bound parameters
# SQLite cannot prove a query implies the index condition and scans the whole table instead.
IS_CLAIMABLE = text(CLAIMABLE_SQL)
IS_LEASED = text(LEASED_SQL)
IS_HELD = text(HELD_SQL)
WAITS_WITH_QUEUE_DEADLINE = text(QUEUE_DEADLINE_SQL)
C = job_runs.c


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


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


def admission_facts(conn: Connection, candidates: Sequence[Any]) -> AdmissionFacts:
    """The approvals, lifecycle statuses and safe-mode periods of ``candidates``' definitions and
    tenants (anything with their ``tenant_id`` and ``job_definition_id``), in one statement."""
    tenants = sorted({c.tenant_id for c in candidates})
    jobs = sorted({c.job_definition_id for c in candidates})
    if conn.dialect.name == "sqlite":
        found = fast.rows_sql(
            conn, _FACTS_SQLITE, {"tenants": orjson.dumps(tenants).decode(), "jobs": orjson.dumps(jobs).decode()}
        )
    else:
        found = fast.rows_sql(conn, _FACTS_POSTGRES, {"tenants": tenants, "jobs": jobs})
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


def _pg_claim_sql(start: bool) -> str:
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
    return (
        "WITH picked AS (SELECT * FROM unnest(%(ids)b::varchar[], %(previous)b::varchar[]) WITH ORDINALITY"
        " AS p(id, previous, ord)),"
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
            found.extend(orjson.loads(fast.rows(conn, stmt, one)[0][0]))
        found.sort(key=lambda r: (r[_CANDIDATE_FIELDS], r[_CANDIDATE_FIELDS + 1]))
        return [_candidate(r[:_CANDIDATE_FIELDS]) for r in found[: p.limit]]
    params: dict[str, Any] = {f"queue_{i}": q for i, q in enumerate(queues)}
    params.update(now=now, limit=p.limit)
    if p.exclude_digests:
        params["exclude"] = sorted(p.exclude_digests)
    stmt = _pg_candidates(len(queues), bool(p.exclude_digests), skip_locked)
    return [_candidate(r) for r in fast.rows(conn, stmt, params)]


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
        if start_ids:
            values = {"owner": p.worker_id, "exp": exp, "now": now, "ids": list(start_ids)}
            values["previous"] = [previous[i] for i in start_ids]
            raws.extend(fast.returning_sql(conn, _PG_START, values))
            claimed.extend(codec.run_from_row(r) for r in raws)
        started = {r.job_run_id for r in claimed}
        rest = [i for i in start_ids if i not in started] + list(dispatch_ids)  # no attempt left: dispatch
        if rest:
            values = {"owner": p.worker_id, "exp": exp, "now": now, "ids": rest}
            values["previous"] = [previous[i] for i in rest]
            dispatched = fast.returning_sql(conn, _PG_DISPATCH, values)
            raws.extend(dispatched)
            claimed.extend(codec.run_from_row(r) for r in dispatched)
        facts = [
            _Claimed(
                r.job_run_id,
                r.tenant_id,
                r.status.value,
                r.attempt,
                r.job_class.value,
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
        fast.run(
            conn,
            _SQLITE_START,
            {"ids": orjson.dumps(list(start_ids)).decode(), "owner": p.worker_id, "exp": exp, "now": now},
        )
    fast.run(conn, _SQLITE_DISPATCH, {"ids": every, "owner": p.worker_id, "exp": exp})
    found = orjson.loads(fast.rows(conn, _SQLITE_CLAIMED, {"ids": every, "owner": p.worker_id})[0][0])
    facts = [_Claimed(*(row[i] for i in _FACT_INDEXES)) for row in found]
    made = _claim_transitions(facts, previous, p, now)
    fast.insert_rows(conn, run_transitions, codec.TRANSITION_COLUMNS, made)

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
            started.extend(_event_rows(r.job_run_id, r.tenant_id, [events.started_event(fact, p.now)], p.now))
    fast.insert_rows(conn, outbox, _OUTBOX_COLUMNS, started)
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


def _cas_postgres_sql(dialect: Dialect, key: _GroupKey) -> str:
    """The same for PostgreSQL, the rows as one array per column (``unnest``): one statement
    text whatever the number of rows, where ``executemany`` paid a statement per row."""
    columns = key[6]
    rows = fast.unnest(dialect, job_runs, ("job_run_id", "lease_token", "lease_expires_at", *columns))
    names = ", ".join(["id", "token", "expired_before", *(f"c{i}" for i in range(len(columns)))])
    sets = _cas_sets(key, lambda i: f"v.c{i}")
    # The expected status is a sub-select, not a literal: a literal matches the predicate of the
    # partial index on leased runs, and with the statistics of a table that grew since its last
    # ANALYZE the planner then read every leased run (and the dead index entries of runs that
    # left the lease) to find a batch: 3.4 of a 9.7 ms settlement with 12,000 entries, where the
    # batch needs one primary-key probe per row.
    where = _cas_where(key, "v.id", "v.token", "v.expired_before", status=f"(SELECT '{key[0].value}'::varchar)")
    return f"UPDATE job_runs SET {sets} FROM {rows} AS v({names}) WHERE {where}"


def _apply_postgres_sql(dialect: Dialect, key: _GroupKey, with_events: bool, with_seals: bool) -> str:
    """A group's compare-and-set, the transitions, the events and the precomputed seals of the
    rows it changed, as one statement: the rows that did not match write nothing, and no
    savepoint or second round trip is needed to learn which they were (``RETURNING``)."""

    def insert_changed(name: str, table: Any, columns: tuple[str, ...], key_column: str = "job_run_id") -> str:
        rows = fast.ordered_rows(dialect, table, columns, f"x.{key_column} IN (SELECT job_run_id FROM changed)")
        return f"{name} AS (INSERT INTO {table.name} ({', '.join(columns)}) {rows})"

    parts = [
        f"changed AS ({_cas_postgres_sql(dialect, key)} RETURNING job_runs.job_run_id)",
        insert_changed("recorded", run_transitions, codec.TRANSITION_COLUMNS),
    ]
    if with_events:
        parts.append(insert_changed("announced", outbox, _OUTBOX_COLUMNS))
    if with_seals:  # holding the seal writers' lock shared, as every seal insert does
        sealed = insert_changed("sealed", record_seals_table, record_seals.SEAL_COLUMNS, "record_id")
        lock = f"seal_writers AS (SELECT pg_advisory_xact_lock_shared({record_seals.SEAL_WRITERS}))"
        parts += [lock, sealed.replace(" WHERE x.record_id", ", seal_writers WHERE x.record_id")]
    return "WITH " + ", ".join(parts) + " SELECT job_run_id FROM changed"


_apply_sql_cache: dict[tuple[_GroupKey, bool, bool], str] = {}


def _apply_postgres(conn: Connection, prepared: PreparedChanges) -> tuple[list[RunChange], set[str]]:
    """PostgreSQL's ``runs_apply`` for changes without dead letters: one statement per group.
    Returns the changes applied and the runs whose precomputed seals the statements wrote."""
    accepted: set[str] = set()
    sealed: set[str] = set()
    for key, items, rows in prepared.groups:
        transitions = [prepared.transitions[ch.job_run_id] for ch in items]
        events = [row for ch in items for row in prepared.events[ch.job_run_id]]
        ready = [prepared.seals[ch.job_run_id] for ch in items if ch.job_run_id in prepared.seals]
        shape = (key, bool(events), bool(ready))
        sql = _apply_sql_cache.get(shape)
        if sql is None:
            sql = _apply_sql_cache[shape] = _apply_postgres_sql(conn.dialect, *shape)
        row_sets = [rows, transitions] + ([events] if events else []) + ([ready] if ready else [])
        changed = {r[0] for r in fast.run_arrays(conn, sql, *row_sets)[1]}
        accepted |= changed
        sealed |= {ch.job_run_id for ch in items if ch.job_run_id in prepared.seals} & changed
    return [ch for ch in prepared.changes if ch.job_run_id in accepted], sealed


_cas_sql_cache: dict[tuple[_GroupKey, int], str] = {}


def _cas_rows(conn: Connection, key: _GroupKey, rows: Sequence[tuple[Any, ...]]) -> int:
    """Apply one group's compare-and-sets; returns how many rows matched."""
    if conn.dialect.name == "sqlite":
        changed = 0
        for chunk in _chunks(rows, 200):
            sql = _cas_sql_cache.get((key, len(chunk)))
            if sql is None:
                sql = _cas_sql_cache[(key, len(chunk))] = _cas_sqlite_sql(key, len(chunk))
            changed += fast.run_sql(conn, sql, [value for row in chunk for value in row])
        return changed
    sql = _cas_sql_cache.get((key, 0))
    if sql is None:
        sql = _cas_sql_cache[(key, 0)] = _cas_postgres_sql(conn.dialect, key)
    return fast.run_arrays(conn, sql, rows)[0]


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
        events={ch.job_run_id: _event_rows(ch.job_run_id, ch.tenant_id, ch.events, ch.transition.at) for ch in changes},
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
        record_seals.insert_sealed(conn, ready)
        rest = [i for i in ended if i not in prepared.seals]
        if rest:
            record_seals.seal_runs(conn, rest, codec.to_us(max(ch.transition.at for ch in done)))
    return done


def _apply_generic(conn: Connection, prepared: PreparedChanges) -> list[RunChange]:
    """SQLite's ``runs_apply`` (and PostgreSQL's for batches with dead letters to number)."""
    accepted: set[str] = set()
    for key, items, rows in prepared.groups:
        fast.execute(conn, "SAVEPOINT jobgate_cas")
        if _cas_rows(conn, key, rows) == len(rows):
            fast.execute(conn, "RELEASE SAVEPOINT jobgate_cas")
            accepted.update(ch.job_run_id for ch in items)
            continue
        fast.execute(conn, "ROLLBACK TO SAVEPOINT jobgate_cas")
        fast.execute(conn, "RELEASE SAVEPOINT jobgate_cas")
        for ch, row in zip(items, rows, strict=True):
            if _cas_rows(conn, key, [row]) == 1:
                accepted.add(ch.job_run_id)
    done = [ch for ch in prepared.changes if ch.job_run_id in accepted]
    if done:
        transitions = [prepared.transitions[ch.job_run_id] for ch in done]
        fast.insert_rows(conn, run_transitions, codec.TRANSITION_COLUMNS, transitions)
        derived = {ch.job_run_id: ch.dead_letter.dead_letter_id for ch in done if ch.dead_letter is not None}
        # A run requeued and dead-lettered again at the same attempt: its repeat is numbered.
        repeats = letters.letters_renumber(conn, derived) if derived else {}
        if repeats:
            done = [letters.renumbered(ch, repeats[ch.job_run_id]) if ch.job_run_id in repeats else ch for ch in done]
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
                _event_rows(ch.job_run_id, ch.tenant_id, ch.events, ch.transition.at)
                if ch.job_run_id in repeats
                else prepared.events[ch.job_run_id]
            )
        ]
        fast.insert_rows(conn, outbox, _OUTBOX_COLUMNS, events)
    return done


_INSERT_DEAD_LETTERS = dead_letters.insert()
_OUTBOX_COLUMNS = ("job_run_id", "tenant_id", "event_type", "payload", "created_at")


def _event_rows(run_id: str | None, tenant: str, items: Sequence[Event], at: datetime) -> list[tuple[Any, ...]]:
    now = codec.to_us(at)
    return [(run_id, tenant, kind.value, codec.dumps(body), now) for kind, body in items]


def outbox_append(conn: Connection, items: Sequence[tuple[str | None, str, Event]], now: int) -> None:
    at = codec.from_us(now)
    rows = [row for rid, tenant, e in items for row in _event_rows(rid, tenant, [e], at)]
    fast.insert_rows(conn, outbox, _OUTBOX_COLUMNS, rows)


def leases_renew(conn: Connection, p: LeaseRenew) -> set[str]:
    """Extend the holder's leases; return the run ids it still holds (the others were taken)."""
    held: set[str] = set()
    exp = codec.to_us(p.lease_expires_at)
    for chunk in _chunks(list(p.leases)):
        stmt = (
            update(job_runs)
            .where(
                C.status.in_(_LEASED),
                C.lease_owner == p.worker_id,
                C.job_run_id.in_([r[0] for r in chunk]),
                tuple_(C.job_run_id, C.lease_token).in_(chunk),
            )
            .values(lease_expires_at=exp)
            .returning(C.job_run_id)
        )
        held.update(r[0] for r in conn.execute(stmt))
    if held:  # the lease-renewal metric's source of truth, counted in the renewing transaction
        W = workers.c
        conn.execute(
            update(workers).where(W.worker_id == p.worker_id).values(lease_renewals=W.lease_renewals + len(held))
        )
    return held


def runs_claimable_exists(
    conn: Connection, queues: Sequence[str], now: datetime, exclude_digests: Sequence[str] = ()
) -> bool:
    q = select(C.job_run_id).where(IS_CLAIMABLE, C.queue.in_(queues), C.due_at <= codec.to_us(now)).limit(1)
    if exclude_digests:  # runs waiting for a dependency that is down are not work to claim
        q = q.where(C.definition_digest.not_in(list(exclude_digests)))
    return conn.execute(q).first() is not None


def runs_lease_expired(conn: Connection, now: datetime, limit: int) -> list[JobRun]:
    q = (
        select(job_runs)
        .where(IS_LEASED, C.lease_expires_at < codec.to_us(now))
        .order_by(C.lease_expires_at)
        .limit(limit)
    )
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def runs_over_age(conn: Connection, created_before: datetime, limit: int) -> list[JobRun]:
    """The oldest open runs created before ``created_before``: up to ``limit`` waiting ones and
    ``limit`` leased ones (each read walks only its small partial index, never finished runs)."""
    cutoff = codec.to_us(created_before)
    out: list[JobRun] = []
    for open_ in (IS_CLAIMABLE, IS_LEASED, IS_HELD):
        q = select(job_runs).where(open_, C.created_at < cutoff).order_by(C.created_at).limit(limit)
        out += [codec.run_from_row(r) for r in conn.execute(q).mappings()]
    return out


def runs_queue_expired(conn: Connection, now: datetime, limit: int) -> list[JobRun]:
    q = select(job_runs).where(WAITS_WITH_QUEUE_DEADLINE, C.queue_deadline_at <= codec.to_us(now)).limit(limit)
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def runs_waiting_on(conn: Connection, digests: Sequence[str], due_before: datetime, limit: int) -> list[JobRun]:
    """Waiting runs of the definition versions ``digests`` due at or before ``due_before``,
    longest waiting first: those that waited too long for a dependency."""
    q = (
        select(job_runs)
        .where(IS_CLAIMABLE, C.definition_digest.in_(list(digests)), C.due_at <= codec.to_us(due_before))
        .order_by(C.due_at)
        .limit(limit)
    )
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def runs_stop_requested(conn: Connection, ids: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for chunk in _chunks(list(ids)):
        q = select(C.job_run_id).where(C.job_run_id.in_(chunk), C.stop_requested.is_(True))
        out.update(r[0] for r in conn.execute(q))
    return out


def runs_stop_check(conn: Connection, leases: Sequence[tuple[str, int]]) -> tuple[set[str], set[str]]:
    """For runs a worker is running, (id, its lease token): which a user asked to stop, and which
    are no longer its to run (the status moved on or the token did: escalated by the SLA
    monitor, closed by the rescuer). One read, so the worker's stop check stays one query."""
    stop: set[str] = set()
    taken: set[str] = set()
    tokens = dict(leases)
    for chunk in _chunks(list(tokens)):
        q = select(C.job_run_id, C.stop_requested, C.status, C.lease_token).where(C.job_run_id.in_(chunk))
        seen: set[str] = set()
        for run_id, stop_requested, status, token in conn.execute(q):
            seen.add(run_id)
            if status != RunStatus.RUNNING.value or token != tokens[run_id]:
                taken.add(run_id)
            elif stop_requested:
                stop.add(run_id)
        taken.update(set(chunk) - seen)  # gone altogether (retired)
    return stop, taken


def run_progress(conn: Connection, job_run_id: str, token: int, fraction: float | None, message: str | None) -> bool:
    stmt = (
        update(job_runs)
        .where(C.job_run_id == job_run_id, C.lease_token == token, C.status == RunStatus.RUNNING.value)
        .values(progress=fraction, progress_message=message)
    )
    return conn.execute(stmt).rowcount == 1


def runs_held(conn: Connection, limit: int) -> list[JobRun]:
    """Held runs, longest held first (the partial index of held runs: only they are read)."""
    q = select(job_runs).where(IS_HELD).order_by(C.held_at).limit(limit)
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]
