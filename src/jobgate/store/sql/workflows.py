"""Workflow rows: the run, its steps and its transitions, changed only together.

Every advance of a workflow is one compare-and-set on ``workflow_runs.version``, in the same
transaction as its step rows, its transitions and the step runs it creates: two coordinators
advancing one workflow cannot both win, and a coordinator that dies mid-advance leaves nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, or_, select, update

from jobgate.core.records import StepRecord, WorkflowRecord, WorkflowTransition, WorkflowUpdate
from jobgate.core.states import TERMINAL, RunStatus
from jobgate.store import codec
from jobgate.store.sql import seals as record_seals
from jobgate.store.tables import job_runs, workflow_runs, workflow_steps, workflow_transitions

W = workflow_runs.c
S = workflow_steps.c
T = workflow_transitions.c
J = job_runs.c
_ACTIVE = ("CREATED", "SCHEDULED", "DISPATCHED", "RUNNING")
_TERMINAL = tuple(s.value for s in TERMINAL)
_OPEN_STEPS = ("PENDING", "RUNNING", "STOPPING", "COMPENSATING")


def _record(r: Any) -> WorkflowRecord:
    return WorkflowRecord(
        workflow_run_id=r.workflow_run_id,
        tenant_id=r.tenant_id,
        idempotency_key=r.idempotency_key,
        job_definition_id=r.job_definition_id,
        definition_version=r.definition_version,
        definition_digest=r.definition_digest,
        job_class=r.job_class,
        status=RunStatus(r.status),
        phase=r.phase,
        params=codec.loads(r.params),
        scope=codec.loads(r.scope),
        trigger=codec.loads(r.trigger),
        config_snapshot_id=r.config_snapshot_id,
        config_digest=r.config_digest,
        requested_by=r.requested_by,
        created_at=codec.from_us(r.created_at),
        started_at=codec.opt_dt(r.started_at),
        ended_at=codec.opt_dt(r.ended_at),
        error_code=r.error_code,
        error_message=r.error_message,
        cancel_requested=bool(r.cancel_requested),
        version=r.version,
    )


def _step(r: Any) -> StepRecord:
    return StepRecord(
        workflow_run_id=r.workflow_run_id,
        step_id=r.step_id,
        tenant_id=r.tenant_id,
        position=r.position,
        status=r.status,
        job_run_id=r.job_run_id,
        compensation_run_id=r.compensation_run_id,
        outputs=codec.loads(r.outputs) if r.outputs is not None else None,
        completed_order=r.completed_order,
        started_at=codec.opt_dt(r.started_at),
        ended_at=codec.opt_dt(r.ended_at),
        error_code=r.error_code,
    )


def _step_values(s: StepRecord) -> dict[str, Any]:
    return {
        "status": s.status,
        "job_run_id": s.job_run_id,
        "compensation_run_id": s.compensation_run_id,
        "outputs": None if s.outputs is None else codec.dumps(s.outputs),
        "completed_order": s.completed_order,
        "started_at": codec.opt_us(s.started_at),
        "ended_at": codec.opt_us(s.ended_at),
        "error_code": s.error_code,
    }


def _transition_row(t: WorkflowTransition, tenant_id: str) -> dict[str, Any]:
    return {
        "workflow_run_id": t.workflow_run_id,
        "tenant_id": tenant_id,
        "seq": t.seq,
        "step_id": t.step_id,
        "from_status": t.from_status,
        "to_status": t.to_status,
        "reason": t.reason,
        "actor": t.actor,
        "at": codec.to_us(t.at),
        "detail": codec.dumps(t.detail) if t.detail else None,
    }


def workflow_insert(
    conn: Connection, w: WorkflowRecord, steps: Sequence[StepRecord], transitions: Sequence[WorkflowTransition]
) -> bool:
    """Insert a new workflow run; False when its idempotency key already has one (nothing written)."""
    inserted = conn.execute(
        _insert_ignore(conn)
        .values(
            workflow_run_id=w.workflow_run_id,
            tenant_id=w.tenant_id,
            idempotency_key=w.idempotency_key,
            job_definition_id=w.job_definition_id,
            definition_version=w.definition_version,
            definition_digest=w.definition_digest,
            job_class=w.job_class,
            status=w.status.value,
            phase=w.phase,
            params=codec.dumps(w.params),
            scope=codec.dumps(w.scope),
            trigger=codec.dumps(w.trigger),
            config_snapshot_id=w.config_snapshot_id,
            config_digest=w.config_digest,
            requested_by=w.requested_by,
            created_at=codec.to_us(w.created_at),
            cancel_requested=False,
            version=0,
        )
        .returning(W.workflow_run_id)
    ).first()
    if inserted is None:
        return False
    if steps:
        conn.execute(
            workflow_steps.insert(),
            [
                {
                    "workflow_run_id": s.workflow_run_id,
                    "step_id": s.step_id,
                    "tenant_id": s.tenant_id,
                    "position": s.position,
                }
                | _step_values(s)
                for s in steps
            ],
        )
    if transitions:
        conn.execute(workflow_transitions.insert(), [_transition_row(t, w.tenant_id) for t in transitions])
    return True


def _insert_ignore(conn: Connection) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING on either backend: a second start with the same key
    writes nothing and the caller reads the first."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(workflow_runs).on_conflict_do_nothing()
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(workflow_runs).on_conflict_do_nothing()


def workflow_get(conn: Connection, workflow_run_id: str, tenant_id: str | None = None) -> WorkflowRecord | None:
    q = select(workflow_runs).where(W.workflow_run_id == workflow_run_id)
    if tenant_id is not None:
        q = q.where(W.tenant_id == tenant_id)
    row = conn.execute(q).first()
    return None if row is None else _record(row)


def workflow_lock(conn: Connection, workflow_run_id: str, *, lock_rows: bool) -> WorkflowRecord | None:
    """The row, locked until the transaction ends (PostgreSQL; SQLite's writer is alone anyway)."""
    q = select(workflow_runs).where(W.workflow_run_id == workflow_run_id)
    if lock_rows:
        q = q.with_for_update()
    row = conn.execute(q).first()
    return None if row is None else _record(row)


def workflow_by_key(conn: Connection, idempotency_key: str) -> WorkflowRecord | None:
    row = conn.execute(select(workflow_runs).where(W.idempotency_key == idempotency_key)).first()
    return None if row is None else _record(row)


def workflow_steps_of(conn: Connection, workflow_run_id: str) -> list[StepRecord]:
    rows = conn.execute(
        select(workflow_steps).where(S.workflow_run_id == workflow_run_id).order_by(S.position)
    ).fetchall()
    return [_step(r) for r in rows]


def workflow_transitions_of(conn: Connection, workflow_run_id: str) -> list[WorkflowTransition]:
    rows = conn.execute(
        select(workflow_transitions).where(T.workflow_run_id == workflow_run_id).order_by(T.seq)
    ).fetchall()
    return [
        WorkflowTransition(
            workflow_run_id=r.workflow_run_id,
            seq=r.seq,
            step_id=r.step_id,
            from_status=r.from_status,
            to_status=r.to_status,
            reason=r.reason,
            actor=r.actor,
            at=codec.from_us(r.at),
            detail=codec.loads(r.detail) if r.detail is not None else {},
        )
        for r in rows
    ]


def workflows_list(
    conn: Connection,
    tenant_id: str,
    *,
    status: str | None = None,
    job_definition_id: str | None = None,
    before: tuple[datetime, str] | None = None,
    limit: int = 100,
) -> list[WorkflowRecord]:
    q = select(workflow_runs).where(W.tenant_id == tenant_id)
    if status is not None:
        q = q.where(W.status == status)
    if job_definition_id is not None:
        q = q.where(W.job_definition_id == job_definition_id)
    if before is not None:
        at, wid = codec.to_us(before[0]), before[1]
        q = q.where(or_(W.created_at < at, and_(W.created_at == at, W.workflow_run_id < wid)))
    q = q.order_by(W.created_at.desc(), W.workflow_run_id.desc()).limit(limit)
    return [_record(r) for r in conn.execute(q).fetchall()]


def _due_statements() -> tuple[Any, ...]:
    """Workflows with something to decide: not started, cancel asked, a step whose run (or
    compensation run) has finished, or steps left open by a workflow ended from outside (the
    SLA monitor's escalation). Each arm reads an index that holds only open rows. Built once:
    every worker's coordinator asks several times a second, mostly to hear "nothing"."""
    active = W.status.in_(_ACTIVE)
    starting = select(W.workflow_run_id).where(
        active, or_(W.status.in_(("CREATED", "SCHEDULED")), W.cancel_requested.is_(True))
    )
    step_done = (
        select(S.workflow_run_id)
        .join(job_runs, J.job_run_id == S.job_run_id)
        .join(workflow_runs, W.workflow_run_id == S.workflow_run_id)
        .where(S.status.in_(("RUNNING", "STOPPING")), J.status.in_(_TERMINAL), active)
    )
    compensation_done = (
        select(S.workflow_run_id)
        .join(job_runs, J.job_run_id == S.compensation_run_id)
        .join(workflow_runs, W.workflow_run_id == S.workflow_run_id)
        .where(S.status == "COMPENSATING", J.status.in_(_TERMINAL), active)
    )
    halted = (
        select(S.workflow_run_id)
        .join(workflow_runs, W.workflow_run_id == S.workflow_run_id)
        .where(S.status.in_(_OPEN_STEPS), W.status.not_in(_ACTIVE))
    )
    return tuple(q.limit(bindparam("limit")) for q in (starting, step_done, compensation_done, halted))


_DUE = _due_statements()


def workflows_due(conn: Connection, limit: int) -> list[str]:
    ids: list[str] = []
    for q in _DUE:
        for (wid,) in conn.execute(q, {"limit": limit}):
            if wid not in ids:
                ids.append(wid)
    return ids[:limit]


def workflow_apply(conn: Connection, u: WorkflowUpdate) -> bool:
    """Compare-and-set on the version; then the steps and the transitions. False: lost the race."""
    values = dict(u.values)
    for key in ("started_at", "ended_at"):
        if key in values:
            values[key] = codec.opt_us(values[key])
    if "status" in values and isinstance(values["status"], RunStatus):
        values["status"] = values["status"].value
    applied = conn.execute(
        update(workflow_runs)
        .where(W.workflow_run_id == u.workflow_run_id, W.version == u.expected_version)
        .values(version=W.version + 1, **values)
        .returning(W.status)
    ).first()
    if applied is None:
        return False
    for s in u.steps:
        conn.execute(
            update(workflow_steps)
            .where(S.workflow_run_id == s.workflow_run_id, S.step_id == s.step_id)
            .values(**_step_values(s))
        )
    if u.transitions:
        conn.execute(workflow_transitions.insert(), [_transition_row(t, u.tenant_id) for t in u.transitions])
    # An end is sealed with it (``core.seals``); so is every later change of an ended workflow
    # run (an escalated one's open steps halted after its end): its seal covers them.
    ended = applied.status not in _ACTIVE
    if u.values.get("status") is not None or (ended and (u.steps or u.transitions)):
        at = max((t.at for t in u.transitions), default=None)
        record_seals.seal_workflow(conn, u.workflow_run_id, codec.to_us(at or datetime.now(UTC)))
    return True


def workflow_request_cancel(conn: Connection, workflow_run_id: str, tenant_id: str | None) -> bool:
    """Mark it and move its version on, so a coordinator that decided from the state before the
    cancel loses its compare-and-set and decides again (seeing the cancel)."""
    q = update(workflow_runs).where(
        W.workflow_run_id == workflow_run_id, W.status.in_(_ACTIVE), W.phase == "forward"
    )  # a compensation that began meanwhile (it committed first) runs to its end
    if tenant_id is not None:
        q = q.where(W.tenant_id == tenant_id)
    return conn.execute(q.values(cancel_requested=True, version=W.version + 1)).rowcount == 1


def workflow_bump(conn: Connection, workflow_run_id: str) -> bool:
    """Move the version on: a coordinator that decided from the state before (a requeue of a
    step's run) loses its compare-and-set and decides again."""
    q = update(workflow_runs).where(W.workflow_run_id == workflow_run_id, W.status.in_(_ACTIVE))
    return conn.execute(q.values(version=W.version + 1)).rowcount == 1


def workflow_next_seq(conn: Connection, workflow_run_id: str) -> int:
    value = conn.execute(select(func.max(T.seq)).where(T.workflow_run_id == workflow_run_id)).scalar()
    return int(value or 0) + 1


def workflows_active_exist(conn: Connection) -> bool:
    return conn.execute(select(W.workflow_run_id).where(W.status.in_(_ACTIVE)).limit(1)).first() is not None
