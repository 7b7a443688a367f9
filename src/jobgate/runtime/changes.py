"""Map settled decisions to the store's compare-and-set changes (shared by worker and rescuer)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from jobgate.core import events
from jobgate.core.decide import Decision
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
