"""new_run: the run a trigger maps to, admitted to SCHEDULED, with its first two transitions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobgate.core.canonical import digest
from jobgate.core.idempotency import idempotency_key, run_id_for
from jobgate.core.models import JobClass, JobRun, Priority, Transition, TriggerType
from jobgate.core.policies import BUILTIN_RETRY_POLICIES, BUILTIN_TIMEOUT_POLICIES, TimeoutPolicy
from jobgate.core.runs import new_run
from jobgate.core.states import RunStatus, check_transition

from .support import NOW, make_definition, make_snapshot, make_trigger, window

STANDARD = BUILTIN_RETRY_POLICIES["standard_exponential_backoff_v1"]
TIMEOUT = TimeoutPolicy("t", timedelta(minutes=20), timedelta(hours=2))
SCOPE = {"tenant_id": "acme", "eco_number": "ECO-7"}
TRIGGER = make_trigger(TriggerType.BATCH_WINDOW, "trg-1", requested_by="scheduler", window=window())


def build(**overrides: Any) -> tuple[JobRun, tuple[Transition, ...]]:
    args: dict[str, Any] = {
        "definition": make_definition(),
        "trigger": TRIGGER,
        "scope": SCOPE,
        "snapshot": make_snapshot(),
        "params": {"period": "2026-02"},
        "retry": STANDARD,
        "timeout": TIMEOUT,
        "now": NOW,
        "actor": "engine",
    }
    args.update(overrides)
    return new_run(**args)


def test_new_run_fields() -> None:
    run, _ = build()
    key = idempotency_key(
        job_definition_id="payroll.close",
        trigger=TRIGGER,
        scope=SCOPE,
        config_digest=make_snapshot().config_digest,
    )
    assert run.idempotency_key == key
    assert run.job_run_id == run_id_for(key, NOW)
    assert run.status is RunStatus.SCHEDULED
    assert (run.attempt, run.max_attempts, run.retry_policy) == (0, 5, "standard_exponential_backoff_v1")
    assert (run.tenant_id, run.job_definition_id, run.definition_version) == ("acme", "payroll.close", 3)
    assert (run.job_class, run.priority, run.queue) == (JobClass.MAINTENANCE_JOB, Priority.HIGH, "finance")
    assert (run.trigger_id, run.trigger_type, run.requested_by) == (
        "trg-1",
        TriggerType.BATCH_WINDOW,
        "scheduler",
    )
    assert (run.config_snapshot_id, run.config_digest) == ("snap-1", "sha256:" + "ef" * 32)
    assert run.definition_digest == make_definition().digest
    assert (run.params, run.scope) == ({"period": "2026-02"}, SCOPE)
    assert (run.created_at, run.due_at) == (NOW, NOW)
    assert run.queue_deadline_at == NOW + timedelta(hours=2)
    assert run.execution_timeout == timedelta(minutes=20)
    assert (run.lease_token, run.lease_owner, run.started_at, run.next_retry_at) == (0, None, None, None)


def test_new_run_transitions() -> None:
    run, transitions = build()
    created, admitted = transitions
    assert (created.from_status, created.to_status, created.reason) == (None, RunStatus.CREATED, "created")
    assert {k: v for k, v in created.detail.items() if k != "bound"} == {
        "trigger_type": "batch_window",
        "params_digest": digest(dict(run.params)),
    }
    assert created.detail["bound"]["code_digest"] is None  # build() passes no approval's code
    assert created.detail["bound"]["target"]["kind"] in ("python", "command", "http")
    assert (admitted.from_status, admitted.to_status, admitted.reason) == (
        RunStatus.CREATED,
        RunStatus.SCHEDULED,
        "admitted",
    )
    for t in transitions:
        assert (t.job_run_id, t.attempt, t.actor, t.at) == (run.job_run_id, 0, "engine", NOW)
    check_transition(RunStatus.CREATED, RunStatus.SCHEDULED)
    assert admitted.to_status is run.status


def test_building_twice_gives_the_same_run() -> None:
    assert build() == build()


def test_different_request_gives_a_different_run() -> None:
    other = make_trigger(TriggerType.BATCH_WINDOW, "trg-1", window=window(6, 12))
    assert build()[0].job_run_id != build(trigger=other)[0].job_run_id
    assert build()[0].job_run_id != build(snapshot=make_snapshot(config_digest="sha256:" + "00" * 32))[0].job_run_id


def test_due_at_and_queue_deadline() -> None:
    due = NOW + timedelta(minutes=5)
    run, _ = build(due_at=due)
    assert run.due_at == due
    assert run.queue_deadline_at == due + timedelta(hours=2)
    assert run.created_at == NOW


@pytest.mark.parametrize(
    "timeout",
    [None, TimeoutPolicy("t", None, None), BUILTIN_TIMEOUT_POLICIES["default_timeout_v1"]],
    ids=["none", "empty", "default"],
)
def test_no_queue_timeout_no_deadline(timeout: TimeoutPolicy | None) -> None:
    run, _ = build(timeout=timeout)
    assert run.queue_deadline_at is None
    assert run.execution_timeout == (None if timeout is None else timeout.execution_timeout)


def test_tenant_comes_from_scope_else_definition() -> None:
    assert build(scope={"tenant_id": "globex"})[0].tenant_id == "globex"
    assert build(scope={"eco_number": "ECO-7"})[0].tenant_id == "acme"


def test_max_attempts_is_bound_from_the_policy() -> None:
    assert build(retry=BUILTIN_RETRY_POLICIES["no_retry_v1"])[0].max_attempts == 1
    assert build(retry=BUILTIN_RETRY_POLICIES["manual_review_v1"])[0].max_attempts == 3


def test_run_does_not_alias_the_callers_dicts() -> None:
    params = {"period": "2026-02"}
    scope = dict(SCOPE)
    run, _ = build(params=params, scope=scope)
    params["period"] = "changed"
    scope["eco_number"] = "changed"
    assert run.params == {"period": "2026-02"}
    assert run.scope == SCOPE
