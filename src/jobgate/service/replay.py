"""Deterministic replay (seed 000 §53): rebuild a run's record from its recorded inputs by the
same decision code, and compare ``Hash(JobRun_original)`` with ``Hash(JobRun_replay)``.

The inputs are what the run recorded: the definition version it ran (stored content, checked
against its digest, read without today's registries), the configuration snapshot (checked
against its digest), the trigger, the retry policy bound at creation, its binding (target kind,
the code digest its approval pinned, its timeout policy and a declared job class's declaration,
``core.runs.binding``, recorded with its creation and sealed), its creation time and due time,
and for each attempt the
recorded outcome (kind and error code) and when it ended. Creation is redone with
``core.runs.new_run``; each attempt's end with ``core.decide`` (the retry delay is a function
of the idempotency key, so it comes out the same); the other transitions (claims, starts,
cancellations, requeues) are recorded facts, replayed after checking the state machine allows
them. No live condition — today's configuration, today's definition, the clock — enters an
audit replay; ``simulation=True`` binds the current definition and configuration instead, to
see what a run would do now (it is marked as such and never counts as evidence).

What the hash covers (``decision_record``): the run's identity and bindings (id, key,
definition version and digest, snapshot and its digest, retry policy, max attempts, priority,
queue, params) and every transition's (from, to, attempt, reason, next retry), with the final
status, attempt and error code.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.decide import Outcome, OutcomeKind, decide
from jobgate.core.errors import JobgateError, refuse_bytes
from jobgate.core.idempotency import retry_run_id
from jobgate.core.lineage import retry_source
from jobgate.core.models import ExecutionWindow, ExecutorSpec, JobRun, Transition, Trigger, TriggerType
from jobgate.core.policies import TimeoutPolicy
from jobgate.core.runs import bound_class, bound_executor, bound_of, new_run
from jobgate.core.states import ATTEMPT_RETURNED, RunStatus, check_transition
from jobgate.definitions.schema import recorded_definition
from jobgate.service.absent import no_run
from jobgate.service.engine import Engine
from jobgate.service.policies import policies_for, run_retry_policy
from jobgate.service.snapshots import resolve_snapshot

if TYPE_CHECKING:
    pass

RECORD_FIELDS = (
    "job_run_id", "tenant_id", "job_definition_id", "definition_version", "definition_digest", "config_snapshot_id",
    "config_digest", "idempotency_key", "retry_policy", "max_attempts", "priority", "queue", "params", "status",
    "attempt", "error_code",
)  # fmt: skip


@dataclass(frozen=True)
class ReplayReport:
    job_run_id: str
    match: bool
    original_hash: str
    replay_hash: str | None
    first_difference: str | None
    simulation: bool = False
    binding: dict[str, Any] | None = None  # the target, code digest and timeout the run was bound to
    notes: tuple[str, ...] = ()


def decision_record(run: JobRun, transitions: list[Transition]) -> dict[str, Any]:
    def value(name: str) -> Any:
        v = getattr(run, name)
        return v.value if hasattr(v, "value") and not isinstance(v, dict) else v

    record: dict[str, Any] = {name: value(name) for name in RECORD_FIELDS}
    record["params"] = dict(run.params)
    record["transitions"] = [
        [
            None if t.from_status is None else t.from_status.value,
            t.to_status.value,
            t.attempt,
            t.reason,
            t.detail.get("next_retry_at"),
            t.detail.get("params_digest"),
        ]
        for t in transitions
    ]
    return record


def run_hash(run: JobRun, transitions: list[Transition]) -> str:
    return digest(decision_record(run, transitions))


def _trigger(doc: dict[str, Any], run: JobRun) -> Trigger:
    window = None
    if doc.get("window"):
        start, end = (datetime.fromisoformat(x.replace("Z", "+00:00")) for x in doc["window"])
        window = ExecutionWindow(start, end)
    return Trigger(
        trigger_id=doc["trigger_id"],
        trigger_type=TriggerType(doc["trigger_type"]),
        requested_by=doc.get("requested_by"),
        reason=doc.get("reason"),
        source_event_id=doc.get("source_event_id"),
        request_id=doc.get("request_id"),
        event_type=doc.get("event_type"),
        source_engine_meid=doc.get("source_engine_meid"),
        source_engine_cmi=doc.get("source_engine_cmi"),
        window=window,
        policy_context=dict(doc.get("policy_context") or {}),
        payload=dict(doc.get("payload") or {}),
        created_at=run.created_at,
        role=doc["role"] if isinstance(doc.get("role"), str) else None,
    )


def replay(engine: Engine, job_run_id: str, *, tenant_id: str | None = None, simulation: bool = False) -> ReplayReport:
    with engine.store.read(tenant_id=tenant_id) as tx:
        run = tx.run_get(job_run_id, tenant_id)
        if run is None:
            raise no_run(tx, job_run_id, tenant_id)
        transitions = tx.run_transitions(job_run_id)
        trigger_doc = tx.run_trigger(job_run_id) or {}
        if simulation:
            stored = tx.definition_get(run.tenant_id, run.job_definition_id)
        else:
            stored = tx.definition_get(run.tenant_id, run.job_definition_id, run.definition_version)
        snapshot = tx.snapshot_get(run.config_snapshot_id)
    refuse_bytes(vars(run), f"run {job_run_id}")
    for i, t in enumerate(transitions, start=1):
        refuse_bytes(vars(t), f"transition {i} of run {job_run_id}")
    original = run_hash(run, transitions)
    notes: list[str] = []

    def differs(where: str) -> ReplayReport:  # with the notes so far (a simulation says it is one)
        return ReplayReport(job_run_id, False, original, None, where, simulation, _binding(transitions), tuple(notes))

    if stored is None:
        return differs("definition_version: the version the run names is not stored")
    bound = _binding(transitions)
    if simulation:
        notes.append("simulation: today's definition, configuration and policies, not the record")
    if simulation:  # today's definition, configuration and policies: what the run would do now
        try:
            definition = engine.definitions.build(stored)
        except JobgateError as exc:
            return differs(f"definition: today's configuration refuses it ({exc.code}: {exc.message})")
        snapshot = resolve_snapshot(engine.config, definition.config_profile, run.tenant_id)
        policy, timeout = policies_for(engine.config, definition)
    else:
        # An audit replay reads the record alone (seed §53: no live condition): the stored
        # content checked against its digest, the policies and the target as the run bound them.
        try:
            executor = _executor(bound, stored.content)
            definition = recorded_definition(stored.content, stored.digest, executor, bound_class(bound))
        except JobgateError as exc:
            return differs(f"definition_digest: {exc.message}")
        definition = replace(definition, version=stored.version, tenant_id=stored.tenant_id)
        if snapshot is None or digest(snapshot.content) != snapshot.config_digest:
            return differs("config_snapshot: missing, or its content no longer matches its digest")
        if run.bound_retry_policy is None:
            notes.append(f"retry policy {run.retry_policy} was not bound with the run: today's definition of it used")
        policy = run_retry_policy(engine.config, run)
        timeout = _bound_timeout(bound, run, stored.content.get("timeout_policy"))
    created = [t for t in transitions if t.reason in ("created", "admitted")]
    actor = created[0].actor if created else (run.requested_by or "system")
    rebuilt, first = new_run(
        definition,
        _trigger(trigger_doc, run),
        dict(run.scope),
        snapshot,
        dict(run.params),
        policy,
        timeout,
        now=run.created_at,
        due_at=run.due_at,
        actor=actor,
        key=run.idempotency_key,
        code_digest=None if bound is None else bound.get("code_digest"),
        run_id=_retry_id(trigger_doc, run.tenant_id),
    )
    replayed = list(first)
    state: dict[str, Any] = {"status": RunStatus.SCHEDULED, "attempt": 0, "max": rebuilt.max_attempts, "error": None}
    for t in transitions[len(first) :]:
        was: RunStatus = state["status"]
        step = _replay_step(t, state, policy, rebuilt.idempotency_key)
        if step is None:
            recorded = f"{None if t.from_status is None else t.from_status.value} -> {t.to_status.value}"
            return differs(
                f"transitions[{len(replayed)}]: recorded {recorded}; replayed, the run is {was.value} there,"
                f" and {was.value} -> {t.to_status.value} is not a legal move"
            )
        replayed.append(step)
    final = rebuilt.evolve(
        status=state["status"], attempt=state["attempt"], max_attempts=state["max"], error_code=state["error"]
    )
    again = run_hash(final, replayed)
    difference = None if again == original else _first_difference(run, transitions, final, replayed)
    return ReplayReport(job_run_id, difference is None, original, again, difference, simulation, bound, tuple(notes))


def _retry_id(trigger_doc: dict[str, Any], tenant_id: str) -> str | None:
    """A retry's id, which its creation derived from its source run (seed 001 retry contract):
    read from the sealed trigger that says it is a retry, not from the ``retry_of`` column. None
    for any other run, whose id derives from its key and creation time."""
    source = retry_source(trigger_doc)
    return None if source is None else retry_run_id(tenant_id, source)


def _binding(transitions: list[Transition]) -> dict[str, Any] | None:
    """What the run's creation recorded it is bound to (``core.runs.binding``); None for runs
    created before bindings were recorded."""
    return bound_of(transitions[0].detail if transitions else None)


def _executor(bound: dict[str, Any] | None, content: dict[str, Any]) -> ExecutorSpec:
    """The target the run was bound to; for an older run without a binding, what its content
    names (a handler), else unrecorded: the decision replayed does not depend on it."""
    executor = bound_executor(bound)
    if executor is not None:
        return executor
    handler = content.get("handler")
    return ExecutorSpec("python", handler=handler) if isinstance(handler, str) else ExecutorSpec("unrecorded")


def _bound_timeout(bound: dict[str, Any] | None, run: JobRun, policy_id: Any) -> TimeoutPolicy | None:
    """The timeout policy as the run bound it; for an older run, as its columns recorded it (its
    execution timeout, and its queue timeout as the distance from due time to queue deadline)."""
    if bound is not None:
        doc = bound.get("timeout_policy")
        return None if doc is None else TimeoutPolicy.from_dict(dict(doc), source=f"run {run.job_run_id}")
    if not isinstance(policy_id, str):
        return None
    queue = None if run.queue_deadline_at is None else run.queue_deadline_at - run.due_at
    return TimeoutPolicy(policy_id, run.execution_timeout, queue)


def _replay_step(t: Transition, state: dict[str, Any], policy: Any, key: str) -> Transition | None:
    current = state["status"]
    try:
        check_transition(current, t.to_status, job_run_id=t.job_run_id)
    except JobgateError:
        return None
    if current is RunStatus.RUNNING and "outcome" in t.detail:
        # The end of an attempt: the recorded outcome goes through the same decision code.
        outcome = Outcome(OutcomeKind(t.detail["outcome"]), t.detail.get("error_code"))
        d = decide(outcome, policy, idempotency_key=key, attempt=state["attempt"], max_attempts=state["max"], now=t.at)
        detail: dict[str, Any] = {}
        if d.next_retry_at is not None:
            detail["next_retry_at"] = isoformat_utc(d.next_retry_at)
        state["status"] = d.to_status
        state["error"] = outcome.error_code if d.to_status is not RunStatus.COMPLETED else None
        return Transition(t.job_run_id, current, d.to_status, state["attempt"], d.reason.value, t.actor, t.at, detail)
    # A recorded fact: a claim, a start, a cancellation, a requeue, a rescue.
    if t.to_status is RunStatus.RUNNING:
        state["attempt"] += 1
    if t.reason == "requeued":
        state["max"] = state["attempt"] + 1
        state["error"] = None
    if current is RunStatus.RUNNING and t.reason in {r.value for r in ATTEMPT_RETURNED}:
        state["max"] += 1  # the attempt handed back (``core.transitions.returned``)
    if t.detail.get("error_code"):
        state["error"] = t.detail["error_code"]
    state["status"] = t.to_status
    return Transition(t.job_run_id, current, t.to_status, state["attempt"], t.reason, t.actor, t.at, dict(t.detail))


def _first_difference(run: JobRun, transitions: list[Transition], final: JobRun, replayed: list[Transition]) -> str:
    a, b = decision_record(run, transitions), decision_record(final, replayed)
    for name in (*RECORD_FIELDS, "transitions"):
        if a[name] != b[name]:
            if name == "transitions":
                for i, (x, y) in enumerate(zip(a[name], b[name], strict=False)):
                    if x != y:
                        fields = ("from_status", "to_status", "attempt", "reason", "next_retry_at", "params_digest")
                        col = next(k for k, (p, q) in enumerate(zip(x, y, strict=True)) if p != q)
                        return f"transitions[{i}].{fields[col]}: recorded {x[col]!r}, replayed {y[col]!r}"
                return f"transitions: recorded {len(a[name])}, replayed {len(b[name])}"
            return f"{name}: recorded {a[name]!r}, replayed {b[name]!r}"
    return "unknown"


def sample(run_ids: list[str], size: int, seed: str) -> list[str]:
    """A seeded random sample: the same seed and population give the same runs (the seed is
    recorded in the replay job's result, so the sample can be drawn again)."""
    import random

    return sorted(random.Random(seed).sample(sorted(run_ids), min(size, len(run_ids))))
