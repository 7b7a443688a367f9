"""Policies: the seed §21 example, defaults, and a ValidationError naming each bad field."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from jobgate.core.errors import ValidationError
from jobgate.core.policies import (
    BUILTIN_RETRY_POLICIES,
    BUILTIN_TIMEOUT_POLICIES,
    RetryPolicy,
    RetryStrategy,
    SlaPolicy,
    TimeoutPolicy,
)

from .support import seconds

SEED_21: dict[str, Any] = {
    "retry_policy_id": "standard_exponential_backoff_v1",
    "strategy": "exponential_backoff_jitter",
    "max_attempts": 5,
    "initial_delay_seconds": 30,
    "max_delay_seconds": 1800,
    "jitter": True,
    "dead_letter_after_max_attempts": True,
    "escalate_on_final_failure": True,
}

# inf, nan and finite-but-huge values are refused with a ValidationError naming the field.
NON_FINITE = [float("inf"), float("nan"), 1e300]
NON_FINITE_IDS = ["inf", "nan", "1e300"]


def test_seed_example_parses() -> None:
    p = RetryPolicy.from_dict(SEED_21)
    assert p.retry_policy_id == "standard_exponential_backoff_v1"
    assert p.strategy is RetryStrategy.EXPONENTIAL_BACKOFF_JITTER
    assert p.max_attempts == 5
    assert p.initial_delay == seconds(30)
    assert p.max_delay == seconds(1800)
    assert p.jitter is True
    assert p.dead_letter_after_max_attempts is True
    assert p.escalate_on_final_failure is True
    assert p.dead_letter_non_retryable is True
    assert p == BUILTIN_RETRY_POLICIES["standard_exponential_backoff_v1"]


def test_description_is_accepted_and_not_part_of_the_policy() -> None:
    assert RetryPolicy.from_dict({**SEED_21, "description": "the seed one"}) == RetryPolicy.from_dict(SEED_21)


@pytest.mark.parametrize(
    ("strategy", "max_attempts", "jitter"),
    [
        ("none", 1, False),
        ("fixed_delay", 3, False),
        ("exponential_backoff", 3, False),
        ("exponential_backoff_jitter", 3, True),
        ("dead_letter_after_n", 3, False),
        ("manual_review_after_n", 3, False),
    ],
)
def test_defaults_per_strategy(strategy: str, max_attempts: int, jitter: bool) -> None:
    p = RetryPolicy.from_dict({"retry_policy_id": "p", "strategy": strategy})
    assert p.strategy == RetryStrategy(strategy)
    assert p.max_attempts == max_attempts
    assert p.initial_delay == seconds(30)
    assert p.max_delay == seconds(1800)
    assert p.jitter is jitter
    assert p.dead_letter_after_max_attempts is True
    assert p.escalate_on_final_failure is False
    assert p.dead_letter_non_retryable is True


def test_explicit_values_override_defaults() -> None:
    p = RetryPolicy.from_dict(
        {
            "retry_policy_id": "p",
            "strategy": "exponential_backoff_jitter",
            "jitter": False,
            "initial_delay_seconds": 0.5,
            "max_delay_seconds": 2,
            "max_attempts": 10,
            "dead_letter_after_max_attempts": False,
            "escalate_on_final_failure": True,
            "dead_letter_non_retryable": False,
        }
    )
    assert (p.jitter, p.initial_delay, p.max_delay, p.max_attempts) == (False, seconds(0.5), seconds(2), 10)
    assert (p.dead_letter_after_max_attempts, p.escalate_on_final_failure, p.dead_letter_non_retryable) == (
        False,
        True,
        False,
    )


def test_zero_delays_are_allowed() -> None:
    p = RetryPolicy.from_dict({**SEED_21, "initial_delay_seconds": 0, "max_delay_seconds": 0})
    assert p.initial_delay == p.max_delay == timedelta(0)


# (patch applied to the seed example, field the error must name); _DROP removes the key.
_DROP = object()
BAD_RETRY: list[tuple[dict[str, Any], str]] = [
    ({"retries": 3}, "retries"),
    ({"initial_delay": 30}, "initial_delay"),
    ({"retry_policy_id": _DROP}, "retry_policy_id"),
    ({"retry_policy_id": ""}, "retry_policy_id"),
    ({"retry_policy_id": None}, "retry_policy_id"),
    ({"retry_policy_id": 5}, "retry_policy_id"),
    ({"strategy": _DROP}, "strategy"),
    ({"strategy": None}, "strategy"),
    ({"strategy": "exponential"}, "strategy"),
    ({"strategy": "NONE"}, "strategy"),
    ({"strategy": 3}, "strategy"),
    ({"strategy": ["fixed_delay"]}, "strategy"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": -1}, "max_attempts"),
    ({"max_attempts": "5"}, "max_attempts"),
    ({"max_attempts": 5.0}, "max_attempts"),
    ({"max_attempts": True}, "max_attempts"),
    ({"max_attempts": None}, "max_attempts"),
    ({"strategy": "none", "max_attempts": 2}, "max_attempts"),
    ({"initial_delay_seconds": -1}, "initial_delay_seconds"),
    ({"initial_delay_seconds": -0.001}, "initial_delay_seconds"),
    ({"initial_delay_seconds": "30"}, "initial_delay_seconds"),
    ({"initial_delay_seconds": True}, "initial_delay_seconds"),
    ({"initial_delay_seconds": None}, "initial_delay_seconds"),
    ({"initial_delay_seconds": [30]}, "initial_delay_seconds"),
    ({"max_delay_seconds": -1}, "max_delay_seconds"),
    ({"max_delay_seconds": "1800"}, "max_delay_seconds"),
    ({"max_delay_seconds": False}, "max_delay_seconds"),
    ({"max_delay_seconds": 29}, "max_delay_seconds"),  # below initial_delay_seconds
    ({"initial_delay_seconds": 60, "max_delay_seconds": 59.5}, "max_delay_seconds"),
    ({"jitter": "true"}, "jitter"),
    ({"jitter": 1}, "jitter"),
    ({"jitter": None}, "jitter"),
    ({"dead_letter_after_max_attempts": "yes"}, "dead_letter_after_max_attempts"),
    ({"dead_letter_after_max_attempts": 0}, "dead_letter_after_max_attempts"),
    ({"escalate_on_final_failure": "false"}, "escalate_on_final_failure"),
    ({"escalate_on_final_failure": None}, "escalate_on_final_failure"),
    ({"dead_letter_non_retryable": 1}, "dead_letter_non_retryable"),
]


def _patched(patch: dict[str, Any]) -> dict[str, Any]:
    data = {**SEED_21, **patch}
    return {k: v for k, v in data.items() if v is not _DROP}


@pytest.mark.parametrize(("patch", "field"), BAD_RETRY, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_RETRY)])
def test_bad_retry_field_is_named(patch: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RetryPolicy.from_dict(_patched(patch), source="config.yaml")
    assert caught.value.field == field
    assert field in str(caught.value)
    assert caught.value.code == "validation_error"


def test_source_defaults_to_retry_policy() -> None:
    with pytest.raises(ValidationError) as caught:
        RetryPolicy.from_dict({**SEED_21, "jitter": "yes"})
    assert caught.value.source == "retry policy"
    assert str(caught.value) == "retry policy: jitter: must be true or false"


def test_source_is_passed_through() -> None:
    with pytest.raises(ValidationError) as caught:
        RetryPolicy.from_dict({**SEED_21, "strategy": "sometimes"}, source="jobgate.yaml")
    assert caught.value.source == "jobgate.yaml"
    assert "exponential_backoff_jitter" in caught.value.message  # lists the allowed strategies


@pytest.mark.parametrize("value", NON_FINITE, ids=NON_FINITE_IDS)
@pytest.mark.parametrize("field", ["initial_delay_seconds", "max_delay_seconds"])
def test_non_finite_retry_delay_is_a_validation_error(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        RetryPolicy.from_dict({**SEED_21, field: value})
    assert caught.value.field == field


@pytest.mark.parametrize("field", ["initial_delay_seconds", "max_delay_seconds"])
def test_negative_infinity_delay_is_refused(field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RetryPolicy.from_dict({**SEED_21, field: float("-inf")})
    assert caught.value.field == field


# --- direct construction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"strategy": RetryStrategy.NONE, "max_attempts": 3}, "max_attempts"),
        ({"initial_delay": seconds(-1), "max_delay": seconds(10)}, "initial_delay_seconds"),
        ({"initial_delay": seconds(10), "max_delay": seconds(9)}, "max_delay_seconds"),
    ],
)
def test_constructor_validates(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {
        "retry_policy_id": "direct",
        "strategy": RetryStrategy.FIXED_DELAY,
        "max_attempts": 3,
    }
    with pytest.raises(ValidationError) as caught:
        RetryPolicy(**{**args, **kwargs})
    assert caught.value.field == field
    assert caught.value.source == "retry policy direct"


def test_policies_are_frozen_values() -> None:
    p = RetryPolicy.from_dict(SEED_21)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.max_attempts = 9  # type: ignore[misc]
    assert hash(p) == hash(RetryPolicy.from_dict(SEED_21))


# --- built-ins -------------------------------------------------------------------------------


def test_builtin_retry_policies() -> None:
    assert set(BUILTIN_RETRY_POLICIES) == {
        "no_retry_v1",
        "fixed_delay_v1",
        "standard_exponential_backoff_v1",
        "manual_review_v1",
    }
    for policy_id, p in BUILTIN_RETRY_POLICIES.items():
        assert p.retry_policy_id == policy_id
    none = BUILTIN_RETRY_POLICIES["no_retry_v1"]
    assert (none.strategy, none.max_attempts) == (RetryStrategy.NONE, 1)
    fixed = BUILTIN_RETRY_POLICIES["fixed_delay_v1"]
    assert (fixed.strategy, fixed.max_attempts, fixed.initial_delay) == (
        RetryStrategy.FIXED_DELAY,
        3,
        seconds(10),
    )
    review = BUILTIN_RETRY_POLICIES["manual_review_v1"]
    assert (review.strategy, review.max_attempts, review.initial_delay, review.max_delay) == (
        RetryStrategy.MANUAL_REVIEW_AFTER_N,
        3,
        seconds(60),
        seconds(600),
    )


def test_builtin_timeout_policy() -> None:
    t = BUILTIN_TIMEOUT_POLICIES["default_timeout_v1"]
    assert t == TimeoutPolicy("default_timeout_v1", timedelta(hours=1), None)


# --- timeout policies --------------------------------------------------------------------------


def test_timeout_policy_parses() -> None:
    t = TimeoutPolicy.from_dict(
        {
            "timeout_policy_id": "t",
            "execution_timeout_seconds": 90,
            "queue_timeout_seconds": 0.5,
            "description": "x",
        }
    )
    assert t == TimeoutPolicy("t", seconds(90), seconds(0.5))
    assert TimeoutPolicy.from_dict({"timeout_policy_id": "t"}) == TimeoutPolicy("t", None, None)
    assert TimeoutPolicy.from_dict(
        {"timeout_policy_id": "t", "execution_timeout_seconds": None, "queue_timeout_seconds": 5}
    ) == TimeoutPolicy("t", None, seconds(5))


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "timeout_policy_id"),
        ({"timeout_policy_id": ""}, "timeout_policy_id"),
        ({"timeout_policy_id": 3}, "timeout_policy_id"),
        ({"timeout_policy_id": "t", "execution_timeout_seconds": 0}, "execution_timeout_seconds"),
        ({"timeout_policy_id": "t", "execution_timeout_seconds": -5}, "execution_timeout_seconds"),
        ({"timeout_policy_id": "t", "execution_timeout_seconds": "60"}, "execution_timeout_seconds"),
        ({"timeout_policy_id": "t", "execution_timeout_seconds": True}, "execution_timeout_seconds"),
        ({"timeout_policy_id": "t", "queue_timeout_seconds": 0}, "queue_timeout_seconds"),
        ({"timeout_policy_id": "t", "queue_timeout_seconds": [1]}, "queue_timeout_seconds"),
        ({"timeout_policy_id": "t", "queue_timeout_seconds": float("-inf")}, "queue_timeout_seconds"),
        ({"timeout_policy_id": "t", "timeout_seconds": 5}, "timeout_seconds"),
    ],
)
def test_bad_timeout_field_is_named(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TimeoutPolicy.from_dict(data, source="cfg")
    assert (caught.value.field, caught.value.source) == (field, "cfg")


@pytest.mark.parametrize("value", NON_FINITE, ids=NON_FINITE_IDS)
@pytest.mark.parametrize("field", ["execution_timeout_seconds", "queue_timeout_seconds"])
def test_non_finite_timeout_is_a_validation_error(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        TimeoutPolicy.from_dict({"timeout_policy_id": "t", field: value})
    assert caught.value.field == field


# --- SLA policies ------------------------------------------------------------------------------


def test_sla_policy_parses_with_defaults() -> None:
    assert SlaPolicy.from_dict({"sla_policy_id": "s", "deadline_seconds": 3600}) == SlaPolicy(
        "s", timedelta(hours=1), "warning", False
    )
    assert SlaPolicy.from_dict(
        {"sla_policy_id": "s", "deadline_seconds": 1.5, "severity": "critical", "requires_escalation": True}
    ) == SlaPolicy("s", seconds(1.5), "critical", True)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"deadline_seconds": 5}, "sla_policy_id"),
        ({"sla_policy_id": "", "deadline_seconds": 5}, "sla_policy_id"),
        ({"sla_policy_id": "s"}, "deadline_seconds"),
        ({"sla_policy_id": "s", "deadline_seconds": 0}, "deadline_seconds"),
        ({"sla_policy_id": "s", "deadline_seconds": -1}, "deadline_seconds"),
        ({"sla_policy_id": "s", "deadline_seconds": "60"}, "deadline_seconds"),
        ({"sla_policy_id": "s", "deadline_seconds": True}, "deadline_seconds"),
        ({"sla_policy_id": "s", "deadline_seconds": float("-inf")}, "deadline_seconds"),
        ({"sla_policy_id": "s", "deadline_seconds": 5, "severity": "high"}, "severity"),
        ({"sla_policy_id": "s", "deadline_seconds": 5, "severity": "WARNING"}, "severity"),
        ({"sla_policy_id": "s", "deadline_seconds": 5, "requires_escalation": "yes"}, "requires_escalation"),
    ],
)
def test_bad_sla_field_is_named(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SlaPolicy.from_dict(data)
    assert (caught.value.field, caught.value.source) == (field, "sla policy")


@pytest.mark.parametrize("value", NON_FINITE, ids=NON_FINITE_IDS)
def test_non_finite_sla_deadline_is_a_validation_error(value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        SlaPolicy.from_dict({"sla_policy_id": "s", "deadline_seconds": value})
    assert caught.value.field == "deadline_seconds"
