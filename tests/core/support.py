"""Builders shared by the core tests: plain functions, a fixed clock, no fixtures.

Every test uses ``NOW`` (a timezone-aware UTC instant) as "the time"; nothing here reads the
real clock, so every decision under test is reproducible.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from jobgate.core.models import (
    ConfigSnapshot,
    ExecutionWindow,
    ExecutorSpec,
    JobClass,
    JobDefinition,
    JobRun,
    Priority,
    Trigger,
    TriggerType,
)
from jobgate.core.policies import RetryPolicy, RetryStrategy
from jobgate.core.states import RunStatus

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
STARTED = NOW - timedelta(seconds=42, milliseconds=500)
RUN_HEX = "0123456789abcdef0123456789abcdef"
RUN_ID = f"TGJOBRUN-{RUN_HEX}"
KEY = "sha256:" + "ab" * 32


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def policy(
    strategy: RetryStrategy = RetryStrategy.EXPONENTIAL_BACKOFF,
    max_attempts: int = 5,
    initial: float = 30,
    maximum: float = 1800,
    **flags: bool,
) -> RetryPolicy:
    """A retry policy with the seed's delays (30 s doubling, capped at 1800 s) unless told otherwise."""
    if strategy is RetryStrategy.NONE:
        max_attempts = 1
    return RetryPolicy(f"test_{strategy.value}", strategy, max_attempts, seconds(initial), seconds(maximum), **flags)


def make_run(**overrides: Any) -> JobRun:
    """A run on its third attempt of five, RUNNING under lease token 7."""
    values: dict[str, Any] = {
        "job_run_id": RUN_ID,
        "tenant_id": "acme",
        "job_definition_id": "payroll.close",
        "definition_version": 3,
        "definition_digest": "sha256:" + "cd" * 32,
        "job_class": JobClass.MAINTENANCE_JOB,
        "trigger_id": "trg-1",
        "trigger_type": TriggerType.CRON,
        "idempotency_key": KEY,
        "config_snapshot_id": "snap-1",
        "config_digest": "sha256:" + "ef" * 32,
        "status": RunStatus.RUNNING,
        "attempt": 3,
        "max_attempts": 5,
        "priority": Priority.NORMAL,
        "queue": "default",
        "retry_policy": "test_exponential_backoff",
        "params": {"period": "2026-02"},
        "scope": {"tenant_id": "acme"},
        "created_at": NOW - timedelta(hours=1),
        "due_at": NOW - timedelta(hours=1),
        "lease_owner": "worker-1",
        "lease_token": 7,
    }
    values.update(overrides)
    return JobRun(**values)


def make_trigger(trigger_type: TriggerType = TriggerType.CRON, trigger_id: str = "trg-1", **overrides: Any) -> Trigger:
    return Trigger(trigger_id=trigger_id, trigger_type=trigger_type, **overrides)


def window(start_hour: int = 0, end_hour: int = 6) -> ExecutionWindow:
    day = datetime(2026, 3, 1, tzinfo=UTC)
    return ExecutionWindow(day + timedelta(hours=start_hour), day + timedelta(hours=end_hour))


def make_definition(**overrides: Any) -> JobDefinition:
    values: dict[str, Any] = {
        "job_definition_id": "payroll.close",
        "version": 3,
        "digest": "sha256:" + "cd" * 32,
        "content": {"job_code": "PAYROLL_CLOSE"},
        "job_code": "PAYROLL_CLOSE",
        "job_class": JobClass.MAINTENANCE_JOB,
        "canonical_name": "payroll close",
        "trigger_type": TriggerType.CRON,
        "priority": Priority.HIGH,
        "retry_policy": "standard_exponential_backoff_v1",
        "timeout_policy": "default_timeout_v1",
        "sla_policy": None,
        "config_profile": "default",
        "executor": ExecutorSpec("python", handler="payroll:close"),
        "queue": "finance",
        "tenant_id": "acme",
    }
    values.update(overrides)
    return JobDefinition(**values)


def make_snapshot(**overrides: Any) -> ConfigSnapshot:
    values: dict[str, Any] = {
        "config_snapshot_id": "snap-1",
        "config_digest": "sha256:" + "ef" * 32,
        "profile": "default",
        "content": {},
        "tenant_id": "acme",
    }
    values.update(overrides)
    return ConfigSnapshot(**values)


def replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)
