"""settle_attempt / settle_without_attempt: transitions, events and dead letters, exactly."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.canonical import canonical_json
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.errors import IllegalTransitionError
from jobgate.core.events import EventType
from jobgate.core.models import DeadLetter, DeadLetterReason, JobClass, JobRun
from jobgate.core.policies import BUILTIN_RETRY_POLICIES, RetryPolicy, RetryStrategy
from jobgate.core.settle import (
    DEAD_LETTER_PREFIX,
    Settlement,
    cancel_decision,
    dead_letter_for,
    queue_timeout_decision,
    repeat_dead_letter_id,
    settle_attempt,
    settle_without_attempt,
)
from jobgate.core.states import TERMINAL, RunStatus, TransitionReason, is_allowed

from .support import NOW, RUN_HEX, RUN_ID, STARTED, make_run, policy, replace, seconds

K = OutcomeKind
ACTOR = "worker-1"
Z_NOW = "2026-03-01T12:00:00Z"


def settle(
    kind: OutcomeKind,
    p: RetryPolicy | None = None,
    *,
    run: JobRun | None = None,
    code: str | None = "TARGET_BUSY",
    **extra: Any,
) -> Settlement:
    return settle_attempt(
        run or make_run(),
        Outcome(kind, code, "it broke" if code else None),
        p or policy(),
        now=NOW,
        actor=ACTOR,
        started_at=STARTED,
        **extra,
    )


def types(s: Settlement) -> list[EventType]:
    return [kind for kind, _ in s.events]


def payload(s: Settlement, kind: EventType) -> dict[str, Any]:
    (body,) = [body for k, body in s.events if k is kind]
    return body


def test_success_completes_with_job_completed() -> None:
    s = settle(K.SUCCEEDED, result={"rows": 12}, artifact=("out/report.csv", "ab" * 32, 1024))
    assert s.to_status is RunStatus.COMPLETED
    assert (s.job_run_id, s.from_status, s.expected_token) == (RUN_ID, RunStatus.RUNNING, 7)
    t = s.transition
    assert (t.job_run_id, t.from_status, t.to_status, t.attempt) == (
        RUN_ID,
        RunStatus.RUNNING,
        RunStatus.COMPLETED,
        3,
    )
    assert (t.reason, t.actor, t.at, t.detail) == ("succeeded", ACTOR, NOW, {"outcome": "succeeded"})
    # An outcome's error code never leaks into a completed run.
    assert (s.error_code, s.error_message) == (None, None)
    assert s.result == {"rows": 12}
    assert s.artifact == ("out/report.csv", "ab" * 32, 1024)
    assert s.dead_letter is None
    assert s.attempt_outcome == "succeeded"
    assert types(s) == [EventType.JOB_COMPLETED]
    assert payload(s, EventType.JOB_COMPLETED) == {
        "event_type": "trustgate.scheduler.job_completed",
        "job_run_id": RUN_ID,
        "job_class": "MAINTENANCE_JOB",
        "job_definition_id": "payroll.close",
        "tenant_id": "acme",
        "idempotency_key": make_run().idempotency_key,
        "result": {"rows": 12},
        "attempt": 3,
        "duration_ms": 42_500,
        "completed_at": Z_NOW,
    }


def test_success_without_result_reports_an_empty_result() -> None:
    s = settle(K.SUCCEEDED)
    assert s.result is None
    assert payload(s, EventType.JOB_COMPLETED)["result"] == {}


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (K.RETRYABLE_FAILURE, "retry_scheduled"),
        (K.EXECUTION_TIMEOUT, "execution_timeout"),
        (K.LEASE_EXPIRED, "lease_expired"),
    ],
)
def test_retryable_below_max_waits_with_failed_and_retried_events(kind: OutcomeKind, reason: str) -> None:
    s = settle(kind)  # attempt 3 of 5, 30 s doubling: wait 120 s
    retry_at = NOW + seconds(120)
    assert s.to_status is RunStatus.RETRY_WAIT
    assert s.decision.next_retry_at == retry_at
    assert s.transition.reason == reason
    assert set(s.transition.detail) == {"outcome", "error_code", "error_message", "next_retry_at"}
    assert s.transition.detail["outcome"] == kind.value
    assert s.transition.detail["error_code"] == "TARGET_BUSY"
    assert datetime.fromisoformat(s.transition.detail["next_retry_at"]) == retry_at
    assert (s.error_code, s.error_message) == ("TARGET_BUSY", "it broke")
    assert s.dead_letter is None
    assert s.attempt_outcome == kind.value
    assert types(s) == [EventType.JOB_FAILED, EventType.JOB_RETRIED]
    failed = payload(s, EventType.JOB_FAILED)
    assert failed["event_type"] == "trustgate.scheduler.job_failed"
    assert (failed["error_code"], failed["retryable"], failed["attempt"]) == ("TARGET_BUSY", True, 3)
    assert (failed["next_retry_at"], failed["failed_at"]) == ("2026-03-01T12:02:00Z", Z_NOW)
    retried = payload(s, EventType.JOB_RETRIED)
    assert retried["event_type"] == "trustgate.scheduler.job_retried"
    assert (retried["attempt"], retried["next_attempt"], retried["reason"]) == (3, 4, reason)
    assert (retried["next_retry_at"], retried["retried_at"]) == ("2026-03-01T12:02:00Z", Z_NOW)


def test_retry_at_uses_the_jittered_delay_of_the_runs_key() -> None:
    std = BUILTIN_RETRY_POLICIES["standard_exponential_backoff_v1"]
    s = settle(K.RETRYABLE_FAILURE, std, run=make_run(attempt=1, idempotency_key="payroll-2026-01"))
    assert s.decision.next_retry_at == NOW + seconds(17.888339)
    assert payload(s, EventType.JOB_RETRIED)["next_retry_at"] == "2026-03-01T12:00:17.888339Z"


def test_transition_detail_spells_next_retry_at_like_the_events() -> None:
    s = settle(K.RETRYABLE_FAILURE)
    assert s.transition.detail["next_retry_at"] == payload(s, EventType.JOB_RETRIED)["next_retry_at"]


@pytest.mark.parametrize("kind", [K.RETRYABLE_FAILURE, K.EXECUTION_TIMEOUT, K.LEASE_EXPIRED])
@pytest.mark.parametrize("escalate", [False, True])
def test_at_max_dead_letters_with_maximum_retries_exceeded(kind: OutcomeKind, escalate: bool) -> None:
    p = policy(dead_letter_after_max_attempts=True, escalate_on_final_failure=escalate)
    s = settle(kind, p, run=make_run(attempt=5))
    assert s.to_status is RunStatus.DEAD_LETTERED
    assert s.transition.reason == "retries_exhausted"
    assert s.transition.detail == {"outcome": kind.value, "error_code": "TARGET_BUSY", "error_message": "it broke"}
    assert s.dead_letter == DeadLetter(
        dead_letter_id=f"TGDLQ-{RUN_HEX}-5",
        job_run_id=RUN_ID,
        tenant_id="acme",
        job_class=JobClass.MAINTENANCE_JOB,
        reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
        last_error_code="TARGET_BUSY",
        attempts=5,
        requires_manual_review=escalate,
        created_at=NOW,
    )
    assert types(s) == [EventType.JOB_FAILED, EventType.JOB_DEAD_LETTERED]
    failed = payload(s, EventType.JOB_FAILED)
    assert (failed["retryable"], failed["next_retry_at"], failed["attempt"]) == (False, None, 5)
    dead = payload(s, EventType.JOB_DEAD_LETTERED)
    assert dead["event_type"] == "trustgate.scheduler.dead_lettered"
    assert dead == {
        **{
            k: dead[k]
            for k in (
                "event_type",
                "job_run_id",
                "job_class",
                "job_definition_id",
                "tenant_id",
                "idempotency_key",
            )
        },
        "dead_letter_id": f"TGDLQ-{RUN_HEX}-5",
        "reason": "maximum_retries_exceeded",
        "last_error_code": "TARGET_BUSY",
        "attempts": 5,
        "requires_manual_review": escalate,
        "created_at": Z_NOW,
    }


def test_at_max_fails_when_not_dead_lettering() -> None:
    s = settle(K.RETRYABLE_FAILURE, policy(dead_letter_after_max_attempts=False), run=make_run(attempt=5))
    assert s.to_status is RunStatus.FAILED
    assert s.transition.reason == "retries_exhausted"
    assert s.dead_letter is None
    assert types(s) == [EventType.JOB_FAILED]
    assert payload(s, EventType.JOB_FAILED)["retryable"] is False


def test_manual_review_after_n_escalates_without_a_dead_letter() -> None:
    s = settle(
        K.RETRYABLE_FAILURE,
        BUILTIN_RETRY_POLICIES["manual_review_v1"],
        run=make_run(attempt=3, max_attempts=3),
    )
    assert s.to_status is RunStatus.ESCALATED
    assert s.decision.requires_manual_review is True
    assert s.transition.reason == "escalated_for_review"
    assert s.dead_letter is None
    assert types(s) == [EventType.JOB_FAILED, EventType.JOB_ESCALATED]
    escalated = payload(s, EventType.JOB_ESCALATED)
    assert escalated["event_type"] == "trustgate.scheduler.job_escalated"
    assert (escalated["error_code"], escalated["attempts"], escalated["requires_manual_review"]) == (
        "TARGET_BUSY",
        3,
        True,
    )
    assert escalated["escalated_at"] == Z_NOW


@pytest.mark.parametrize("escalate", [False, True])
def test_non_retryable_dead_letters_as_validation_failure(escalate: bool) -> None:
    s = settle(
        K.NON_RETRYABLE_FAILURE,
        policy(escalate_on_final_failure=escalate),
        run=make_run(attempt=1),
        code="BAD_PERIOD",
    )
    assert s.to_status is RunStatus.DEAD_LETTERED
    assert s.transition.reason == "failed_non_retryable"
    assert s.dead_letter is not None
    assert s.dead_letter.reason is DeadLetterReason.NON_RETRYABLE_VALIDATION_FAILURE
    assert s.dead_letter.dead_letter_id == f"TGDLQ-{RUN_HEX}-1"
    assert (s.dead_letter.last_error_code, s.dead_letter.attempts) == ("BAD_PERIOD", 1)
    assert s.dead_letter.requires_manual_review is escalate
    assert types(s) == [EventType.JOB_FAILED, EventType.JOB_DEAD_LETTERED]
    assert payload(s, EventType.JOB_DEAD_LETTERED)["reason"] == "non_retryable_validation_failure"


def test_non_retryable_fails_when_the_policy_does_not_dead_letter_it() -> None:
    s = settle(K.NON_RETRYABLE_FAILURE, policy(dead_letter_non_retryable=False), code="BAD_PERIOD")
    assert s.to_status is RunStatus.FAILED
    assert s.transition.reason == "failed_non_retryable"
    assert s.dead_letter is None
    assert types(s) == [EventType.JOB_FAILED]
    assert payload(s, EventType.JOB_FAILED)["error_code"] == "BAD_PERIOD"


def test_stopped_is_cancelled_with_job_cancelled() -> None:
    s = settle(K.STOPPED, code=None)
    assert s.to_status is RunStatus.CANCELLED
    assert s.transition.reason == "stopped_by_user"
    assert s.attempt_outcome == "stopped"
    assert types(s) == [EventType.JOB_CANCELLED]
    assert payload(s, EventType.JOB_CANCELLED) == {
        **{
            k: payload(s, EventType.JOB_CANCELLED)[k]
            for k in ("job_run_id", "job_class", "job_definition_id", "tenant_id", "idempotency_key")
        },
        "event_type": "trustgate.scheduler.job_cancelled",
        "requested_by": ACTOR,
        "reason": "stopped_by_user",
        "cancelled_at": Z_NOW,
    }


@pytest.mark.parametrize("status", [s for s in RunStatus if s is not RunStatus.RUNNING], ids=str)
@pytest.mark.parametrize("kind", list(OutcomeKind))
def test_settling_from_any_other_status_follows_the_table(status: RunStatus, kind: OutcomeKind) -> None:
    target = settle(kind).to_status
    run = make_run(status=status)
    if is_allowed(status, target):  # e.g. DISPATCHED -> CANCELLED: the table, not settle, decides
        assert settle(kind, run=run).from_status is status
        return
    with pytest.raises(IllegalTransitionError) as caught:
        settle(kind, run=run)
    assert RUN_ID in str(caught.value)
    assert f"{status.value} -> {target.value}" in str(caught.value)


@pytest.mark.parametrize("status", sorted(TERMINAL), ids=str)
@pytest.mark.parametrize("kind", list(OutcomeKind))
def test_an_ended_run_cannot_be_settled_again(status: RunStatus, kind: OutcomeKind) -> None:
    with pytest.raises(IllegalTransitionError):
        settle(kind, run=make_run(status=status))


# --- dead letter ids --------------------------------------------------------------------------


def test_dead_letter_ids_are_derived_and_deterministic() -> None:
    first = settle(K.RETRYABLE_FAILURE, run=make_run(attempt=5))
    again = settle(K.RETRYABLE_FAILURE, run=make_run(attempt=5))
    assert first.dead_letter is not None and again.dead_letter is not None
    assert first.dead_letter.dead_letter_id == again.dead_letter.dead_letter_id == f"TGDLQ-{RUN_HEX}-5"
    assert first == again  # the whole settlement is a value
    later = settle(K.RETRYABLE_FAILURE, run=make_run(attempt=6, max_attempts=6))
    assert later.dead_letter is not None
    assert later.dead_letter.dead_letter_id == f"TGDLQ-{RUN_HEX}-6"


@pytest.mark.parametrize(
    ("run_id", "attempt", "expected"),
    [
        ("TGJOBRUN-abc", 1, "TGDLQ-abc-1"),
        ("TGJOBRUN-abc", 0, "TGDLQ-abc-0"),
        ("custom-run", 2, "TGDLQ-custom-run-2"),
        ("TGJOBRUN-TGJOBRUN-x", 3, "TGDLQ-TGJOBRUN-x-3"),  # only the one prefix is removed
    ],
)
def test_dead_letter_for(run_id: str, attempt: int, expected: str) -> None:
    letter = dead_letter_for(
        make_run(job_run_id=run_id, attempt=attempt),
        DeadLetterReason.MISSING_DEPENDENCY,
        error_code=None,
        requires_review=True,
        now=NOW,
    )
    assert letter.dead_letter_id == expected
    assert letter.dead_letter_id.startswith(DEAD_LETTER_PREFIX)
    assert (letter.job_run_id, letter.attempts, letter.requires_manual_review) == (run_id, attempt, True)
    assert (letter.resolved_at, letter.resolution) == (None, None)


@pytest.mark.parametrize(
    ("n", "expected"), [(1, "TGDLQ-abc-3"), (2, "TGDLQ-abc-3.2"), (3, "TGDLQ-abc-3.3"), (0, "TGDLQ-abc-3")]
)
def test_repeat_dead_letter_ids_keep_the_first_and_number_the_rest(n: int, expected: str) -> None:
    assert repeat_dead_letter_id("TGDLQ-abc-3", n) == expected


# --- settle_without_attempt ---------------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.SCHEDULED, RunStatus.RETRY_WAIT, RunStatus.DISPATCHED], ids=str)
def test_queue_timeout_dead_letters_without_an_attempt(status: RunStatus) -> None:
    run = make_run(status=status, attempt=0, lease_token=0)
    detail = {"queue_deadline_at": "2026-03-01T11:59:00Z"}
    s = settle_without_attempt(
        run, queue_timeout_decision(), now=NOW, actor="scheduler", error_code="QUEUE_TIMEOUT", detail=detail
    )
    assert s.to_status is RunStatus.DEAD_LETTERED
    assert (s.from_status, s.expected_token, s.attempt_outcome) == (status, None, None)
    assert s.transition.reason == "queue_timeout"
    assert s.transition.actor == "scheduler"
    assert s.transition.detail == {"queue_deadline_at": "2026-03-01T11:59:00Z", "error_code": "QUEUE_TIMEOUT"}
    assert detail == {"queue_deadline_at": "2026-03-01T11:59:00Z"}  # the caller's dict is not touched
    assert s.dead_letter is not None
    assert s.dead_letter.reason is DeadLetterReason.QUEUE_TIMEOUT_EXCEEDED
    assert s.dead_letter.requires_manual_review is False
    assert s.dead_letter.dead_letter_id == f"TGDLQ-{RUN_HEX}-0"
    # No attempt ended, so no job_failed: only the dead letter is announced.
    assert types(s) == [EventType.JOB_DEAD_LETTERED]
    assert payload(s, EventType.JOB_DEAD_LETTERED)["reason"] == "queue_timeout_exceeded"


def test_queue_timeout_decision() -> None:
    d = queue_timeout_decision()
    assert (d.to_status, d.reason, d.dead_letter_reason, d.requires_manual_review, d.next_retry_at) == (
        RunStatus.DEAD_LETTERED,
        TransitionReason.QUEUE_TIMEOUT,
        DeadLetterReason.QUEUE_TIMEOUT_EXCEEDED,
        False,
        None,
    )


@pytest.mark.parametrize(
    "status", [RunStatus.CREATED, RunStatus.SCHEDULED, RunStatus.DISPATCHED, RunStatus.RETRY_WAIT], ids=str
)
def test_cancelling_a_pending_run(status: RunStatus) -> None:
    s = settle_without_attempt(make_run(status=status), cancel_decision(), now=NOW, actor="alice")
    assert s.to_status is RunStatus.CANCELLED
    assert s.transition.reason == "cancelled_by_user"
    assert s.transition.detail == {}
    assert (s.error_code, s.dead_letter, s.attempt_outcome, s.expected_token) == (None, None, None, None)
    assert types(s) == [EventType.JOB_CANCELLED]
    body = payload(s, EventType.JOB_CANCELLED)
    assert (body["requested_by"], body["reason"], body["cancelled_at"]) == (
        "alice",
        "cancelled_by_user",
        Z_NOW,
    )


@pytest.mark.parametrize(
    "status",
    [
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.DEAD_LETTERED,
        RunStatus.ESCALATED,
    ],
    ids=str,
)
def test_ended_runs_cannot_be_cancelled_or_timed_out(status: RunStatus) -> None:
    run = make_run(status=status)
    with pytest.raises(IllegalTransitionError):
        settle_without_attempt(run, cancel_decision(), now=NOW, actor="alice")
    with pytest.raises(IllegalTransitionError):
        settle_without_attempt(run, queue_timeout_decision(), now=NOW, actor="s", error_code="QUEUE_TIMEOUT")


def test_created_run_cannot_be_queue_timed_out() -> None:
    with pytest.raises(IllegalTransitionError):
        settle_without_attempt(make_run(status=RunStatus.CREATED), queue_timeout_decision(), now=NOW, actor="s")


# --- properties ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(list(OutcomeKind)),
    strategy=st.sampled_from(list(RetryStrategy)),
    max_attempts=st.integers(1, 6),
    attempt=st.integers(1, 8),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    code=st.none() | st.sampled_from(["E1", "TIMEOUT"]),
)
def test_every_settlement_is_consistent(
    kind: OutcomeKind,
    strategy: RetryStrategy,
    max_attempts: int,
    attempt: int,
    flags: tuple[bool, bool, bool, bool],
    code: str | None,
) -> None:
    jitter, dead_letter, escalate, dead_letter_nr = flags
    p = policy(
        strategy,
        max_attempts=max_attempts,
        jitter=jitter,
        dead_letter_after_max_attempts=dead_letter,
        escalate_on_final_failure=escalate,
        dead_letter_non_retryable=dead_letter_nr,
    )
    run = make_run(attempt=attempt, max_attempts=max_attempts)
    s = settle_attempt(run, Outcome(kind, code), p, now=NOW, actor=ACTOR, started_at=STARTED)
    assert s.transition.to_status is s.to_status
    assert s.transition.from_status is RunStatus.RUNNING
    assert s.transition.attempt == attempt
    assert s.events, "every settlement announces itself"
    for event_type, body in s.events:
        assert body["event_type"] == event_type.qualified
        assert body["job_run_id"] == RUN_ID
        canonical_json(body)  # outbox payloads are canonical JSON
    assert (s.dead_letter is not None) == (s.to_status is RunStatus.DEAD_LETTERED)
    assert (EventType.JOB_DEAD_LETTERED in types(s)) == (s.to_status is RunStatus.DEAD_LETTERED)
    assert s.error_code == (None if s.to_status is RunStatus.COMPLETED else code)
    assert s == settle_attempt(replace(run), Outcome(kind, code), p, now=NOW, actor=ACTOR, started_at=STARTED)
