"""decide/exhausted: the next status of a run after an attempt, as a pure function."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.decide import Decision, Outcome, OutcomeKind, decide, exhausted
from jobgate.core.models import DeadLetterReason
from jobgate.core.policies import BUILTIN_RETRY_POLICIES, RetryPolicy, RetryStrategy
from jobgate.core.retry import retry_delay
from jobgate.core.states import RunStatus, TransitionReason, check_transition

from .support import KEY, NOW, policy, seconds

K = OutcomeKind
RETRYABLE = [K.RETRYABLE_FAILURE, K.EXECUTION_TIMEOUT, K.LEASE_EXPIRED]
RETRY_REASON = {
    K.RETRYABLE_FAILURE: TransitionReason.RETRY_SCHEDULED,
    K.EXECUTION_TIMEOUT: TransitionReason.EXECUTION_TIMEOUT,
    K.LEASE_EXPIRED: TransitionReason.LEASE_EXPIRED,
}


def run_decide(kind: OutcomeKind, p: RetryPolicy, attempt: int, max_attempts: int | None = None) -> Decision:
    return decide(
        Outcome(kind, "E_CODE"),
        p,
        idempotency_key=KEY,
        attempt=attempt,
        max_attempts=p.max_attempts if max_attempts is None else max_attempts,
        now=NOW,
    )


@pytest.mark.parametrize("strategy", list(RetryStrategy))
@pytest.mark.parametrize("attempt", [1, 3, 5, 9])
def test_success_completes(strategy: RetryStrategy, attempt: int) -> None:
    d = run_decide(K.SUCCEEDED, policy(strategy), attempt, max_attempts=5)
    assert d == Decision(RunStatus.COMPLETED, TransitionReason.SUCCEEDED)
    assert d.next_retry_at is None
    assert d.dead_letter_reason is None
    assert d.requires_manual_review is False


@pytest.mark.parametrize("strategy", list(RetryStrategy))
@pytest.mark.parametrize("attempt", [1, 5])
def test_stopped_is_cancelled(strategy: RetryStrategy, attempt: int) -> None:
    d = run_decide(K.STOPPED, policy(strategy), attempt, max_attempts=5)
    assert d == Decision(RunStatus.CANCELLED, TransitionReason.STOPPED_BY_USER)


# Exponential 30 s doubling, cap 1800 s, max 5 attempts: attempts 1..4 retry after 30..240 s.
@pytest.mark.parametrize(("attempt", "delay"), [(1, 30), (2, 60), (3, 120), (4, 240)])
@pytest.mark.parametrize("kind", RETRYABLE)
def test_retryable_below_max_waits_with_the_policy_delay(kind: OutcomeKind, attempt: int, delay: int) -> None:
    d = run_decide(kind, policy(RetryStrategy.EXPONENTIAL_BACKOFF, max_attempts=5), attempt)
    assert d == Decision(RunStatus.RETRY_WAIT, RETRY_REASON[kind], next_retry_at=NOW + seconds(delay))


@pytest.mark.parametrize("kind", RETRYABLE)
def test_retry_wait_with_jitter_uses_the_keyed_delay(kind: OutcomeKind) -> None:
    std = BUILTIN_RETRY_POLICIES["standard_exponential_backoff_v1"]
    d = decide(Outcome(kind), std, idempotency_key="payroll-2026-01", attempt=1, max_attempts=5, now=NOW)
    assert d.to_status is RunStatus.RETRY_WAIT
    assert d.next_retry_at == NOW + timedelta(microseconds=17888339)
    assert d.next_retry_at == NOW + retry_delay(std, "payroll-2026-01", 1)


def test_fixed_delay_retry_time() -> None:
    d = run_decide(K.RETRYABLE_FAILURE, BUILTIN_RETRY_POLICIES["fixed_delay_v1"], 2)
    assert d.next_retry_at == NOW + seconds(10)


def test_next_retry_keeps_the_callers_timezone() -> None:
    cet = NOW.astimezone(timezone(timedelta(hours=1)))
    d = decide(Outcome(K.RETRYABLE_FAILURE), policy(), idempotency_key=KEY, attempt=1, max_attempts=5, now=cet)
    assert d.next_retry_at == NOW + seconds(30)


@pytest.mark.parametrize("kind", RETRYABLE)
@pytest.mark.parametrize("escalate", [False, True])
@pytest.mark.parametrize("attempt", [5, 6, 100])
def test_at_max_dead_letters_when_the_policy_says_so(kind: OutcomeKind, escalate: bool, attempt: int) -> None:
    p = policy(
        RetryStrategy.EXPONENTIAL_BACKOFF,
        dead_letter_after_max_attempts=True,
        escalate_on_final_failure=escalate,
    )
    d = run_decide(kind, p, attempt)
    assert d == Decision(
        RunStatus.DEAD_LETTERED,
        TransitionReason.RETRIES_EXHAUSTED,
        dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
        requires_manual_review=escalate,
    )


@pytest.mark.parametrize("kind", RETRYABLE)
@pytest.mark.parametrize(
    "strategy",
    [RetryStrategy.FIXED_DELAY, RetryStrategy.EXPONENTIAL_BACKOFF, RetryStrategy.EXPONENTIAL_BACKOFF_JITTER],
)
def test_at_max_fails_when_not_dead_lettering(kind: OutcomeKind, strategy: RetryStrategy) -> None:
    p = policy(strategy, dead_letter_after_max_attempts=False, escalate_on_final_failure=True)
    assert run_decide(kind, p, 5) == Decision(RunStatus.FAILED, TransitionReason.RETRIES_EXHAUSTED)


@pytest.mark.parametrize("kind", RETRYABLE)
@pytest.mark.parametrize("dead_letter", [False, True])
def test_dead_letter_after_n_always_dead_letters(kind: OutcomeKind, dead_letter: bool) -> None:
    p = policy(RetryStrategy.DEAD_LETTER_AFTER_N, max_attempts=3, dead_letter_after_max_attempts=dead_letter)
    d = run_decide(kind, p, 3)
    assert d.to_status is RunStatus.DEAD_LETTERED
    assert d.dead_letter_reason is DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED
    assert run_decide(kind, p, 2).to_status is RunStatus.RETRY_WAIT


@pytest.mark.parametrize("kind", RETRYABLE)
@pytest.mark.parametrize("dead_letter", [False, True])
def test_manual_review_after_n_escalates(kind: OutcomeKind, dead_letter: bool) -> None:
    p = policy(RetryStrategy.MANUAL_REVIEW_AFTER_N, max_attempts=3, dead_letter_after_max_attempts=dead_letter)
    assert run_decide(kind, p, 3) == Decision(
        RunStatus.ESCALATED, TransitionReason.ESCALATED_FOR_REVIEW, requires_manual_review=True
    )
    assert run_decide(kind, p, 2).next_retry_at == NOW + seconds(60)


@pytest.mark.parametrize("kind", RETRYABLE)
@pytest.mark.parametrize("dead_letter", [False, True])
def test_safe_mode_on_failure_dead_letters_for_review_and_asks_for_safe_mode(
    kind: OutcomeKind, dead_letter: bool
) -> None:
    p = policy(RetryStrategy.SAFE_MODE_ON_FAILURE, max_attempts=3, dead_letter_after_max_attempts=dead_letter)
    assert run_decide(kind, p, 3) == Decision(
        RunStatus.DEAD_LETTERED,
        TransitionReason.RETRIES_EXHAUSTED,
        dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
        requires_manual_review=True,
        activates_safe_mode=True,
    )
    retried = run_decide(kind, p, 2)
    assert retried.to_status is RunStatus.RETRY_WAIT and not retried.activates_safe_mode


@pytest.mark.parametrize("run_max", [1, 3, 10])
def test_strategy_none_never_retries(run_max: int) -> None:
    none = BUILTIN_RETRY_POLICIES["no_retry_v1"]
    d = run_decide(K.RETRYABLE_FAILURE, none, 1, max_attempts=run_max)
    assert d.to_status is RunStatus.DEAD_LETTERED
    assert d.reason is TransitionReason.RETRIES_EXHAUSTED


def test_the_runs_own_max_attempts_wins_over_the_policys() -> None:
    p = policy(RetryStrategy.EXPONENTIAL_BACKOFF, max_attempts=3)
    assert run_decide(K.RETRYABLE_FAILURE, p, 3, max_attempts=10).to_status is RunStatus.RETRY_WAIT
    assert run_decide(K.RETRYABLE_FAILURE, p, 2, max_attempts=2).to_status is RunStatus.DEAD_LETTERED


@pytest.mark.parametrize("strategy", list(RetryStrategy))
@pytest.mark.parametrize("attempt", [1, 5])
@pytest.mark.parametrize("escalate", [False, True])
def test_non_retryable_dead_letters_at_once_with_its_strategys_final_failure(
    strategy: RetryStrategy, attempt: int, escalate: bool
) -> None:
    """Dead-lettered at once (status and reason, which replay compares, as ever); the review and
    the safe mode a strategy asks for on its final failure are asked for here too (found by a
    review: the most definite failure skipped both)."""
    p = policy(strategy, escalate_on_final_failure=escalate)
    final = exhausted(p)
    assert run_decide(K.NON_RETRYABLE_FAILURE, p, attempt, max_attempts=5) == Decision(
        RunStatus.DEAD_LETTERED,
        TransitionReason.FAILED_NON_RETRYABLE,
        dead_letter_reason=DeadLetterReason.NON_RETRYABLE_VALIDATION_FAILURE,
        requires_manual_review=escalate or final.requires_manual_review,
        activates_safe_mode=final.activates_safe_mode,
    )
    if strategy in (RetryStrategy.MANUAL_REVIEW_AFTER_N, RetryStrategy.SAFE_MODE_ON_FAILURE):
        assert final.requires_manual_review
    assert final.activates_safe_mode is (strategy is RetryStrategy.SAFE_MODE_ON_FAILURE)


def test_non_retryable_under_manual_review_policy_is_dead_lettered_for_review() -> None:
    d = run_decide(K.NON_RETRYABLE_FAILURE, BUILTIN_RETRY_POLICIES["manual_review_v1"], 1)
    assert d.to_status is RunStatus.DEAD_LETTERED and d.requires_manual_review
    assert d.dead_letter_reason is DeadLetterReason.NON_RETRYABLE_VALIDATION_FAILURE


@pytest.mark.parametrize("attempt", [1, 5])
@pytest.mark.parametrize("strategy", list(RetryStrategy))
def test_non_retryable_fails_when_not_dead_lettering_it(attempt: int, strategy: RetryStrategy) -> None:
    """No letter to mark for review; safe mode still switches on where the strategy asks (found
    by the regression review: the first fix covered the dead-lettering case only)."""
    p = policy(strategy, dead_letter_non_retryable=False, escalate_on_final_failure=True)
    assert run_decide(K.NON_RETRYABLE_FAILURE, p, attempt) == Decision(
        RunStatus.FAILED,
        TransitionReason.FAILED_NON_RETRYABLE,
        activates_safe_mode=strategy is RetryStrategy.SAFE_MODE_ON_FAILURE,
    )


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (
            policy(RetryStrategy.MANUAL_REVIEW_AFTER_N),
            Decision(RunStatus.ESCALATED, TransitionReason.ESCALATED_FOR_REVIEW, requires_manual_review=True),
        ),
        (
            policy(RetryStrategy.DEAD_LETTER_AFTER_N, dead_letter_after_max_attempts=False),
            Decision(
                RunStatus.DEAD_LETTERED,
                TransitionReason.RETRIES_EXHAUSTED,
                dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
            ),
        ),
        (
            policy(RetryStrategy.FIXED_DELAY, escalate_on_final_failure=True),
            Decision(
                RunStatus.DEAD_LETTERED,
                TransitionReason.RETRIES_EXHAUSTED,
                dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
                requires_manual_review=True,
            ),
        ),
        (
            policy(RetryStrategy.FIXED_DELAY, dead_letter_after_max_attempts=False),
            Decision(RunStatus.FAILED, TransitionReason.RETRIES_EXHAUSTED),
        ),
    ],
    ids=["manual-review", "dead-letter-after-n", "dead-letter-escalate", "fail"],
)
def test_exhausted(p: RetryPolicy, expected: Decision) -> None:
    assert exhausted(p) == expected


# --- properties ---------------------------------------------------------------------------------


@st.composite
def policies(draw: st.DrawFn) -> RetryPolicy:
    strategy = draw(st.sampled_from(list(RetryStrategy)))
    initial = draw(st.integers(0, 3600))
    return RetryPolicy(
        "prop",
        strategy,
        1 if strategy is RetryStrategy.NONE else draw(st.integers(1, 10)),
        seconds(initial),
        seconds(initial + draw(st.integers(0, 7200))),
        jitter=draw(st.booleans()),
        dead_letter_after_max_attempts=draw(st.booleans()),
        escalate_on_final_failure=draw(st.booleans()),
        dead_letter_non_retryable=draw(st.booleans()),
    )


@settings(max_examples=200, deadline=None)
@given(
    p=policies(),
    kind=st.sampled_from(list(OutcomeKind)),
    attempt=st.integers(1, 12),
    max_attempts=st.integers(1, 12),
    key=st.text(max_size=20),
)
def test_every_decision_is_a_legal_exit_from_running(
    p: RetryPolicy, kind: OutcomeKind, attempt: int, max_attempts: int, key: str
) -> None:
    d = decide(Outcome(kind), p, idempotency_key=key, attempt=attempt, max_attempts=max_attempts, now=NOW)
    check_transition(RunStatus.RUNNING, d.to_status)
    assert d == decide(Outcome(kind), p, idempotency_key=key, attempt=attempt, max_attempts=max_attempts, now=NOW)
    assert (d.next_retry_at is not None) == (d.to_status is RunStatus.RETRY_WAIT)
    assert (d.dead_letter_reason is not None) == (d.to_status is RunStatus.DEAD_LETTERED)
    if d.to_status is RunStatus.RETRY_WAIT:
        assert kind in RETRYABLE
        assert attempt < max_attempts
        assert p.strategy is not RetryStrategy.NONE
        assert d.next_retry_at is not None
        assert NOW <= d.next_retry_at <= NOW + p.max_delay
    if kind in RETRYABLE and attempt >= max_attempts:
        assert d == exhausted(p)
    if d.to_status is RunStatus.ESCALATED:
        assert d.requires_manual_review
