"""SQL of the SLA monitor: the subjects that can have something due, and the breach records.

Which rows are read, and why only those (``service.sla`` explains the whole design):

- open runs and open workflow runs whose deadlines may have come: each read walks a partial
  index holding only open rows (claimable, leased, active workflows), never finished history;
- transitions after a cursor (``outbox_cursors`` rows ``sla-monitor:runs`` and
  ``sla-monitor:workflows``): a subject that ended between two looks is seen once, by the
  transition that ended it, and never again;
- breach records by (tenant, subject): the unique (tenant, subject, kind, phase) key makes
  ``INSERT ... ON CONFLICT DO NOTHING`` the once-only guard on both backends.

Workflow runs are changed here through ``workflow_runs`` and ``workflow_transitions`` alone
(escalation: a compare-and-set on ``version``), so the workflow engine's own writes and these
can never both win.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, false, func, or_, select, text, tuple_, update

from jobgate.core.models import JobRun
from jobgate.core.records import BreachRecord, DefinitionPolicies, Left, WorkflowSubject
from jobgate.core.sla import SlaGroups
from jobgate.core.states import RunStatus
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.sql import seals as record_seals
from jobgate.store.tables import (
    CLAIMABLE_SQL,
    LEASED_SQL,
    definitions,
    job_runs,
    outbox_cursors,
    run_transitions,
    sla_breaches,
    workflow_runs,
    workflow_transitions,
)

R = job_runs.c
T = run_transitions.c
W = workflow_runs.c
WT = workflow_transitions.c
B = sla_breaches.c
_CHUNK = 400
_TERMINAL = tuple(s.value for s in RunStatus if s.is_terminal)
_ACTIVE_WORKFLOW_SQL = "status IN ('CREATED', 'SCHEDULED', 'DISPATCHED', 'RUNNING')"  # ix_workflow_runs_active

# (definition ids, created at or before this instant in µs): open subjects old enough for a
# policy's earliest reminder or deadline, one group per distinct earliest offset.


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _in_groups(definition: Any, created: Any, groups: SlaGroups) -> ColumnElement[bool]:
    arms = [and_(definition.in_(list(ids)), created <= before) for ids, before in groups if ids]
    return or_(*arms) if arms else false()


# ---------------------------------------------------------------- definitions


def _step_timeouts(doc: dict[str, Any]) -> bool:
    workflow = doc.get("workflow")
    steps = workflow.get("steps") if isinstance(workflow, dict) else None
    return isinstance(steps, list) and any(isinstance(s, dict) and s.get("timeout_policy") for s in steps)


def definition_keys(conn: Connection) -> list[tuple[str, str, int]]:
    """Every stored definition version, by key (an index-only read)."""
    q = select(definitions.c.tenant_id, definitions.c.job_definition_id, definitions.c.version)
    return [(str(t), str(d), int(v)) for t, d, v in conn.execute(q)]


def definition_policies(conn: Connection, keys: Sequence[tuple[str, str, int]]) -> list[DefinitionPolicies]:
    """The SLA and timeout policy names of these versions, from their stored content."""
    D = definitions.c
    out: list[DefinitionPolicies] = []
    for chunk in _chunks(list(keys)):
        q = select(D.tenant_id, D.job_definition_id, D.version, D.content).where(
            tuple_(D.tenant_id, D.job_definition_id, D.version).in_(chunk)
        )
        for tenant, def_id, version, content in conn.execute(q):
            doc = codec.loads(content) or {}
            sla, timeout = doc.get("sla_policy"), doc.get("timeout_policy")
            out.append(
                DefinitionPolicies(
                    tenant,
                    def_id,
                    version,
                    sla if isinstance(sla, str) else None,
                    timeout if isinstance(timeout, str) else None,
                    _step_timeouts(doc),
                )
            )
    return out


# ---------------------------------------------------------------- open subjects
def open_runs_due(
    conn: Connection,
    *,
    waiting: bool,
    now: datetime,
    sla_groups: SlaGroups,
    after: tuple[int, str] | None,
    limit: int,
) -> list[JobRun]:
    """Open runs that may have a deadline behind them, oldest first, after the page key
    ``after`` (created_at µs, run id). ``waiting``: claimable runs (queue timeout, SLA);
    otherwise leased ones (execution timeout from the first start, which is never later than
    the current attempt's, and SLA). Each arm walks its partial index of open rows only."""
    now_us = codec.to_us(now)
    if waiting:
        cond = and_(
            text(CLAIMABLE_SQL),
            or_(
                and_(R.queue_deadline_at.is_not(None), R.queue_deadline_at <= now_us),
                _in_groups(R.job_definition_id, R.created_at, sla_groups),
            ),
        )
    else:
        cond = and_(
            text(LEASED_SQL),
            or_(
                and_(
                    R.status == RunStatus.RUNNING.value,
                    R.execution_timeout_us.is_not(None),
                    R.started_at + R.execution_timeout_us <= now_us,
                ),
                _in_groups(R.job_definition_id, R.created_at, sla_groups),
            ),
        )
    q = select(job_runs).where(cond)
    if after is not None:
        q = q.where(tuple_(R.created_at, R.job_run_id) > tuple_(after[0], after[1]))
    q = q.order_by(R.created_at, R.job_run_id).limit(limit)
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def attempt_starts(conn: Connection, keys: Collection[tuple[str, int]]) -> dict[tuple[str, int], datetime]:
    """When each (run, attempt) started: its transition into RUNNING (the run's index)."""
    ids = sorted({run_id for run_id, _ in keys})
    out: dict[tuple[str, int], datetime] = {}
    for chunk in _chunks(ids):
        q = (
            select(T.job_run_id, T.attempt, func.max(T.at))
            .where(T.job_run_id.in_(chunk), T.to_status == RunStatus.RUNNING.value)
            .group_by(T.job_run_id, T.attempt)
        )
        for run_id, attempt, at in conn.execute(q):
            if (run_id, attempt) in keys:
                out[(run_id, attempt)] = codec.from_us(at)
    return out


_WORKFLOW_COLUMNS = (
    W.workflow_run_id,
    W.tenant_id,
    W.job_definition_id,
    W.definition_version,
    W.job_class,
    W.status,
    W.params,
    W.scope,
    W.created_at,
    W.version,
)


def _workflow(r: Any) -> WorkflowSubject:
    return WorkflowSubject(
        r.workflow_run_id,
        r.tenant_id,
        r.job_definition_id,
        r.definition_version,
        r.job_class,
        RunStatus(r.status),
        codec.loads(r.params) or {},
        codec.loads(r.scope) or {},
        codec.from_us(r.created_at),
        r.version,
    )


def open_workflows_due(
    conn: Connection, *, sla_groups: SlaGroups, after: tuple[int, str] | None, limit: int
) -> list[WorkflowSubject]:
    """Active workflow runs old enough for their policy's earliest reminder or deadline."""
    q = select(*_WORKFLOW_COLUMNS).where(
        text(_ACTIVE_WORKFLOW_SQL), _in_groups(W.job_definition_id, W.created_at, sla_groups)
    )
    if after is not None:
        q = q.where(tuple_(W.created_at, W.workflow_run_id) > tuple_(after[0], after[1]))
    q = q.order_by(W.created_at, W.workflow_run_id).limit(limit)
    return [_workflow(r) for r in conn.execute(q)]


# ---------------------------------------------------------------- subjects that ended


def max_id(conn: Connection, workflows: bool) -> int:
    column = WT.id if workflows else T.id
    return int(conn.execute(select(func.max(column))).scalar() or 0)


def contiguous_through(conn: Connection, *, workflows: bool, after: int, upto: int) -> int:
    """The highest id ``h`` in [after, upto] such that every id in (after, h] is visible now.

    On PostgreSQL ids are taken when a row is inserted and become visible when its transaction
    commits, in any order: a missing id is a transaction still open (or one rolled back). Read
    before the rows themselves (each statement of a read-committed transaction sees at least
    what the one before it saw), every id up to ``h`` is then in the reads that follow."""
    c = (workflow_transitions if workflows else run_transitions).c
    in_range = (c.id > after, c.id <= upto)
    ids = select(c.id.label("id"), func.lag(c.id, 1, after).over(order_by=c.id).label("prev")).where(*in_range)
    sub = ids.subquery()
    before_gap = conn.execute(select(sub.c.prev).where(sub.c.id - sub.c.prev > 1).order_by(sub.c.id).limit(1)).scalar()
    if before_gap is not None:
        return int(before_gap)
    last = conn.execute(select(func.max(c.id)).where(*in_range)).scalar()
    return after if last is None else int(last)


def runs_left(conn: Connection, *, after: int, upto: int, sla_definitions: Sequence[str]) -> list[tuple[Left, JobRun]]:
    """Transitions in (after, upto] that ended an attempt, a wait or the run itself, of runs
    that can have a deadline at all (a timeout, or a definition with an SLA policy)."""
    open_ = [s.value for s in RunStatus if not s.is_terminal]
    q = (
        select(
            T.id.label("t_id"),
            T.from_status.label("t_from"),
            T.to_status.label("t_to"),
            T.attempt.label("t_attempt"),
            T.at.label("t_at"),
            job_runs,
        )
        .join(job_runs, R.job_run_id == T.job_run_id)
        .where(
            T.id > after,
            T.id <= upto,
            T.from_status.in_(open_),
            or_(
                T.to_status.in_(_TERMINAL),
                T.from_status.in_((RunStatus.RUNNING.value, RunStatus.SCHEDULED.value, RunStatus.RETRY_WAIT.value)),
            ),
            or_(
                R.queue_deadline_at.is_not(None),
                R.execution_timeout_us.is_not(None),
                R.job_definition_id.in_(list(sla_definitions)),
            ),
        )
        .order_by(T.id)
    )
    out: list[tuple[Left, JobRun]] = []
    for r in conn.execute(q).mappings():
        left = Left(r["t_id"], RunStatus(r["t_from"]), RunStatus(r["t_to"]), r["t_attempt"], codec.from_us(r["t_at"]))
        out.append((left, codec.run_from_row(r)))
    return out


def workflows_left(
    conn: Connection, *, after: int, upto: int, sla_definitions: Sequence[str]
) -> list[tuple[Left, WorkflowSubject]]:
    """Workflow transitions in (after, upto] that ended the workflow itself (not a step)."""
    open_ = [s.value for s in RunStatus if not s.is_terminal]
    q = (
        select(WT.id, WT.from_status, WT.to_status, WT.at, *_WORKFLOW_COLUMNS)
        .join(workflow_runs, W.workflow_run_id == WT.workflow_run_id)
        .where(
            WT.id > after,
            WT.id <= upto,
            WT.step_id.is_(None),
            WT.from_status.in_(open_),
            WT.to_status.in_(_TERMINAL),
            W.job_definition_id.in_(list(sla_definitions)),
        )
        .order_by(WT.id)
    )
    return [
        (Left(r.id, RunStatus(r.from_status), RunStatus(r.to_status), 0, codec.from_us(r.at)), _workflow(r))
        for r in conn.execute(q)
    ]


def cursor_get(conn: Connection, name: str) -> int | None:
    row = conn.execute(select(outbox_cursors.c.delivered_through).where(outbox_cursors.c.name == name)).first()
    return None if row is None else int(row[0])


def mark_get(conn: Connection, name: str) -> tuple[int, datetime] | None:
    """A value recorded with the instant it was recorded at (an ``outbox_cursors`` row)."""
    C = outbox_cursors.c
    row = conn.execute(select(C.delivered_through, C.updated_at).where(C.name == name)).first()
    return None if row is None else (int(row[0]), codec.from_us(row[1]))


def mark_put(conn: Connection, name: str, value: int, now: datetime) -> None:
    """Record ``value`` as of ``now``, replacing what the row held (moving either way)."""
    C = outbox_cursors.c
    done = conn.execute(
        update(outbox_cursors).where(C.name == name).values(delivered_through=value, updated_at=codec.to_us(now))
    ).rowcount
    if not done:
        conn.execute(
            _insert_ignore(conn, outbox_cursors).values(name=name, delivered_through=value, updated_at=codec.to_us(now))
        )


def cursor_put(conn: Connection, name: str, value: int, now: datetime) -> None:
    """Move the named cursor forward (never back: a slower monitor cannot undo a faster one)."""
    C = outbox_cursors.c
    moved = conn.execute(
        update(outbox_cursors)
        .where(C.name == name, C.delivered_through < value)
        .values(delivered_through=value, updated_at=codec.to_us(now))
    ).rowcount
    if not moved and cursor_get(conn, name) is None:
        conn.execute(
            _insert_ignore(conn, outbox_cursors).values(name=name, delivered_through=value, updated_at=codec.to_us(now))
        )


# ---------------------------------------------------------------- breach records


def _record(r: Any) -> BreachRecord:
    return BreachRecord(
        r.sla_breach_id,
        r.tenant_id,
        r.subject_kind,
        r.subject_id,
        r.job_class,
        r.job_definition_id,
        r.eco_number,
        r.kind,
        r.phase,
        r.sla_policy,
        codec.from_us(r.deadline),
        codec.from_us(r.detected_at),
        r.severity,
        bool(r.requires_escalation),
        bool(r.escalated),
    )


def _insert_ignore(conn: Connection, table: Any) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing()
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing()


_BREACH_COLUMNS = tuple(c.name for c in sla_breaches.c)


def _row(b: BreachRecord) -> tuple[Any, ...]:
    values = {
        "sla_breach_id": b.sla_breach_id,
        "tenant_id": b.tenant_id,
        "subject_kind": b.subject_kind,
        "subject_id": b.subject_id,
        "job_class": b.job_class,
        "job_definition_id": b.job_definition_id,
        "eco_number": b.eco_number,
        "kind": b.kind,
        "phase": b.phase,
        "sla_policy": b.sla_policy,
        "deadline": codec.to_us(b.deadline),
        "detected_at": codec.to_us(b.detected_at),
        "severity": b.severity,
        "requires_escalation": b.requires_escalation,
        "escalated": b.escalated,
    }
    return tuple(values[c] for c in _BREACH_COLUMNS)


def breaches_insert(conn: Connection, records: Sequence[BreachRecord]) -> set[str]:
    """Record each of ``records`` unless its (tenant, subject, kind, phase) is recorded already;
    the ids this call recorded. Concurrent monitors: PostgreSQL makes the second wait for the
    first's commit and then do nothing; SQLite has one writer at a time."""
    found = driver.insert_rows(
        conn,
        sla_breaches,
        _BREACH_COLUMNS,
        [_row(b) for b in records],
        suffix="ON CONFLICT DO NOTHING RETURNING sla_breach_id",
    )
    return {r[0] for r in found}


def breach_insert(conn: Connection, b: BreachRecord) -> bool:
    """``breaches_insert`` of one record: True if this call recorded it."""
    return bool(breaches_insert(conn, [b]))


def breaches_of(conn: Connection, subjects: Collection[tuple[str, str]]) -> dict[tuple[str, str], list[BreachRecord]]:
    """The records of these (tenant, subject) pairs (the unique index's prefix)."""
    out: dict[tuple[str, str], list[BreachRecord]] = {}
    for chunk in _chunks(sorted(subjects)):
        q = select(sla_breaches).where(tuple_(B.tenant_id, B.subject_id).in_(chunk))
        for r in conn.execute(q):
            out.setdefault((r.tenant_id, r.subject_id), []).append(_record(r))
    return out


def breaches_mark_escalated(conn: Connection, tenant_id: str, subject_id: str) -> None:
    conn.execute(
        update(sla_breaches)
        .where(B.tenant_id == tenant_id, B.subject_id == subject_id, B.requires_escalation.is_(True))
        .values(escalated=True)
    )


def breaches_list(
    conn: Connection,
    tenant_id: str,
    *,
    phase: str | None = None,
    kind: str | None = None,
    subject_id: str | None = None,
    job_definition_ids: Sequence[str] | None = None,
    before: tuple[datetime, str] | None = None,
    limit: int = 100,
) -> list[BreachRecord]:
    """A tenant's records, newest first; ``before`` (detected_at, id) of the last row seen pages on."""
    q = select(sla_breaches).where(B.tenant_id == tenant_id)
    if phase is not None:
        q = q.where(B.phase == phase)
    if kind is not None:
        q = q.where(B.kind == kind)
    if subject_id is not None:
        q = q.where(B.subject_id == subject_id)
    if job_definition_ids is not None:
        q = q.where(B.job_definition_id.in_(list(job_definition_ids)))
    if before is not None:
        at, bid = codec.to_us(before[0]), before[1]
        q = q.where(or_(B.detected_at < at, and_(B.detected_at == at, B.sla_breach_id < bid)))
    q = q.order_by(B.detected_at.desc(), B.sla_breach_id.desc()).limit(limit)
    return [_record(r) for r in conn.execute(q)]


# ---------------------------------------------------------------- workflow escalation
def workflow_escalate(
    conn: Connection, w: WorkflowSubject, *, now: datetime, actor: str, error_code: str, detail: dict[str, Any]
) -> bool:
    """ESCALATED by compare-and-set on ``version`` (and the status the monitor saw), with the
    workflow's own transition (``step_id`` NULL, the next ``seq``); False: it moved meanwhile."""
    now_us = codec.to_us(now)
    changed = conn.execute(
        update(workflow_runs)
        .where(W.workflow_run_id == w.workflow_run_id, W.version == w.version, W.status == w.status.value)
        .values(
            status=RunStatus.ESCALATED.value,
            version=W.version + 1,
            ended_at=now_us,
            error_code=error_code,
            error_message="SLA escalation: a deadline requires human escalation",
        )
    ).rowcount
    if changed != 1:
        return False
    seq = conn.execute(select(func.max(WT.seq)).where(WT.workflow_run_id == w.workflow_run_id)).scalar()
    conn.execute(
        workflow_transitions.insert().values(
            workflow_run_id=w.workflow_run_id,
            tenant_id=w.tenant_id,
            seq=int(seq or 0) + 1,
            step_id=None,
            from_status=w.status.value,
            to_status=RunStatus.ESCALATED.value,
            reason="sla_escalation",
            actor=actor,
            at=now_us,
            detail=codec.dumps(detail),
        )
    )
    record_seals.seal_workflow(conn, w.workflow_run_id, now_us)
    return True
