"""Every event jobgate emits, built here and nowhere else (seed 000 §23, §27, §45-47).

Builders are pure: they take the run and the instant and return the payload that goes into
the transactional outbox with the transition that caused it. The outbox delivers them at
least once, in order per run; consumers de-duplicate by ``event_id``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from jobgate.core.canonical import isoformat_utc
from jobgate.core.models import DeadLetter, JobRun

ENGINE_CMI = "vera.TG-SCHED.ENGINE.ORCHESTRATOR.1_0_0"
EVENT_PREFIX = "trustgate.scheduler."


class EventType(StrEnum):
    JOB_STARTED = "job_started"
    JOB_COMPLETED = "job_completed"
    JOB_FAILED = "job_failed"
    JOB_RETRIED = "job_retried"
    JOB_DEAD_LETTERED = "job_dead_lettered"
    JOB_CANCELLED = "job_cancelled"
    JOB_ESCALATED = "job_escalated"
    JOB_REQUEUED = "job_requeued"
    JOB_STOP_REQUESTED = "job_stop_requested"
    JOB_HELD = "job_held"  # a gate refused the start of an attempt: the run waits, named
    JOB_RELEASED = "job_released"  # the gate admits the held run again: it is claimable
    SAFE_MODE_ACTIVATION = "safe_mode_activation"  # the seed §48 name (an anchoring candidate)
    SAFE_MODE_DEACTIVATION = "safe_mode_deactivation"
    REPLAY_MISMATCH = "replay_mismatch"  # critical: a run's record no longer replays to its hash
    SLA_BREACH = "sla_breach"  # seed §23: a deadline of seed §22 passed (once per subject and kind)
    SLA_REMINDER = "sla_reminder"  # a deadline is near (the policy's remind_before_seconds)
    DEPENDENCY_UNAVAILABLE = "dependency_unavailable"  # once per outage of a declared dependency
    DEPENDENCY_RECOVERED = "dependency_recovered"
    WORKFLOW_STARTED = "workflow_started"
    WORKFLOW_COMPLETED = "workflow_completed"
    WORKFLOW_FAILED = "workflow_failed"
    WORKFLOW_CANCELLED = "workflow_cancelled"
    WORKFLOW_ESCALATED = "workflow_escalated"

    @property
    def qualified(self) -> str:
        """The seed's dotted name; dead letters keep the seed's spelling ``dead_lettered``."""
        if self is EventType.JOB_DEAD_LETTERED:
            return EVENT_PREFIX + "dead_lettered"
        return EVENT_PREFIX + self.value


Event = tuple[EventType, dict[str, Any]]


class RunRef(NamedTuple):
    """Who an event is about, for events written from a claim's rows (no ``JobRun`` decoded)."""

    job_run_id: str
    job_class: str
    job_definition_id: str
    tenant_id: str
    idempotency_key: str


def _base(kind: EventType, run: JobRun | RunRef) -> dict[str, Any]:
    job_class = run.job_class
    return {
        "event_type": kind.qualified,
        "job_run_id": run.job_run_id,
        "job_class": job_class if isinstance(job_class, str) else job_class.value,
        "job_definition_id": run.job_definition_id,
        "tenant_id": run.tenant_id,
        "idempotency_key": run.idempotency_key,
    }


class StartedRun(NamedTuple):
    """What a ``job_started`` event says about its run: a claim writes these events from the
    rows it updated, before (and without) decoding them into ``JobRun`` values."""

    job_run_id: str
    job_class: str
    job_definition_id: str
    tenant_id: str
    idempotency_key: str
    config_snapshot_id: str
    attempt: int

    @classmethod
    def of(cls, run: JobRun, attempt: int) -> StartedRun:
        """The facts of ``run`` starting its ``attempt``."""
        return cls(
            run.job_run_id,
            str(run.job_class),
            run.job_definition_id,
            run.tenant_id,
            run.idempotency_key,
            run.config_snapshot_id,
            attempt,
        )


def started_event(run: StartedRun, now: datetime) -> Event:
    """``job_started``: the one builder, for a claim's rows and for a worker's buffered start."""
    body = {
        "event_type": EventType.JOB_STARTED.qualified,
        "job_run_id": run.job_run_id,
        "job_class": run.job_class,
        "job_definition_id": run.job_definition_id,
        "tenant_id": run.tenant_id,
        "idempotency_key": run.idempotency_key,
        "engine_cmi": ENGINE_CMI,
        "config_snapshot_id": run.config_snapshot_id,
        "attempt": run.attempt,
        "started_at": isoformat_utc(now),
    }
    return EventType.JOB_STARTED, body


def job_completed(run: JobRun, result: dict[str, Any] | None, started_at: datetime, now: datetime) -> Event:
    body = _base(EventType.JOB_COMPLETED, run)
    body.update(
        result=result or {},
        attempt=run.attempt,
        duration_ms=int((now - started_at).total_seconds() * 1000),
        completed_at=isoformat_utc(now),
    )
    return EventType.JOB_COMPLETED, body


def job_failed(
    run: JobRun, *, error_code: str | None, retryable: bool, next_retry_at: datetime | None, now: datetime
) -> Event:
    body = _base(EventType.JOB_FAILED, run)
    body.update(
        error_code=error_code,
        retryable=retryable,
        attempt=run.attempt,
        next_retry_at=None if next_retry_at is None else isoformat_utc(next_retry_at),
        failed_at=isoformat_utc(now),
    )
    return EventType.JOB_FAILED, body


def job_retried(run: JobRun, *, next_retry_at: datetime, reason: str, now: datetime) -> Event:
    body = _base(EventType.JOB_RETRIED, run)
    body.update(
        attempt=run.attempt,
        next_attempt=run.attempt + 1,
        reason=reason,
        next_retry_at=isoformat_utc(next_retry_at),
        retried_at=isoformat_utc(now),
    )
    return EventType.JOB_RETRIED, body


def job_dead_lettered(run: JobRun, dead_letter: DeadLetter) -> Event:
    body = _base(EventType.JOB_DEAD_LETTERED, run)
    body.update(
        dead_letter_id=dead_letter.dead_letter_id,
        reason=dead_letter.reason.value,
        last_error_code=dead_letter.last_error_code,
        attempts=dead_letter.attempts,
        requires_manual_review=dead_letter.requires_manual_review,
        created_at=isoformat_utc(dead_letter.created_at),
    )
    return EventType.JOB_DEAD_LETTERED, body


def job_held(run: RunRef, *, code: str, rule: str | None, message: str, now: datetime) -> Event:
    body = _base(EventType.JOB_HELD, run)
    body.update(hold_reason=code, rule=rule, message=message, held_at=isoformat_utc(now))
    return EventType.JOB_HELD, body


def job_released(run: RunRef, *, held_for: str | None, now: datetime) -> Event:
    body = _base(EventType.JOB_RELEASED, run)
    body.update(hold_reason=held_for, released_at=isoformat_utc(now))
    return EventType.JOB_RELEASED, body


def job_cancelled(run: JobRun | RunRef, *, actor: str, reason: str | None, now: datetime) -> Event:
    body = _base(EventType.JOB_CANCELLED, run)
    body.update(requested_by=actor, reason=reason, cancelled_at=isoformat_utc(now))
    return EventType.JOB_CANCELLED, body


def job_escalated(run: JobRun, *, error_code: str | None, now: datetime) -> Event:
    body = _base(EventType.JOB_ESCALATED, run)
    body.update(
        error_code=error_code, attempts=run.attempt, requires_manual_review=True, escalated_at=isoformat_utc(now)
    )
    return EventType.JOB_ESCALATED, body


def job_requeued(run: JobRun, *, actor: str, now: datetime) -> Event:
    body = _base(EventType.JOB_REQUEUED, run)
    body.update(requested_by=actor, attempt=run.attempt, requeued_at=isoformat_utc(now))
    return EventType.JOB_REQUEUED, body


def job_stop_requested(run: JobRun, *, actor: str, reason: str | None, now: datetime) -> Event:
    body = _base(EventType.JOB_STOP_REQUESTED, run)
    body.update(requested_by=actor, reason=reason, attempt=run.attempt, requested_at=isoformat_utc(now))
    return EventType.JOB_STOP_REQUESTED, body


def safe_mode_changed(
    *, tenant_id: str, activation: int, active: bool, actor: str, reason: str, now: datetime
) -> Event:
    kind = EventType.SAFE_MODE_ACTIVATION if active else EventType.SAFE_MODE_DEACTIVATION
    body = {
        "event_type": kind.qualified,
        "engine_cmi": ENGINE_CMI,
        "tenant_id": tenant_id,
        "activation": activation,
        "active": active,
        "requested_by": actor,
        "reason": reason,
        "created_at": isoformat_utc(now),
    }
    return kind, body


def replay_mismatch(
    *,
    tenant_id: str,
    difference: str,
    replay_run_id: str,
    now: datetime,
    job_run_id: str | None = None,
    workflow_run_id: str | None = None,
) -> Event:
    """A run (``job_run_id``) or a workflow run's state sequence (``workflow_run_id``) that no
    longer replays to its recorded hash."""
    if (job_run_id is None) == (workflow_run_id is None):
        raise ValueError("name exactly one of job_run_id and workflow_run_id")
    subject = {"job_run_id": job_run_id} if job_run_id is not None else {"workflow_run_id": workflow_run_id}
    body = {
        "event_type": EventType.REPLAY_MISMATCH.qualified,
        "engine_cmi": ENGINE_CMI,
        "severity": "critical",
        "tenant_id": tenant_id,
        **subject,
        "first_difference": difference,
        "detected_by": replay_run_id,
        "created_at": isoformat_utc(now),
    }
    return EventType.REPLAY_MISMATCH, body


def workflow_changed(
    kind: EventType,
    *,
    workflow_run_id: str,
    tenant_id: str,
    job_definition_id: str,
    job_class: str,
    status: str,
    error_code: str | None,
    now: datetime,
) -> Event:
    """A workflow run started or ended (seed 000 §14: transitions observable)."""
    body = {
        "event_type": kind.qualified,
        "engine_cmi": ENGINE_CMI,
        "workflow_run_id": workflow_run_id,
        "tenant_id": tenant_id,
        "job_definition_id": job_definition_id,
        "job_class": job_class,
        "status": status,
        "error_code": error_code,
        "created_at": isoformat_utc(now),
    }
    return kind, body


def dependency_changed(
    *,
    tenant_id: str,
    dependency: str,
    available: bool,
    problem: str | None,
    down_since: datetime,
    observed_by: str,
    now: datetime,
) -> Event:
    """A dependency that definitions of ``tenant_id`` declare went down or came back (seed 000
    §58): its runs wait in the queue meanwhile. Written once per outage for the cluster."""
    kind = EventType.DEPENDENCY_RECOVERED if available else EventType.DEPENDENCY_UNAVAILABLE
    body: dict[str, Any] = {
        "event_type": kind.qualified,
        "engine_cmi": ENGINE_CMI,
        "severity": "info" if available else "warning",
        "tenant_id": tenant_id,
        "dependency": dependency,
        "problem": problem,
        "down_since": isoformat_utc(down_since),
        "observed_by": observed_by,
        "created_at": isoformat_utc(now),
    }
    if available:
        body["downtime_ms"] = int((now - down_since).total_seconds() * 1000)
    return kind, body


def sla_breach(
    *,
    sla_breach_id: str,
    tenant_id: str,
    subject_kind: str,
    subject_id: str,
    job_class: str,
    job_definition_id: str,
    eco_number: str | None,
    sla_policy: str,
    kind: str,
    deadline: datetime,
    breached_at: datetime,
    severity: str,
    requires_escalation: bool,
) -> Event:
    """Seed 000 §23, field for field, naming the subject as ``job_run_id`` or (a workflow run)
    ``workflow_run_id``; ``kind`` says which seed §22 deadline passed."""
    body: dict[str, Any] = {
        "event_type": EventType.SLA_BREACH.qualified,
        "sla_breach_id": sla_breach_id,
        _subject_field(subject_kind): subject_id,
        "job_class": job_class,
        "job_definition_id": job_definition_id,
        "tenant_id": tenant_id,
        "eco_number": eco_number,
        "sla_policy": sla_policy,
        "kind": kind,
        "deadline": isoformat_utc(deadline),
        "breached_at": isoformat_utc(breached_at),
        "severity": severity,
        "requires_escalation": requires_escalation,
    }
    return EventType.SLA_BREACH, body


def sla_reminder(
    *,
    sla_reminder_id: str,
    tenant_id: str,
    subject_kind: str,
    subject_id: str,
    job_class: str,
    job_definition_id: str,
    eco_number: str | None,
    sla_policy: str,
    kind: str,
    deadline: datetime,
    reminded_at: datetime,
) -> Event:
    """A deadline of ``kind`` is near and the subject is still open (seed 000 §34 reminders)."""
    body: dict[str, Any] = {
        "event_type": EventType.SLA_REMINDER.qualified,
        "sla_reminder_id": sla_reminder_id,
        _subject_field(subject_kind): subject_id,
        "job_class": job_class,
        "job_definition_id": job_definition_id,
        "tenant_id": tenant_id,
        "eco_number": eco_number,
        "sla_policy": sla_policy,
        "kind": kind,
        "deadline": isoformat_utc(deadline),
        "reminded_at": isoformat_utc(reminded_at),
        "severity": "info",
    }
    return EventType.SLA_REMINDER, body


def _subject_field(subject_kind: str) -> str:
    return "workflow_run_id" if subject_kind == "workflow" else "job_run_id"
