"""Event builders: names, the shared base, each payload, and UTC spelling of instants."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta, timezone
from typing import Any

import pytest

from jobgate.core import events
from jobgate.core.canonical import canonical_json
from jobgate.core.events import ENGINE_CMI, EVENT_PREFIX, Event, EventType
from jobgate.core.models import DeadLetter, DeadLetterReason, JobClass

from .support import KEY, NOW, RUN_ID, STARTED, make_run

Z_NOW = "2026-03-01T12:00:00Z"
RUN = make_run()
# The same run as a claim's rows name it (no JobRun decoded): events written from them read alike.
REF = events.RunRef(RUN.job_run_id, RUN.job_class.value, RUN.job_definition_id, RUN.tenant_id, RUN.idempotency_key)
BASE = {
    "job_run_id": RUN_ID,
    "job_class": "MAINTENANCE_JOB",
    "job_definition_id": "payroll.close",
    "tenant_id": "acme",
    "idempotency_key": KEY,
}
LETTER = DeadLetter(
    "TGDLQ-x-3",
    RUN_ID,
    "acme",
    JobClass.MAINTENANCE_JOB,
    DeadLetterReason.AUDIT_WRITE_FAILURE,
    "E1",
    3,
    True,
    NOW,
)


@pytest.mark.parametrize("kind", list(EventType))
def test_qualified_names(kind: EventType) -> None:
    expected = "dead_lettered" if kind is EventType.JOB_DEAD_LETTERED else kind.value
    assert kind.qualified == EVENT_PREFIX + expected
    assert kind.qualified.startswith("trustgate.scheduler.")


BUILDERS: list[tuple[Callable[[], Event], EventType, dict[str, Any]]] = [
    (
        lambda: events.started_event(events.StartedRun.of(RUN, 4), NOW),
        EventType.JOB_STARTED,
        {"engine_cmi": ENGINE_CMI, "config_snapshot_id": "snap-1", "attempt": 4, "started_at": Z_NOW},
    ),
    (
        lambda: events.job_completed(RUN, {"n": 1}, STARTED, NOW),
        EventType.JOB_COMPLETED,
        {"result": {"n": 1}, "attempt": 3, "duration_ms": 42_500, "completed_at": Z_NOW},
    ),
    (
        lambda: events.job_completed(RUN, None, NOW, NOW),
        EventType.JOB_COMPLETED,
        {"result": {}, "attempt": 3, "duration_ms": 0, "completed_at": Z_NOW},
    ),
    (
        lambda: events.job_failed(
            RUN, error_code="E1", retryable=True, next_retry_at=NOW + timedelta(seconds=90), now=NOW
        ),
        EventType.JOB_FAILED,
        {
            "error_code": "E1",
            "retryable": True,
            "attempt": 3,
            "next_retry_at": "2026-03-01T12:01:30Z",
            "failed_at": Z_NOW,
        },
    ),
    (
        lambda: events.job_failed(RUN, error_code=None, retryable=False, next_retry_at=None, now=NOW),
        EventType.JOB_FAILED,
        {"error_code": None, "retryable": False, "attempt": 3, "next_retry_at": None, "failed_at": Z_NOW},
    ),
    (
        lambda: events.job_retried(RUN, next_retry_at=NOW + timedelta(seconds=90), reason="lease_expired", now=NOW),
        EventType.JOB_RETRIED,
        {
            "attempt": 3,
            "next_attempt": 4,
            "reason": "lease_expired",
            "next_retry_at": "2026-03-01T12:01:30Z",
            "retried_at": Z_NOW,
        },
    ),
    (
        lambda: events.job_dead_lettered(RUN, LETTER),
        EventType.JOB_DEAD_LETTERED,
        {
            "dead_letter_id": "TGDLQ-x-3",
            "reason": "audit_write_failure",
            "last_error_code": "E1",
            "attempts": 3,
            "requires_manual_review": True,
            "created_at": Z_NOW,
        },
    ),
    (
        lambda: events.job_cancelled(RUN, actor="alice", reason=None, now=NOW),
        EventType.JOB_CANCELLED,
        {"requested_by": "alice", "reason": None, "cancelled_at": Z_NOW},
    ),
    (
        lambda: events.job_escalated(RUN, error_code="E2", now=NOW),
        EventType.JOB_ESCALATED,
        {"error_code": "E2", "attempts": 3, "requires_manual_review": True, "escalated_at": Z_NOW},
    ),
    (
        lambda: events.job_requeued(RUN, actor="bob", now=NOW),
        EventType.JOB_REQUEUED,
        {"requested_by": "bob", "attempt": 3, "requeued_at": Z_NOW},
    ),
    (
        lambda: events.job_stop_requested(RUN, actor="carol", reason="wrong period", now=NOW),
        EventType.JOB_STOP_REQUESTED,
        {"requested_by": "carol", "reason": "wrong period", "attempt": 3, "requested_at": Z_NOW},
    ),
    (
        lambda: events.job_held(REF, code="safe_mode_active", rule="suspended_class:X", message="why", now=NOW),
        EventType.JOB_HELD,
        {"hold_reason": "safe_mode_active", "rule": "suspended_class:X", "message": "why", "held_at": Z_NOW},
    ),
    (
        lambda: events.job_released(REF, held_for="safe_mode_active", now=NOW),
        EventType.JOB_RELEASED,
        {"hold_reason": "safe_mode_active", "released_at": Z_NOW},
    ),
    (
        lambda: events.job_cancelled(REF, actor="worker-1", reason="approval_revoked", now=NOW),
        EventType.JOB_CANCELLED,
        {"requested_by": "worker-1", "reason": "approval_revoked", "cancelled_at": Z_NOW},
    ),
]


@pytest.mark.parametrize(
    ("build", "kind", "fields"), BUILDERS, ids=[f"{k.value}-{i}" for i, (_, k, _) in enumerate(BUILDERS)]
)
def test_builder_payload(build: Callable[[], Event], kind: EventType, fields: dict[str, Any]) -> None:
    built_kind, body = build()
    assert built_kind is kind
    assert body == {"event_type": kind.qualified, **BASE, **fields}
    canonical_json(body)  # goes into the outbox as canonical JSON


@pytest.mark.parametrize("active", [True, False])
def test_safe_mode_events_name_the_tenant_activation_and_who(active: bool) -> None:
    kind, body = events.safe_mode_changed(
        tenant_id="acme", activation=2, active=active, actor="ada", reason="replay_drift_spike", now=NOW
    )
    assert kind is (EventType.SAFE_MODE_ACTIVATION if active else EventType.SAFE_MODE_DEACTIVATION)
    assert body == {
        "event_type": kind.qualified,
        "engine_cmi": ENGINE_CMI,
        "tenant_id": "acme",
        "activation": 2,
        "active": active,
        "requested_by": "ada",
        "reason": "replay_drift_spike",
        "created_at": Z_NOW,
    }


def test_a_replay_mismatch_is_critical_and_names_the_difference() -> None:
    kind, body = events.replay_mismatch(
        tenant_id="acme",
        job_run_id="TGJOBRUN-1",
        difference="transitions[4].reason",
        replay_run_id="TGJOBRUN-2",
        now=NOW,
    )
    assert kind is EventType.REPLAY_MISMATCH
    assert body == {
        "event_type": "trustgate.scheduler.replay_mismatch",
        "engine_cmi": events.ENGINE_CMI,
        "severity": "critical",
        "tenant_id": "acme",
        "job_run_id": "TGJOBRUN-1",
        "first_difference": "transitions[4].reason",
        "detected_by": "TGJOBRUN-2",
        "created_at": Z_NOW,
    }


def test_a_workflow_replay_mismatch_names_the_workflow_run_and_a_subject_is_required() -> None:
    from jobgate.contracts import validate

    _, body = events.replay_mismatch(
        tenant_id="acme",
        workflow_run_id="TGWF-2026-0123456789abcdef0123",
        difference="seq 4",
        replay_run_id="TGJOBRUN-01a22d55b92d50cff444ee84095f9c52",
        now=NOW,
    )
    assert body["workflow_run_id"] == "TGWF-2026-0123456789abcdef0123" and "job_run_id" not in body
    validate("comp.TG.EVENT.REPLAY-MISMATCH.v1_0", {**body, "event_id": 7, "recorded_at": Z_NOW})
    with pytest.raises(ValueError, match="exactly one"):
        events.replay_mismatch(tenant_id="a", difference="d", replay_run_id="r", now=NOW)


@pytest.mark.parametrize("available", [False, True])
def test_a_dependency_outage_is_reported_with_its_start(available: bool) -> None:
    kind, body = events.dependency_changed(
        tenant_id="acme",
        dependency="anchor_sink",
        available=available,
        problem=None if available else "answered HTTP 503",
        down_since=NOW - timedelta(seconds=90),
        observed_by="w1",
        now=NOW,
    )
    assert kind is (EventType.DEPENDENCY_RECOVERED if available else EventType.DEPENDENCY_UNAVAILABLE)
    assert body == {
        "event_type": kind.qualified,
        "engine_cmi": ENGINE_CMI,
        "severity": "info" if available else "warning",
        "tenant_id": "acme",
        "dependency": "anchor_sink",
        "problem": None if available else "answered HTTP 503",
        "down_since": "2026-03-01T11:58:30Z",
        "observed_by": "w1",
        "created_at": Z_NOW,
        **({"downtime_ms": 90_000} if available else {}),
    }


@pytest.mark.parametrize("subject_kind", ["run", "workflow"])
def test_an_sla_breach_has_the_seed_23_shape_and_a_reminder_its_own(subject_kind: str) -> None:
    policy = "quarantine_review_48h_v1"
    subject = {
        "tenant_id": "acme", "subject_kind": subject_kind, "subject_id": "S-1", "job_class": "QUARANTINE_SLA_JOB",
        "job_definition_id": "q", "eco_number": "ECO-A123", "sla_policy": policy, "kind": "sla_deadline",
        "deadline": NOW - timedelta(minutes=5),
    }  # fmt: skip
    named = {"job_run_id" if subject_kind == "run" else "workflow_run_id": "S-1"}
    common = {
        "job_class": "QUARANTINE_SLA_JOB", "job_definition_id": "q", "tenant_id": "acme", "eco_number": "ECO-A123",
        "sla_policy": policy, "kind": "sla_deadline", "deadline": "2026-03-01T11:55:00Z",
    }  # fmt: skip
    kind, body = events.sla_breach(
        sla_breach_id="TGSLA-1", breached_at=NOW, severity="warning", requires_escalation=True, **subject
    )
    assert kind is EventType.SLA_BREACH
    assert body == {"event_type": "trustgate.scheduler.sla_breach", "sla_breach_id": "TGSLA-1", **named, **common,
                    "breached_at": Z_NOW, "severity": "warning", "requires_escalation": True}  # fmt: skip
    kind, body = events.sla_reminder(sla_reminder_id="TGSLA-2", reminded_at=NOW, **subject)
    assert kind is EventType.SLA_REMINDER
    assert body == {"event_type": "trustgate.scheduler.sla_reminder", "sla_reminder_id": "TGSLA-2", **named, **common,
                    "reminded_at": Z_NOW, "severity": "info"}  # fmt: skip


WORKFLOW_EVENTS = [
    events.EventType.WORKFLOW_STARTED,
    events.EventType.WORKFLOW_COMPLETED,
    events.EventType.WORKFLOW_FAILED,
    events.EventType.WORKFLOW_CANCELLED,
    events.EventType.WORKFLOW_ESCALATED,
]


@pytest.mark.parametrize("kind", WORKFLOW_EVENTS)
def test_workflow_events_name_the_workflow_run_its_definition_and_status(kind: EventType) -> None:
    built, body = events.workflow_changed(
        kind,
        workflow_run_id="TGWF-2026-abc",
        tenant_id="acme",
        job_definition_id="close",
        job_class="AUDIT_INTEGRITY_JOB",
        status="FAILED",
        error_code="E1",
        now=NOW,
    )
    assert built is kind
    assert body == {
        "event_type": kind.qualified,
        "engine_cmi": events.ENGINE_CMI,
        "workflow_run_id": "TGWF-2026-abc",
        "tenant_id": "acme",
        "job_definition_id": "close",
        "job_class": "AUDIT_INTEGRITY_JOB",
        "status": "FAILED",
        "error_code": "E1",
        "created_at": Z_NOW,
    }
    canonical_json(body)


NOT_RUN_EVENTS = {  # tested just above
    *WORKFLOW_EVENTS,
    EventType.SAFE_MODE_ACTIVATION,
    EventType.SAFE_MODE_DEACTIVATION,
    EventType.REPLAY_MISMATCH,
    EventType.DEPENDENCY_UNAVAILABLE,
    EventType.DEPENDENCY_RECOVERED,
    EventType.SLA_BREACH,
    EventType.SLA_REMINDER,
}


def test_every_event_type_has_a_builder_under_test() -> None:
    assert {kind for _, kind, _ in BUILDERS} | NOT_RUN_EVENTS == set(EventType)


def test_non_utc_instants_are_written_in_utc() -> None:
    tokyo = NOW.astimezone(timezone(timedelta(hours=9)))
    _, body = events.job_cancelled(RUN, actor="a", reason=None, now=tokyo)
    assert body["cancelled_at"] == Z_NOW


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        events.job_requeued(RUN, actor="a", now=NOW.replace(tzinfo=None))


def test_completed_result_is_not_aliased_when_empty() -> None:
    _, first = events.job_completed(RUN, None, NOW, NOW)
    _, second = events.job_completed(RUN, None, NOW, NOW)
    first["result"]["x"] = 1
    assert second["result"] == {}
