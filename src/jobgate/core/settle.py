"""Turn a decision into the exact record of what changes: the pure half of every run update.

``settle`` takes a run as the worker (or the rescuer) last saw it, the outcome of its attempt
and the policy, and returns a ``Settlement``: the new status, the transition row, the dead
letter if any, and the outbox events. The store applies it as one compare-and-set on
``(status, lease_token)`` and writes the rest only if that matched, in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobgate.core import events
from jobgate.core.canonical import isoformat_utc
from jobgate.core.decide import Decision, Outcome, OutcomeKind, decide
from jobgate.core.models import DeadLetter, DeadLetterReason, JobRun, Transition
from jobgate.core.policies import RetryPolicy
from jobgate.core.states import RunStatus, TransitionReason, check_transition

DEAD_LETTER_PREFIX = "TGDLQ-"
ACTIVATES_SAFE_MODE = "activates_safe_mode"


@dataclass(frozen=True)
class Settlement:
    job_run_id: str
    from_status: RunStatus
    expected_token: int | None
    decision: Decision
    transition: Transition
    error_code: str | None = None
    error_message: str | None = None
    result: dict[str, Any] | None = None
    dead_letter: DeadLetter | None = None
    events: list[events.Event] = field(default_factory=list)
    attempt_outcome: str | None = None
    artifact: tuple[str, str, int] | None = None

    @property
    def to_status(self) -> RunStatus:
        return self.decision.to_status


def dead_letter_for(
    run: JobRun, reason: DeadLetterReason, *, error_code: str | None, requires_review: bool, now: datetime
) -> DeadLetter:
    """The dead letter of ``run`` at its current attempt. Its id is derived from the run and the
    attempt, so a settlement computed twice names it the same. A requeue keeps the attempt
    counter, so the same run can be dead-lettered again at the same attempt (before it starts
    another); the store then records that one under ``repeat_dead_letter_id`` (``.2``, ``.3``…)."""
    return DeadLetter(
        dead_letter_id=f"{DEAD_LETTER_PREFIX}{run.job_run_id.removeprefix('TGJOBRUN-')}-{run.attempt}",
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        job_class=run.job_class,
        reason=reason,
        last_error_code=error_code,
        attempts=run.attempt,
        requires_manual_review=requires_review,
        created_at=now,
    )


def repeat_dead_letter_id(first_id: str, n: int) -> str:
    """The id of the ``n``-th dead letter of one run at one attempt (``first_id`` is the first's,
    from ``dead_letter_for``): the first keeps its derived id, later ones get ``.n`` appended."""
    return first_id if n <= 1 else f"{first_id}.{n}"


def settle_attempt(
    run: JobRun,
    outcome: Outcome,
    policy: RetryPolicy,
    *,
    now: datetime,
    actor: str,
    started_at: datetime,
    result: dict[str, Any] | None = None,
    artifact: tuple[str, str, int] | None = None,
) -> Settlement:
    """Settle the end of the running attempt ``run.attempt`` (``run`` is in RUNNING)."""
    decision = decide(
        outcome,
        policy,
        idempotency_key=run.idempotency_key,
        attempt=run.attempt,
        max_attempts=run.max_attempts,
        now=now,
    )
    return _settlement(
        run,
        decision,
        outcome,
        now=now,
        actor=actor,
        started_at=started_at,
        result=result,
        artifact=artifact,
        token=run.lease_token,
    )


def settle_without_attempt(
    run: JobRun,
    decision: Decision,
    *,
    now: datetime,
    actor: str,
    error_code: str | None = None,
    error_message: str | None = None,
    detail: dict[str, Any] | None = None,
) -> Settlement:
    """Settle a run that is not running: queue timeout, cancellation of a pending run."""
    outcome = (
        Outcome(OutcomeKind.NON_RETRYABLE_FAILURE, error_code, error_message)
        if error_code
        else Outcome(OutcomeKind.STOPPED)
    )
    return _settlement(
        run,
        decision,
        outcome,
        now=now,
        actor=actor,
        started_at=None,
        result=None,
        artifact=None,
        token=None,
        detail=detail,
        record_attempt=False,
    )


def _settlement(
    run: JobRun,
    decision: Decision,
    outcome: Outcome,
    *,
    now: datetime,
    actor: str,
    started_at: datetime | None,
    result: dict[str, Any] | None,
    artifact: tuple[str, str, int] | None,
    token: int | None,
    detail: dict[str, Any] | None = None,
    record_attempt: bool = True,
) -> Settlement:
    check_transition(run.status, decision.to_status, job_run_id=run.job_run_id)
    to = decision.to_status
    error_code = outcome.error_code if to is not RunStatus.COMPLETED else None
    transition_detail: dict[str, Any] = dict(detail or {})
    if record_attempt:
        transition_detail["outcome"] = outcome.kind.value
    if error_code:
        transition_detail["error_code"] = error_code
    if outcome.error_message and to is not RunStatus.COMPLETED:
        transition_detail["error_message"] = outcome.error_message[:500]
    if decision.next_retry_at is not None:
        transition_detail["next_retry_at"] = isoformat_utc(decision.next_retry_at)
    if decision.activates_safe_mode:
        transition_detail[ACTIVATES_SAFE_MODE] = True  # read once the change committed (service.safemode)
    transition = Transition(
        run.job_run_id, run.status, to, run.attempt, decision.reason.value, actor, now, transition_detail
    )
    dead_letter = None
    out: list[events.Event] = []
    if to is RunStatus.COMPLETED:
        out.append(events.job_completed(run, result, started_at or now, now))
    elif to is RunStatus.RETRY_WAIT:
        assert decision.next_retry_at is not None
        out.append(
            events.job_failed(run, error_code=error_code, retryable=True, next_retry_at=decision.next_retry_at, now=now)
        )
        out.append(events.job_retried(run, next_retry_at=decision.next_retry_at, reason=decision.reason.value, now=now))
    elif to is RunStatus.FAILED:
        out.append(events.job_failed(run, error_code=error_code, retryable=False, next_retry_at=None, now=now))
    elif to is RunStatus.DEAD_LETTERED:
        assert decision.dead_letter_reason is not None
        dead_letter = dead_letter_for(
            run,
            decision.dead_letter_reason,
            error_code=error_code,
            requires_review=decision.requires_manual_review,
            now=now,
        )
        if record_attempt:
            out.append(events.job_failed(run, error_code=error_code, retryable=False, next_retry_at=None, now=now))
        out.append(events.job_dead_lettered(run, dead_letter))
    elif to is RunStatus.ESCALATED:
        out.append(events.job_failed(run, error_code=error_code, retryable=False, next_retry_at=None, now=now))
        out.append(events.job_escalated(run, error_code=error_code, now=now))
    elif to is RunStatus.CANCELLED:
        reason = decision.reason.value
        out.append(events.job_cancelled(run, actor=actor, reason=reason, now=now))
    return Settlement(
        job_run_id=run.job_run_id,
        from_status=run.status,
        expected_token=token,
        decision=decision,
        transition=transition,
        error_code=error_code,
        error_message=outcome.error_message if to is not RunStatus.COMPLETED else None,
        result=result,
        dead_letter=dead_letter,
        events=out,
        attempt_outcome=outcome.kind.value if record_attempt else None,
        artifact=artifact,
    )


def queue_timeout_decision() -> Decision:
    return Decision(
        RunStatus.DEAD_LETTERED,
        TransitionReason.QUEUE_TIMEOUT,
        dead_letter_reason=DeadLetterReason.QUEUE_TIMEOUT_EXCEEDED,
        requires_manual_review=False,
    )


def maximum_age_decision() -> Decision:
    return Decision(
        RunStatus.DEAD_LETTERED,
        TransitionReason.MAXIMUM_AGE_EXCEEDED,
        dead_letter_reason=DeadLetterReason.RUN_MAXIMUM_AGE_EXCEEDED,
        requires_manual_review=True,
    )


MAXIMUM_AGE_ERROR = "run_maximum_age_exceeded"


def settle_overdue(run: JobRun, *, now: datetime, actor: str) -> Settlement:
    """Close a run older than the maximum run age, whatever it is doing (seed 001: abandoned
    runs). A running attempt is recorded as ended by it; the caller fences the change."""
    running = run.status is RunStatus.RUNNING
    outcome = Outcome(OutcomeKind.NON_RETRYABLE_FAILURE, MAXIMUM_AGE_ERROR, "older than the maximum run age")
    return _settlement(
        run,
        maximum_age_decision(),
        outcome,
        now=now,
        actor=actor,
        started_at=run.started_at if running else None,
        result=None,
        artifact=None,
        token=None,
        record_attempt=running,
    )


def cancel_decision(reason: TransitionReason = TransitionReason.CANCELLED_BY_USER) -> Decision:
    return Decision(RunStatus.CANCELLED, reason)
