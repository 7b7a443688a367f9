"""Conversions between core values and column values (instants, JSON, rows -> models)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from jobgate.core.models import (
    DeadLetter,
    DeadLetterReason,
    JobClass,
    JobRun,
    OutboxEvent,
    Priority,
    Transition,
    TriggerType,
)
from jobgate.core.states import RunStatus

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(instant: datetime) -> int:
    if instant.tzinfo is None:
        raise ValueError("naive datetime reached the store")
    return (instant - _EPOCH) // timedelta(microseconds=1)


def opt_us(instant: datetime | None) -> int | None:
    return None if instant is None else to_us(instant)


def from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def opt_dt(value: int | None) -> datetime | None:
    return None if value is None else _EPOCH + timedelta(microseconds=value)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def column(value: Any) -> Any:
    """Encode a core value for a column: instants and durations as microseconds, documents as JSON."""
    if isinstance(value, datetime):
        return to_us(value)
    if isinstance(value, timedelta):
        return value // timedelta(microseconds=1)
    if isinstance(value, dict | list):
        return dumps(value)
    return value


def run_from_row(r: Mapping[Any, Any]) -> JobRun:
    timeout = r["execution_timeout_us"]
    return JobRun(
        job_run_id=r["job_run_id"],
        tenant_id=r["tenant_id"],
        job_definition_id=r["job_definition_id"],
        definition_version=r["definition_version"],
        definition_digest=r["definition_digest"],
        job_class=JobClass(r["job_class"]),
        trigger_id=r["trigger_id"],
        trigger_type=TriggerType(r["trigger_type"]),
        idempotency_key=r["idempotency_key"],
        config_snapshot_id=r["config_snapshot_id"],
        config_digest=r["config_digest"],
        status=RunStatus(r["status"]),
        attempt=r["attempt"],
        max_attempts=r["max_attempts"],
        priority=Priority(r["priority"]),
        queue=r["queue"],
        retry_policy=r["retry_policy"],
        params=json.loads(r["params"]),
        scope=json.loads(r["scope"]),
        created_at=from_us(r["created_at"]),
        due_at=from_us(r["due_at"]),
        workflow_run_id=r["workflow_run_id"],
        requested_by=r["requested_by"],
        started_at=opt_dt(r["started_at"]),
        ended_at=opt_dt(r["ended_at"]),
        next_retry_at=opt_dt(r["next_retry_at"]),
        queue_deadline_at=opt_dt(r["queue_deadline_at"]),
        execution_timeout=None if timeout is None else timedelta(microseconds=timeout),
        error_code=r["error_code"],
        error_message=r["error_message"],
        result=loads(r["result"]),
        result_ref=r["result_ref"],
        lease_owner=r["lease_owner"],
        lease_token=r["lease_token"],
        lease_expires_at=opt_dt(r["lease_expires_at"]),
        stop_requested=bool(r["stop_requested"]),
        artifact_path=r["artifact_path"],
        artifact_sha256=r["artifact_sha256"],
        artifact_size=r["artifact_size"],
        bound_retry_policy=loads(r["retry_policy_doc"]),
    )


def transition_from_row(r: Mapping[Any, Any]) -> Transition:
    return Transition(
        job_run_id=r["job_run_id"],
        from_status=None if r["from_status"] is None else RunStatus(r["from_status"]),
        to_status=RunStatus(r["to_status"]),
        attempt=r["attempt"],
        reason=r["reason"],
        actor=r["actor"],
        at=from_us(r["at"]),
        detail=loads(r["detail"]) or {},
    )


def transition_row(t: Transition, tenant_id: str) -> dict[str, Any]:
    return {
        "job_run_id": t.job_run_id,
        "tenant_id": tenant_id,
        "from_status": None if t.from_status is None else t.from_status.value,
        "to_status": t.to_status.value,
        "attempt": t.attempt,
        "reason": t.reason,
        "actor": t.actor,
        "at": to_us(t.at),
        "detail": dumps(t.detail) if t.detail else None,
    }


def dead_letter_from_row(r: Mapping[Any, Any]) -> DeadLetter:
    return DeadLetter(
        dead_letter_id=r["dead_letter_id"],
        job_run_id=r["job_run_id"],
        tenant_id=r["tenant_id"],
        job_class=JobClass(r["job_class"]),
        reason=DeadLetterReason(r["reason"]),
        last_error_code=r["last_error_code"],
        attempts=r["attempts"],
        requires_manual_review=bool(r["requires_manual_review"]),
        created_at=from_us(r["created_at"]),
        resolved_at=opt_dt(r["resolved_at"]),
        resolution=r["resolution"],
    )


def dead_letter_row(d: DeadLetter) -> dict[str, Any]:
    return {
        "dead_letter_id": d.dead_letter_id,
        "job_run_id": d.job_run_id,
        "tenant_id": d.tenant_id,
        "job_class": d.job_class.value,
        "reason": d.reason.value,
        "last_error_code": d.last_error_code,
        "attempts": d.attempts,
        "requires_manual_review": d.requires_manual_review,
        "created_at": to_us(d.created_at),
        "resolved_at": opt_us(d.resolved_at),
        "resolution": d.resolution,
    }


def outbox_from_row(r: Mapping[Any, Any]) -> OutboxEvent:
    return OutboxEvent(
        event_id=r["id"],
        job_run_id=r["job_run_id"],
        tenant_id=r["tenant_id"],
        event_type=r["event_type"],
        payload=json.loads(r["payload"]),
        created_at=from_us(r["created_at"]),
    )
