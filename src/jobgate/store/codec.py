"""Conversions between core values and column values (instants, JSON, rows -> models)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from jobgate.core.encoding import _EPOCH, _MICROSECOND, dumps, from_us, loads, opt_dt, opt_us, to_us
from jobgate.core.errors import MalformedRecordError
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
from jobgate.core.trace import traceparent_of_trigger

__all__ = ["dumps", "from_us", "loads", "opt_dt", "opt_us", "to_us"]


@lru_cache(maxsize=256)
def _shared_document(value: str) -> Any:
    return loads(value)


def shared_loads(value: str | None) -> Any:
    """Decode a document that many rows repeat (a bound retry policy) once, and share the result.

    Callers must treat the returned value as read-only; sharing also lets the engine cache what
    it derives from the document by identity.
    """
    return None if value is None else _shared_document(value)


_RUN_STATUS = RunStatus._value2member_map_
# A built-in class reads back as its JobClass member; a declared one (core.classes) as its name,
# whether or not jobgate.yaml still declares it: a record never depends on today's configuration.
_JOB_CLASS: dict[str, str] = {c.value: c for c in JobClass}
_TRIGGER_TYPE = TriggerType._value2member_map_
_PRIORITY = Priority._value2member_map_


def column(value: Any) -> Any:
    """Encode a core value for a column: instants and durations as microseconds, documents as JSON."""
    if isinstance(value, datetime):
        return to_us(value)
    if isinstance(value, timedelta):
        return value // _MICROSECOND
    if isinstance(value, dict | list):
        return dumps(value)
    return value


def _trusted_run(fields: dict[str, Any]) -> JobRun:
    """Build a run from a stored row without ``__init__`` (every field is given; the row was
    checked when it was written): a quarter of the cost, for every row a worker claims."""
    run = object.__new__(JobRun)
    run.__dict__.update(fields)
    return run


def run_from_values(columns: Sequence[str], values: Sequence[Any]) -> JobRun:
    """A run from its column values in ``columns`` order (rows read back as JSON arrays)."""
    return run_from_row(dict(zip(columns, values, strict=True)))


_UNREADABLE = (KeyError, ValueError, TypeError, OverflowError)


def _unreadable(exc: Exception) -> str:
    """What a row that cannot be decoded holds, shortly (the value jobgate does not know)."""
    said = str(exc)
    return f"holds a value jobgate does not write ({type(exc).__name__}: {said[:80]})"


def _object(text: Any, column: str) -> dict[str, Any]:
    """A JSON object column (params, scope, a transition's detail): empty when absent; anything
    else is a value no jobgate write makes, named by its column."""
    value = loads(text)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{column} is not a JSON object")
    return value


def run_from_row(r: Mapping[Any, Any]) -> JobRun:
    """A run from its row; a row no jobgate write could have made (a time that is not a number,
    a status it does not know) is named (``MalformedRecordError``), not a crash."""
    try:
        return _run_from_row(r)
    except _UNREADABLE as exc:
        raise MalformedRecordError(_unreadable(exc), source=f"run {r.get('job_run_id')}") from None


def _run_from_row(r: Mapping[Any, Any]) -> JobRun:
    # Enum members by value through the value maps: calling the enum class costs several
    # times more, and a worker decodes every row it claims.
    timeout = r["execution_timeout_us"]
    return _trusted_run(
        dict(
            job_run_id=r["job_run_id"],
            tenant_id=r["tenant_id"],
            job_definition_id=r["job_definition_id"],
            definition_version=r["definition_version"],
            definition_digest=r["definition_digest"],
            job_class=_JOB_CLASS.get(r["job_class"], r["job_class"]),
            trigger_id=r["trigger_id"],
            trigger_type=_TRIGGER_TYPE[r["trigger_type"]],
            idempotency_key=r["idempotency_key"],
            config_snapshot_id=r["config_snapshot_id"],
            config_digest=r["config_digest"],
            status=_RUN_STATUS[r["status"]],
            attempt=r["attempt"],
            max_attempts=r["max_attempts"],
            priority=_PRIORITY[r["priority"]],
            queue=r["queue"],
            retry_policy=r["retry_policy"],
            params=_object(r["params"], "params"),
            scope=_object(r["scope"], "scope"),
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
            bound_retry_policy=shared_loads(r["retry_policy_doc"]),
            traceparent=traceparent_of_trigger(r.get("trigger"), loads),
            hold_reason=r["hold_reason"],
            held_at=opt_dt(r["held_at"]),
            reviewed_by=r["reviewed_by"],
            slot=r["slot"],
            retry_of=r.get("retry_of"),
        )
    )


def transition_from_row(r: Mapping[Any, Any]) -> Transition:
    """A transition from its row; one no jobgate write could have made is named, not a crash."""
    try:
        return _transition_from_row(r)
    except _UNREADABLE as exc:
        raise MalformedRecordError(_unreadable(exc), source=f"a transition of run {r.get('job_run_id')}") from None


def _transition_from_row(r: Mapping[Any, Any]) -> Transition:
    return Transition(
        job_run_id=r["job_run_id"],
        from_status=None if r["from_status"] is None else RunStatus(r["from_status"]),
        to_status=RunStatus(r["to_status"]),
        attempt=r["attempt"],
        reason=r["reason"],
        actor=r["actor"],
        at=from_us(r["at"]),
        detail=_object(r["detail"], "detail"),
    )


TRANSITION_COLUMNS = (
    "job_run_id",
    "tenant_id",
    "from_status",
    "to_status",
    "attempt",
    "reason",
    "actor",
    "at",
    "detail",
)


def transition_values(t: Transition, tenant_id: str) -> tuple[Any, ...]:
    """A transition as column values in ``TRANSITION_COLUMNS`` order."""
    return (
        t.job_run_id,
        tenant_id,
        None if t.from_status is None else t.from_status.value,
        t.to_status.value,
        t.attempt,
        t.reason,
        t.actor,
        to_us(t.at),
        dumps(t.detail) if t.detail else None,
    )


def dead_letter_from_row(r: Mapping[Any, Any]) -> DeadLetter:
    return DeadLetter(
        dead_letter_id=r["dead_letter_id"],
        job_run_id=r["job_run_id"],
        tenant_id=r["tenant_id"],
        job_class=_JOB_CLASS.get(r["job_class"], r["job_class"]),
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
        "job_class": str(d.job_class),
        "reason": d.reason.value,
        "last_error_code": d.last_error_code,
        "attempts": d.attempts,
        "requires_manual_review": d.requires_manual_review,
        "created_at": to_us(d.created_at),
        "resolved_at": opt_us(d.resolved_at),
        "resolution": d.resolution,
    }


def outbox_from_tuple(r: tuple[Any, ...]) -> OutboxEvent:
    """From ``(id, job_run_id, tenant_id, event_type, payload, created_at)``, the publisher's read."""
    return OutboxEvent(
        event_id=r[0],
        job_run_id=r[1],
        tenant_id=r[2],
        event_type=r[3],
        payload_json=r[4],
        created_at=_EPOCH + timedelta(microseconds=r[5]),
    )
