"""What happens to a run after an attempt ends: a pure function of the outcome, the policy,
the run's attempt count and the time.

A worker reports one of a closed set of outcomes; it never picks the next status itself.
The same function decides for a live worker, for the rescuer that finds an expired lease
and for a replay, so all three agree by construction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from jobgate.core.models import DeadLetterReason
from jobgate.core.policies import RetryPolicy, RetryStrategy
from jobgate.core.retry import retry_delay
from jobgate.core.states import RunStatus, TransitionReason


class OutcomeKind(StrEnum):
    SUCCEEDED = "succeeded"
    RETRYABLE_FAILURE = "retryable_failure"
    NON_RETRYABLE_FAILURE = "non_retryable_failure"
    EXECUTION_TIMEOUT = "execution_timeout"
    LEASE_EXPIRED = "lease_expired"
    STOPPED = "stopped"


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended. Its code and message come from handler code (an exception's class
    and text, a code it chose): they are made storable here, the one door every outcome passes,
    so no handler can write what a store refuses and leave its settlement unwritable (PostgreSQL
    refuses NUL, and no store takes a lone surrogate as UTF-8), or a code of any length."""

    kind: OutcomeKind
    error_code: str | None = None
    error_message: str | None = None

    def __post_init__(self) -> None:
        if self.error_code is not None:
            object.__setattr__(self, "error_code", error_code_of(self.error_code))
        if self.error_message is not None:
            object.__setattr__(self, "error_message", storable_text(self.error_message))


ERROR_CODE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def error_code_of(code: object) -> str:
    """``code`` as an error code: letters, digits and ``_ . : -``, at most 64; anything else is
    replaced by ``_`` (a code names a kind of failure, it carries no free text). A handler may
    raise with any object as its code (``error_code=12345``): its text is used, and no code at
    all is ``ERROR``, never a failure to record the failure."""
    if not isinstance(code, str):
        try:
            code = "" if code is None else str(code)
        except Exception:  # a handler's object can do anything in __str__
            code = ""
    if ERROR_CODE.fullmatch(code):
        return code
    return re.sub(r"[^A-Za-z0-9_.:-]+", "_", code)[:64].strip("_") or "ERROR"


def storable_text(text: str) -> str:
    """``text`` with what a store refuses written as escapes: NUL as ``\\x00``, a lone surrogate
    (a file name decoded with ``surrogateescape``, say) as ``\\udcXX``."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@dataclass(frozen=True)
class Decision:
    to_status: RunStatus
    reason: TransitionReason
    next_retry_at: datetime | None = None
    dead_letter_reason: DeadLetterReason | None = None
    requires_manual_review: bool = False
    activates_safe_mode: bool = False  # the tenant's safe mode goes on once this is recorded


def decide(
    outcome: Outcome,
    policy: RetryPolicy,
    *,
    idempotency_key: str,
    attempt: int,
    max_attempts: int,
    now: datetime,
) -> Decision:
    """Map the outcome of attempt ``attempt`` to the run's next status.

    ``max_attempts`` is the run's own (bound when it was created, so changing a policy does
    not change runs already made); ``policy`` supplies the strategy and the delays.
    """
    kind = outcome.kind
    if kind is OutcomeKind.SUCCEEDED:
        return Decision(RunStatus.COMPLETED, TransitionReason.SUCCEEDED)
    if kind is OutcomeKind.STOPPED:
        return Decision(RunStatus.CANCELLED, TransitionReason.STOPPED_BY_USER)
    if kind is OutcomeKind.NON_RETRYABLE_FAILURE:
        # A final failure like an exhausted one: a strategy that asks for review (or for safe
        # mode) on its final failure asks for it here too. The status and reason stay those of
        # a non-retryable failure, so a replay of a run recorded before this rule still matches.
        final = exhausted(policy)
        if policy.dead_letter_non_retryable:
            return Decision(
                RunStatus.DEAD_LETTERED,
                TransitionReason.FAILED_NON_RETRYABLE,
                dead_letter_reason=DeadLetterReason.NON_RETRYABLE_VALIDATION_FAILURE,
                requires_manual_review=policy.escalate_on_final_failure or final.requires_manual_review,
                activates_safe_mode=final.activates_safe_mode,
            )
        # Not dead-lettered: no letter to mark for review, but the tenant's safe mode, when the
        # strategy asks for it, switches on as for any final failure.
        return Decision(
            RunStatus.FAILED, TransitionReason.FAILED_NON_RETRYABLE, activates_safe_mode=final.activates_safe_mode
        )

    # Retryable: a failure, an execution timeout, or a worker that vanished mid-attempt.
    if attempt < max_attempts and policy.strategy is not RetryStrategy.NONE:
        reason = {
            OutcomeKind.EXECUTION_TIMEOUT: TransitionReason.EXECUTION_TIMEOUT,
            OutcomeKind.LEASE_EXPIRED: TransitionReason.LEASE_EXPIRED,
        }.get(kind, TransitionReason.RETRY_SCHEDULED)
        return Decision(RunStatus.RETRY_WAIT, reason, next_retry_at=now + retry_delay(policy, idempotency_key, attempt))
    return exhausted(policy)


def exhausted(policy: RetryPolicy) -> Decision:
    """The final failure: escalate for review, dead-letter, or fail, as the policy says."""
    if policy.strategy is RetryStrategy.MANUAL_REVIEW_AFTER_N:
        return Decision(RunStatus.ESCALATED, TransitionReason.ESCALATED_FOR_REVIEW, requires_manual_review=True)
    if policy.strategy is RetryStrategy.SAFE_MODE_ON_FAILURE:
        return Decision(
            RunStatus.DEAD_LETTERED,
            TransitionReason.RETRIES_EXHAUSTED,
            dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
            requires_manual_review=True,
            activates_safe_mode=True,
        )
    if policy.strategy is RetryStrategy.DEAD_LETTER_AFTER_N or policy.dead_letter_after_max_attempts:
        return Decision(
            RunStatus.DEAD_LETTERED,
            TransitionReason.RETRIES_EXHAUSTED,
            dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
            requires_manual_review=policy.escalate_on_final_failure,
        )
    return Decision(RunStatus.FAILED, TransitionReason.RETRIES_EXHAUSTED)
