"""Building a new run from a resolved definition, trigger, scope and snapshot (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.classes import JobClassSpec
from jobgate.core.idempotency import idempotency_key, run_id_for
from jobgate.core.models import ConfigSnapshot, ExecutorSpec, JobDefinition, JobRun, JsonObject, Transition, Trigger
from jobgate.core.policies import RetryPolicy, TimeoutPolicy
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.core.trace import TRACEPARENT_KEY, parse_traceparent


def new_run(
    definition: JobDefinition,
    trigger: Trigger,
    scope: JsonObject,
    snapshot: ConfigSnapshot,
    params: dict[str, str],
    retry: RetryPolicy,
    timeout: TimeoutPolicy | None,
    *,
    now: datetime,
    due_at: datetime | None = None,
    actor: str,
    key: str | None = None,
    code_digest: str | None = None,
    run_id: str | None = None,
) -> tuple[JobRun, tuple[Transition, ...]]:
    """The run a trigger maps to, admitted straight to SCHEDULED, and its two first transitions.

    The idempotency key identifies the run: the store keeps it unique, which turns a second
    creation of the same run into a no-op. The run id is the creation time and part of the key
    (``run_id_for``). ``key`` replaces the computed key where the trigger itself defines
    identity (the retry of a run). ``code_digest`` is the code its approval binds: with what it
    executes and its timeout policy it is recorded in the creation (``binding``), so a replay
    needs nothing but the record. ``run_id`` replaces the id derived from the key and the time
    where the trigger defines the id itself (a retry: ``idempotency.retry_run_id``).
    """
    key = key or idempotency_key(
        job_definition_id=definition.job_definition_id,
        trigger=trigger,
        scope=scope,
        config_digest=snapshot.config_digest,
        policy=definition.idempotency_policy,
    )
    run_id = run_id or run_id_for(key, now)
    due = due_at or now
    queue_deadline = None
    if timeout is not None and timeout.queue_timeout is not None:
        queue_deadline = due + timeout.queue_timeout
    run = JobRun(
        job_run_id=run_id,
        tenant_id=str(scope.get("tenant_id", definition.tenant_id)),
        job_definition_id=definition.job_definition_id,
        definition_version=definition.version,
        definition_digest=definition.digest,
        job_class=definition.job_class,
        trigger_id=trigger.trigger_id,
        trigger_type=trigger.trigger_type,
        idempotency_key=key,
        config_snapshot_id=snapshot.config_snapshot_id,
        config_digest=snapshot.config_digest,
        status=RunStatus.SCHEDULED,
        attempt=0,
        max_attempts=retry.max_attempts,
        priority=definition.priority,
        queue=definition.queue,
        retry_policy=retry.retry_policy_id,
        params=dict(params),
        scope=dict(scope),
        created_at=now,
        due_at=due,
        requested_by=trigger.requested_by,
        queue_deadline_at=queue_deadline,
        execution_timeout=None if timeout is None else timeout.execution_timeout,
        bound_retry_policy=retry.to_dict(),
        traceparent=parse_traceparent(trigger.policy_context.get(TRACEPARENT_KEY)),
    )
    transitions = (
        Transition(
            run_id,
            None,
            RunStatus.CREATED,
            0,
            TransitionReason.CREATED.value,
            actor,
            now,
            # The parameters' digest, recorded with the creation: a replay recomputes it from
            # the run's stored parameters, so parameters edited afterwards do not replay.
            {
                "trigger_type": trigger.trigger_type.value,
                "params_digest": digest(dict(params)),
                "bound": binding(definition, timeout, code_digest),
            },
        ),
        Transition(run_id, RunStatus.CREATED, RunStatus.SCHEDULED, 0, TransitionReason.ADMITTED.value, actor, now),
    )
    return run, transitions


_TRIGGER_NAMES = ("trigger_id", "trigger_type")


def trigger_document(trigger: Trigger) -> JsonObject:
    """The trigger as a run records it (``job_runs.trigger``, sealed with the run's identity).

    Fields without a value (None, an empty payload or policy context) are left out: readers take
    a missing field for None or empty, and every run's row carries this document, so its bytes
    are paid for on every creation, claim and seal (a run row that outgrows a quarter page
    costs the table a page in four)."""
    doc: JsonObject = {
        "trigger_id": trigger.trigger_id,
        "trigger_type": trigger.trigger_type.value,
        "requested_by": trigger.requested_by,
        "reason": trigger.reason,
        "request_id": trigger.request_id,
        "source_event_id": trigger.source_event_id,
        "event_type": trigger.event_type,
        "source_engine_meid": trigger.source_engine_meid,
        "source_engine_cmi": trigger.source_engine_cmi,
        "policy_context": trigger.policy_context,
        "payload": trigger.payload,
        "role": trigger.role,
        "window": None
        if trigger.window is None
        else [isoformat_utc(trigger.window.start), isoformat_utc(trigger.window.end)],
    }
    return {k: v for k, v in doc.items() if k in _TRIGGER_NAMES or (v is not None and v != {})}


def binding(definition: JobDefinition, timeout: TimeoutPolicy | None, code_digest: str | None) -> JsonObject:
    """What a run is bound to beyond its definition's digest and its snapshot: the kind of target
    it executes (handler, runner or registered target), the code digest its approval pins, its
    timeout policy as it stood (the retry policy is bound on the run itself) and, for a class
    declared in jobgate.yaml, that class's declaration (``core.classes``; a built-in class needs
    none). Recorded with the run's creation and sealed with it: "which code, which target, which
    limits" has one answer however the configuration changed since, and a replay reads it from
    the record alone."""
    ex = definition.executor
    target: JsonObject = {"kind": ex.kind}
    for name, value in (("handler", ex.handler), ("runner", ex.runner), ("target", ex.target)):
        if value is not None:
            target[name] = value
    if definition.target_engine_cmi is not None:
        target["cmi"] = definition.target_engine_cmi
    bound: JsonObject = {
        "target": target,
        "code_digest": code_digest,
        "timeout_policy": None if timeout is None else timeout.to_dict(),
    }
    if definition.class_spec is not None:
        bound["job_class"] = definition.class_spec.record()
    return bound


def bound_of(first_detail: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a run's creation recorded it is bound to (``binding``), from its first transition's
    detail; None for runs created before bindings were recorded."""
    bound = None if first_detail is None else first_detail.get("bound")
    return dict(bound) if isinstance(bound, dict) else None


def rebound(transitions: tuple[Transition, ...], code_digest: str | None) -> tuple[Transition, ...]:
    """A new run's transitions with the creation's binding naming ``code_digest``: the code of
    the approval it is admitted under, when that approval changed between preparing the run and
    storing it (the content digest still approved, the code approved anew)."""
    created, *rest = transitions
    bound = {**created.detail["bound"], "code_digest": code_digest}
    return (replace(created, detail={**created.detail, "bound": bound}), *rest)


def bound_class(bound: JsonObject | None) -> JobClassSpec | None:
    """The declared class a binding records (``binding``'s reader); None for a built-in class."""
    return JobClassSpec.from_record((bound or {}).get("job_class"))


def bound_executor(bound: JsonObject | None) -> ExecutorSpec | None:
    """The target a binding names (``binding``'s reader); None when it names none."""
    target = (bound or {}).get("target")
    if not isinstance(target, dict) or not isinstance(target.get("kind"), str):
        return None
    return ExecutorSpec(target["kind"], target.get("handler"), target.get("runner"), target.get("target"))
