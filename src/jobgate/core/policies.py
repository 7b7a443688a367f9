"""Named, versioned retry, timeout and SLA policies (seed 000 §20-§22).

A definition refers to a policy by id (``standard_exponential_backoff_v1``). Policies are
values: the run records the id, and a replay resolves the same id to the same rule.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from jobgate.core.errors import ValidationError

# Durations beyond a century are configuration mistakes, and would overflow ``timedelta``.
MAX_SECONDS = 100 * 365 * 86_400


def seconds_ok(value: object, *, positive: bool) -> bool:
    """A finite number of seconds within bounds (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return (value > 0 if positive else value >= 0) and value <= MAX_SECONDS


class RetryStrategy(StrEnum):
    NONE = "none"
    FIXED_DELAY = "fixed_delay"
    EXPONENTIAL_BACKOFF = "exponential_backoff"
    EXPONENTIAL_BACKOFF_JITTER = "exponential_backoff_jitter"
    DEAD_LETTER_AFTER_N = "dead_letter_after_n"
    MANUAL_REVIEW_AFTER_N = "manual_review_after_n"
    # Seed 000 §20: after the last attempt fails, dead-letter the run and switch the tenant's
    # safe mode on (allowed only with ``safe_mode.allow_automatic``; jobgate.config checks it).
    SAFE_MODE_ON_FAILURE = "safe_mode_on_failure"


@dataclass(frozen=True)
class RetryPolicy:
    """Seed 000 §21. ``max_attempts`` counts every attempt, the first included."""

    retry_policy_id: str
    strategy: RetryStrategy
    max_attempts: int
    initial_delay: timedelta = timedelta(seconds=30)
    max_delay: timedelta = timedelta(minutes=30)
    jitter: bool = False
    dead_letter_after_max_attempts: bool = True
    escalate_on_final_failure: bool = False
    dead_letter_non_retryable: bool = True

    def __post_init__(self) -> None:
        where = f"retry policy {self.retry_policy_id}"
        if self.max_attempts < 1:
            raise ValidationError("must be at least 1", field="max_attempts", source=where)
        if self.strategy is RetryStrategy.NONE and self.max_attempts != 1:
            raise ValidationError("strategy 'none' allows exactly 1 attempt", field="max_attempts", source=where)
        if self.initial_delay < timedelta(0):
            raise ValidationError("must not be negative", field="initial_delay_seconds", source=where)
        if self.max_delay < self.initial_delay:
            raise ValidationError("must be >= initial_delay_seconds", field="max_delay_seconds", source=where)

    def to_dict(self) -> dict[str, Any]:
        """The seed §21 shape; ``from_dict(to_dict())`` gives back an equal policy."""
        return {
            "retry_policy_id": self.retry_policy_id,
            "strategy": self.strategy.value,
            "max_attempts": self.max_attempts,
            "initial_delay_seconds": self.initial_delay.total_seconds(),
            "max_delay_seconds": self.max_delay.total_seconds(),
            "jitter": self.jitter,
            "dead_letter_after_max_attempts": self.dead_letter_after_max_attempts,
            "escalate_on_final_failure": self.escalate_on_final_failure,
            "dead_letter_non_retryable": self.dead_letter_non_retryable,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "retry policy") -> RetryPolicy:
        """Build from the seed §21 JSON shape, naming the field on any error."""
        known = {
            "retry_policy_id",
            "strategy",
            "max_attempts",
            "initial_delay_seconds",
            "max_delay_seconds",
            "jitter",
            "dead_letter_after_max_attempts",
            "escalate_on_final_failure",
            "dead_letter_non_retryable",
            "description",
        }
        for key in data:
            if key not in known:
                raise ValidationError("unknown field", field=key, source=source)
        policy_id = data.get("retry_policy_id")
        if not isinstance(policy_id, str) or not policy_id:
            raise ValidationError("required, a non-empty string", field="retry_policy_id", source=source)
        try:
            strategy = RetryStrategy(str(data.get("strategy")))
        except ValueError:
            allowed = ", ".join(s.value for s in RetryStrategy)
            raise ValidationError(f"must be one of: {allowed}", field="strategy", source=source) from None

        def number(name: str, default: float) -> float:
            value = data.get(name, default)
            if not seconds_ok(value, positive=False):
                raise ValidationError(f"must be a number of seconds from 0 to {MAX_SECONDS}", field=name, source=source)
            return float(value)

        def flag(name: str, default: bool) -> bool:
            value = data.get(name, default)
            if not isinstance(value, bool):
                raise ValidationError("must be true or false", field=name, source=source)
            return value

        max_attempts = data.get("max_attempts", 1 if strategy is RetryStrategy.NONE else 3)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
            raise ValidationError("must be an integer", field="max_attempts", source=source)
        return cls(
            retry_policy_id=policy_id,
            strategy=strategy,
            max_attempts=max_attempts,
            initial_delay=timedelta(seconds=number("initial_delay_seconds", 30)),
            max_delay=timedelta(seconds=number("max_delay_seconds", 1800)),
            jitter=flag("jitter", strategy is RetryStrategy.EXPONENTIAL_BACKOFF_JITTER),
            dead_letter_after_max_attempts=flag("dead_letter_after_max_attempts", True),
            escalate_on_final_failure=flag("escalate_on_final_failure", False),
            dead_letter_non_retryable=flag("dead_letter_non_retryable", True),
        )


@dataclass(frozen=True)
class TimeoutPolicy:
    """Execution timeout (how long one attempt may run) and queue timeout (how long a run may
    wait for a worker before it is dead-lettered)."""

    timeout_policy_id: str
    execution_timeout: timedelta | None = None
    queue_timeout: timedelta | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "timeout policy") -> TimeoutPolicy:
        policy_id = data.get("timeout_policy_id")
        if not isinstance(policy_id, str) or not policy_id:
            raise ValidationError("required, a non-empty string", field="timeout_policy_id", source=source)

        def seconds(name: str) -> timedelta | None:
            value = data.get(name)
            if value is None:
                return None
            if not seconds_ok(value, positive=True):
                raise ValidationError(
                    f"must be a positive number of seconds up to {MAX_SECONDS}", field=name, source=source
                )
            return timedelta(seconds=float(value))

        for key in data:
            if key not in {"timeout_policy_id", "execution_timeout_seconds", "queue_timeout_seconds", "description"}:
                raise ValidationError("unknown field", field=key, source=source)
        return cls(policy_id, seconds("execution_timeout_seconds"), seconds("queue_timeout_seconds"))

    def to_dict(self) -> dict[str, Any]:
        """The configuration shape; ``from_dict(to_dict())`` gives back an equal policy."""
        doc: dict[str, Any] = {"timeout_policy_id": self.timeout_policy_id}
        if self.execution_timeout is not None:
            doc["execution_timeout_seconds"] = self.execution_timeout.total_seconds()
        if self.queue_timeout is not None:
            doc["queue_timeout_seconds"] = self.queue_timeout.total_seconds()
        return doc


SLA_FIELDS = (
    "sla_policy_id",
    "deadline_seconds",
    "severity",
    "requires_escalation",
    "escalation_after_seconds",
    "evidence_deadline_seconds",
    "evidence_anchor_param",
    "retry_window_seconds",
    "remind_before_seconds",
    "description",
)
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class SlaPolicy:
    """The deadlines of seed 000 §22 that a run or workflow run is held to; the SLA monitor
    (``core.sla`` decides, ``runtime.sla`` watches) reports each one passed.

    - ``deadline``: the SLA deadline, from the subject's creation.
    - ``escalation_after``: the escalation deadline, from creation; past it human escalation is
      required, whatever ``requires_escalation`` says.
    - ``evidence_deadline``: quarantine evidence is due, from creation or, with
      ``evidence_anchor_param``, from the instant that parameter holds (the quarantine's opening).
    - ``retry_window``: from the first attempt's start; a retry still pending or running after it
      is a breach (the monitor reports it, and escalates when ``requires_escalation``). The
      retry decision (``core.decide``) does not read it on purpose: a decision must replay from
      what the run bound at creation (seed §53), and an SLA policy is resolved from today's
      configuration; the monitor's escalation is a recorded fact that a replay takes as such.
    - ``remind_before``: a reminder this long before each of the three deadlines above.

    Execution and queue timeouts stay in ``TimeoutPolicy``: the worker and the rescuer enforce
    them and the monitor reports them.
    """

    sla_policy_id: str
    deadline: timedelta
    severity: str = "warning"
    requires_escalation: bool = False
    escalation_after: timedelta | None = None
    evidence_deadline: timedelta | None = None
    retry_window: timedelta | None = None
    remind_before: timedelta | None = None
    evidence_anchor_param: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "sla policy") -> SlaPolicy:
        for key in data:
            if key not in SLA_FIELDS:
                raise ValidationError("unknown field", field=key, source=source)
        policy_id = data.get("sla_policy_id")
        if not isinstance(policy_id, str) or not policy_id:
            raise ValidationError("required, a non-empty string", field="sla_policy_id", source=source)

        def seconds(name: str, *, required: bool = False) -> timedelta | None:
            value = data.get(name)
            if value is None and not required:
                return None
            if not seconds_ok(value, positive=True):
                raise ValidationError(
                    f"must be a positive number of seconds up to {MAX_SECONDS}", field=name, source=source
                )
            assert isinstance(value, int | float)
            return timedelta(seconds=float(value))

        deadline = seconds("deadline_seconds", required=True)
        assert deadline is not None
        severity = data.get("severity", "warning")
        if severity not in {"info", "warning", "critical"}:
            raise ValidationError("must be info, warning or critical", field="severity", source=source)
        escalation = data.get("requires_escalation", False)
        if not isinstance(escalation, bool):
            raise ValidationError("must be true or false", field="requires_escalation", source=source)
        remind = seconds("remind_before_seconds")
        if remind is not None and remind >= deadline:
            raise ValidationError(
                "must be less than deadline_seconds (a reminder comes before the deadline)",
                field="remind_before_seconds",
                source=source,
            )
        anchor = data.get("evidence_anchor_param")
        if anchor is not None:
            if not isinstance(anchor, str) or not _PARAM_NAME.fullmatch(anchor):
                raise ValidationError("must be a parameter name", field="evidence_anchor_param", source=source)
            if data.get("evidence_deadline_seconds") is None:
                raise ValidationError(
                    "only meaningful with evidence_deadline_seconds", field="evidence_anchor_param", source=source
                )
        return cls(
            policy_id,
            deadline,
            severity,
            escalation,
            escalation_after=seconds("escalation_after_seconds"),
            evidence_deadline=seconds("evidence_deadline_seconds"),
            retry_window=seconds("retry_window_seconds"),
            remind_before=remind,
            evidence_anchor_param=anchor,
        )


BUILTIN_RETRY_POLICIES: dict[str, RetryPolicy] = {
    p.retry_policy_id: p
    for p in (
        RetryPolicy("no_retry_v1", RetryStrategy.NONE, 1, timedelta(0), timedelta(0)),
        RetryPolicy("fixed_delay_v1", RetryStrategy.FIXED_DELAY, 3, timedelta(seconds=10), timedelta(seconds=10)),
        # The seed §21 example, verbatim.
        RetryPolicy(
            "standard_exponential_backoff_v1",
            RetryStrategy.EXPONENTIAL_BACKOFF_JITTER,
            5,
            timedelta(seconds=30),
            timedelta(seconds=1800),
            jitter=True,
            dead_letter_after_max_attempts=True,
            escalate_on_final_failure=True,
        ),
        RetryPolicy(
            "manual_review_v1", RetryStrategy.MANUAL_REVIEW_AFTER_N, 3, timedelta(seconds=60), timedelta(seconds=600)
        ),
    )
}

BUILTIN_TIMEOUT_POLICIES: dict[str, TimeoutPolicy] = {
    "default_timeout_v1": TimeoutPolicy("default_timeout_v1", timedelta(hours=1), None),
}
