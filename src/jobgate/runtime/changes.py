"""Map settled decisions to the store's compare-and-set changes (shared by worker and rescuer)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from jobgate.core import events
from jobgate.core.audit import AuditEvent
from jobgate.core.decide import Decision
from jobgate.core.governance import Verdict
from jobgate.core.models import DeadLetterReason, JobRun, Transition
from jobgate.core.settle import Settlement, settle_without_attempt
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.store.base import RunChange


def settlement_change(s: Settlement, run: JobRun, *, worker_id: str, now: datetime, revoke: bool = False) -> RunChange:
    values: dict[str, Any] = {"error_code": s.error_code, "error_message": s.error_message}
    if s.to_status is RunStatus.RETRY_WAIT:
        values.update(next_retry_at=s.decision.next_retry_at, due_at=s.decision.next_retry_at)
        if run.queue_deadline_at is not None and s.decision.next_retry_at is not None:
            # The queue timeout bounds each wait for a worker, so it restarts from the retry's due time.
            values["queue_deadline_at"] = s.decision.next_retry_at + (run.queue_deadline_at - run.due_at)
    else:
        values.update(ended_at=now, next_retry_at=None)
    if run.status is RunStatus.HELD:  # ended while held (queue timeout, maximum age): no longer held
        values.update(hold_reason=None, held_at=None)
    if s.to_status is RunStatus.COMPLETED:
        values.update(result=s.result or {}, progress=1.0)
        if s.artifact is not None:
            values.update(
                artifact_path=s.artifact[0],
                artifact_sha256=s.artifact[1],
                artifact_size=s.artifact[2],
                result_ref=s.artifact[0],
            )
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=s.from_status,
        to_status=s.to_status,
        transition=s.transition,
        expected_token=s.expected_token,
        revoke_lease=revoke,
        values=values,
        events=list(s.events),
        dead_letter=s.dead_letter,
    )


def start_change(run: JobRun, *, worker_id: str, now: datetime) -> RunChange:
    """DISPATCHED -> RUNNING: the attempt counter moves here, so a claim that never started costs nothing."""
    attempt = run.attempt + 1
    values: dict[str, Any] = {"progress": None, "progress_message": None}
    if run.started_at is None:
        values["started_at"] = now
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.DISPATCHED,
        to_status=RunStatus.RUNNING,
        transition=Transition(
            run.job_run_id,
            RunStatus.DISPATCHED,
            RunStatus.RUNNING,
            attempt,
            TransitionReason.STARTED.value,
            worker_id,
            now,
        ),
        expected_token=run.lease_token,
        start_attempt=True,
        values=values,
        events=[events.job_started(run, attempt, now)],
    )


def release_change(
    run: JobRun, *, actor: str, now: datetime, reason: TransitionReason, fenced: bool = True
) -> RunChange:
    """DISPATCHED -> SCHEDULED without using an attempt (shutdown, or a claim whose lease lapsed)."""
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.DISPATCHED,
        to_status=RunStatus.SCHEDULED,
        transition=Transition(
            run.job_run_id, RunStatus.DISPATCHED, RunStatus.SCHEDULED, run.attempt, reason.value, actor, now
        ),
        expected_token=run.lease_token if fenced else None,
        revoke_lease=not fenced,
        values={"due_at": now},
    )


def exhausted_change(run: JobRun, *, actor: str, now: datetime) -> RunChange:
    """A claimed run with no attempt left (its bound was lowered by hand): dead-letter, never run."""
    decision = Decision(
        RunStatus.DEAD_LETTERED,
        TransitionReason.RETRIES_EXHAUSTED,
        dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
    )
    s = settle_without_attempt(run, decision, now=now, actor=actor, error_code="MAX_ATTEMPTS_REACHED")
    return replace(settlement_change(s, run, worker_id=actor, now=now), expected_token=run.lease_token)


def _ref(run: Any) -> events.RunRef:
    job_class = run.job_class if isinstance(run.job_class, str) else run.job_class.value
    return events.RunRef(run.job_run_id, job_class, run.job_definition_id, run.tenant_id, run.idempotency_key)


def _status(value: Any) -> RunStatus:
    return value if isinstance(value, RunStatus) else RunStatus(value)


def _refusal_detail(verdict: Verdict) -> dict[str, Any]:
    code = None if verdict.code is None else verdict.code.value
    return {"code": code, "rule": verdict.rule, "message": verdict.message}


def hold_change(run: Any, verdict: Verdict, *, actor: str, now: datetime) -> RunChange:
    """A waiting (or claimed, unstarted) run whose next attempt a gate refused -> HELD, named by
    the refusal's code. No attempt is used; a claimed run loses its lease (fenced to it).
    ``run``: a ``JobRun`` or a claim candidate (anything with their fields)."""
    source = _status(run.status)
    code = None if verdict.code is None else verdict.code.value
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=source,
        to_status=RunStatus.HELD,
        transition=Transition(
            run.job_run_id,
            source,
            RunStatus.HELD,
            run.attempt,
            TransitionReason.HELD.value,
            actor,
            now,
            _refusal_detail(verdict),
        ),
        expected_token=run.lease_token if source is RunStatus.DISPATCHED else None,
        values={"hold_reason": code, "held_at": now},
        events=[events.job_held(_ref(run), code=code or "held", rule=verdict.rule, message=verdict.message, now=now)],
    )


def release_hold_change(run: Any, *, actor: str, now: datetime) -> RunChange:
    """HELD -> SCHEDULED: the gate that held the run admits it; it keeps its place (due time)."""
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.HELD,
        to_status=RunStatus.SCHEDULED,
        transition=Transition(
            run.job_run_id,
            RunStatus.HELD,
            RunStatus.SCHEDULED,
            run.attempt,
            TransitionReason.RELEASED.value,
            actor,
            now,
            {"hold_reason": run.hold_reason},
        ),
        values={"hold_reason": None, "held_at": None},
        events=[events.job_released(_ref(run), held_for=run.hold_reason, now=now)],
    )


_FINAL_REASONS = {
    "approval_revoked": TransitionReason.APPROVAL_REVOKED,
    "definition_retired": TransitionReason.DEFINITION_RETIRED,
}


def refused_cancel_change(run: Any, verdict: Verdict, *, actor: str, now: datetime) -> RunChange:
    """A run whose next attempt a final rule refused (its approval was revoked, its definition
    retired) -> CANCELLED: its remaining attempts will never run."""
    source = _status(run.status)
    code = None if verdict.code is None else verdict.code.value
    reason = _FINAL_REASONS.get(code or "", TransitionReason.CANCELLED_BY_USER)
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=source,
        to_status=RunStatus.CANCELLED,
        transition=Transition(
            run.job_run_id,
            source,
            RunStatus.CANCELLED,
            run.attempt,
            reason.value,
            actor,
            now,
            {**_refusal_detail(verdict), "error_code": code},
        ),
        expected_token=run.lease_token if source is RunStatus.DISPATCHED else None,
        revoke_lease=source is RunStatus.DISPATCHED,
        values={"ended_at": now, "error_code": code, "error_message": verdict.message, "hold_reason": None},
        events=[events.job_cancelled(_ref(run), actor=actor, reason=code, now=now)],
    )


def gate_audit_event(change: RunChange, *, actor: str, now: datetime) -> AuditEvent:
    """The audit entry of a hold, a release or a gate's cancellation (seed §49: a governance
    decision about a run is material), written with the change."""
    detail = change.transition.detail
    action = {RunStatus.HELD: "run.held", RunStatus.SCHEDULED: "run.released"}.get(change.to_status, "run.cancelled")
    code = detail.get("code") or detail.get("hold_reason")
    payload = {"attempt": change.transition.attempt, "rule": detail.get("rule"), "message": detail.get("message")}
    return AuditEvent(change.tenant_id, actor, action, "run", change.job_run_id, now, reason=code, payload=payload)
