"""Starting, advancing and cancelling workflow runs: the thin I/O edge around ``plan``.

A workflow run is started through the same gates as a job run (approval of its exact content,
safe mode, trust gates, the scheduler policy), and every definition its steps name must exist
and be approved before anything is stored: a workflow that could only fail half way is refused
at the door. Advancing reads the workflow and its finished step runs, asks ``plan`` what
follows, prepares the step runs that must start (each through the gates again), and writes
everything in one transaction guarded by the workflow's version.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple

from jobgate.core import events, transitions
from jobgate.core.canonical import digest
from jobgate.core.errors import ConflictError, GovernanceRefusal, JobgateError, NotFoundError, ValidationError
from jobgate.core.governance import Moment
from jobgate.core.idempotency import check_client_key, client_request_key
from jobgate.core.models import ConfigSnapshot, JobDefinition, Scope, TriggerType
from jobgate.core.params import check_text
from jobgate.core.records import StepRecord, WorkflowRecord, WorkflowTransition, WorkflowUpdate
from jobgate.core.states import RunStatus
from jobgate.service import audit, control
from jobgate.service.admission import AdmissionBatch, refusal_event
from jobgate.service.engine import Engine
from jobgate.service.gates import AttemptFacts, AttemptGate
from jobgate.service.pipeline import same_params, validate_preconditions
from jobgate.service.submission import PreparedSubmission, SubmitRequest
from jobgate.store.sqlstore import StoreTx
from jobgate.workflows.plan import (
    WORKFLOW_ACTIVE,
    Phase,
    Plan,
    RunOutcome,
    StartRun,
    StepChange,
    StepState,
    StepStatus,
    StopRun,
    WorkflowChange,
    WorkflowState,
    plan,
)
from jobgate.workflows.spec import WorkflowSpec, workflow_spec_of

log = logging.getLogger("jobgate.workflows")
COORDINATOR = "workflow-coordinator"
_TERMINAL_EVENTS = {
    RunStatus.COMPLETED: events.EventType.WORKFLOW_COMPLETED,
    RunStatus.FAILED: events.EventType.WORKFLOW_FAILED,
    RunStatus.CANCELLED: events.EventType.WORKFLOW_CANCELLED,
    RunStatus.ESCALATED: events.EventType.WORKFLOW_ESCALATED,
}


@dataclass(frozen=True)
class StartWorkflow:
    job_definition_id: str
    params: Mapping[str, Any] = field(default_factory=dict)
    scope: Scope = field(default_factory=Scope)
    requested_by: str | None = None
    reason: str | None = None
    client_key: str | None = None  # a caller's idempotency key: the same key finds the same workflow run
    trigger_run_id: str | None = None  # the job run that started it (a workflow definition fired as a job)
    trigger_type: TriggerType = TriggerType.MANUAL
    role: str | None = None
    definition_version: int | None = None  # the trigger run's version (a workflow fired as a job)
    traceparent: str | None = None  # the caller's W3C trace context: the steps join that trace
    # Who reviewed the trigger run (an approved four-eyes request): the workflow going on is
    # judged as the reviewed run it was started by (safe mode's manual review).
    reviewed_by: str | None = None


@dataclass(frozen=True)
class WorkflowView:
    """A workflow run, its steps in definition order and its transitions (seed 000 §44)."""

    record: WorkflowRecord
    steps: list[StepRecord]
    transitions: list[WorkflowTransition]
    # Each step's run's own status, by run id: a step RUNNING whose run is HELD (a gate) or
    # waiting in the queue is not running, and a reader should not have to open the run to see it.
    run_statuses: dict[str, str] = field(default_factory=dict)

    @property
    def current_step(self) -> str | None:
        running = self.running_steps
        return running[0] if running else None

    @property
    def running_steps(self) -> list[str]:
        return [s.step_id for s in self.steps if s.status in ("RUNNING", "STOPPING", "COMPENSATING")]

    @property
    def completed_steps(self) -> list[str]:
        """Steps completed and standing, in the order they completed (a compensated one is not)."""
        done = [s for s in self.steps if s.status == "COMPLETED"]
        return [s.step_id for s in sorted(done, key=lambda s: s.completed_order or 0)]

    @property
    def remaining_steps(self) -> list[str]:
        return [s.step_id for s in self.steps if s.status == "PENDING"]


def is_workflow(definition: JobDefinition) -> bool:
    return "workflow" in definition.content


def spec_for(definition: JobDefinition) -> WorkflowSpec:
    return workflow_spec_of(definition.content, definition.job_definition_id)


# ---------------------------------------------------------------------- start
def start_workflow(
    engine: Engine, request: StartWorkflow, *, actor: str, quota: Callable[[int], None] | None = None
) -> tuple[WorkflowRecord, bool]:
    """Start a workflow run, or find the one this request already started. Refusals store nothing.
    ``quota``: asked, with the number of its steps (each a run), before a new workflow run is
    started (the API's daily run quota), never for a repeat, which is answered first."""
    check_client_key(request.client_key)  # as a run's key is judged
    check_text(request.reason, "reason", lines=True)
    check_text(request.requested_by, "requested_by")
    now = engine.clock.now()
    tenant = request.scope.tenant_id
    submit = SubmitRequest(
        job_definition_id=request.job_definition_id,
        trigger_type=request.trigger_type,
        params=dict(request.params),
        scope=request.scope,
        requested_by=request.requested_by,
        reason=request.reason,
        client_key=request.client_key,
        role=request.role,
    )
    with engine.store.read() as tx:
        key = _repeat_key(request)
        found = None if key is None else tx.workflow_by_key(key)
        if found is not None:  # the same request again: the workflow run it started, whatever changed since
            if found.job_definition_id != request.job_definition_id:
                raise ConflictError(
                    "this key already started a workflow run of another definition", field="Idempotency-Key"
                )
            if not _same_start(engine, tx, found, request):
                raise ConflictError(
                    f"this key already started workflow run {found.workflow_run_id} with other parameters or"
                    " scope: use a new key for a new request",
                    field="Idempotency-Key",
                )
            return found, False
        definition = engine.definition(tx, tenant, request.job_definition_id, request.definition_version)
        if not is_workflow(definition):
            raise ValidationError(
                f"{definition.job_definition_id} is a job, not a workflow: submit it as a run",
                field="job_definition_id",
            )
        spec = spec_for(definition)
        if quota is not None:
            quota(len(spec.steps))
        policy = engine.admission.scheduler_policy(actor=actor, now=now)
        period = None
        try:
            if request.trigger_run_id is None:  # a trigger run passed these gates when it was created
                _, period = engine.admission.check(
                    tx, definition, submit, now, moment=Moment.TRIGGER, batch=AdmissionBatch(policy)
                )
            pinned = engine.admission.check_workflow_steps(tx, definition, tenant, {}, submit.params)
        except GovernanceRefusal as exc:
            engine.admission.record_refusal(submit, exc, actor=actor, now=now)
            raise
        params = validate_preconditions(definition, submit)
        snapshot = engine.pipeline.resolve_config(definition, request.scope, period, policy)
    existing_key = key or digest(
        {"tenant_id": tenant, "workflow": definition.job_definition_id, "request": uuid.uuid4().hex}
    )
    workflow_run_id = f"TGWF-{now.year}-{uuid.uuid4().hex[:20]}"
    trigger = {
        "trigger_type": request.trigger_type.value,
        "requested_by": request.requested_by,
        "reason": request.reason,
        "trigger_run_id": request.trigger_run_id,
        "client_key": request.client_key,
        "role": request.role,  # the scheduler policy's ceilings apply to the steps as to the starter
        "reviewed_by": request.reviewed_by,
        "traceparent": request.traceparent,
        # The exact version (and content digest) of each step's definition at the start: the
        # steps run these, so a later edit of a step's definition cannot change a running workflow.
        "step_definitions": pinned,
    }
    record = WorkflowRecord(
        workflow_run_id=workflow_run_id,
        tenant_id=tenant,
        idempotency_key=existing_key,
        job_definition_id=definition.job_definition_id,
        definition_version=definition.version,
        definition_digest=definition.digest,
        job_class=str(definition.job_class),
        status=RunStatus.SCHEDULED,
        phase=Phase.FORWARD.value,
        params=params,
        scope=request.scope.as_dict(),
        trigger=trigger,
        config_snapshot_id=snapshot.config_snapshot_id,
        config_digest=snapshot.config_digest,
        requested_by=request.requested_by,
        created_at=now,
    )
    steps = [StepRecord(workflow_run_id, s.step_id, tenant, s.position, StepStatus.PENDING.value) for s in spec.steps]
    transitions = [
        WorkflowTransition(workflow_run_id, 1, None, None, RunStatus.CREATED.value, "created", actor, now),
        WorkflowTransition(
            workflow_run_id, 2, None, RunStatus.CREATED.value, RunStatus.SCHEDULED.value, "admitted", actor, now
        ),
    ]
    try:
        with engine.store.write() as tx:
            if request.trigger_run_id is None:
                # Judged again under the write: a revocation or safe mode switched on that
                # committed after the read-only checks refuses it too, and the run binds the
                # safe-mode period in force now (its overrides, in the snapshot).
                _, period = engine.admission.check(
                    tx, definition, submit, now, moment=Moment.TRIGGER, batch=AdmissionBatch(policy)
                )
                snapshot = engine.pipeline.resolve_config(definition, request.scope, period, policy)
                record = replace(
                    record, config_snapshot_id=snapshot.config_snapshot_id, config_digest=snapshot.config_digest
                )
            return _insert_started(tx, request, record, steps, transitions, snapshot, existing_key, pinned, actor, now)
    except GovernanceRefusal as exc:
        engine.admission.record_refusal(submit, exc, actor=actor, now=now)
        raise


def _insert_started(
    tx: StoreTx,
    request: StartWorkflow,
    record: WorkflowRecord,
    steps: list[StepRecord],
    transitions: list[WorkflowTransition],
    snapshot: ConfigSnapshot,
    existing_key: str,
    pinned: Any,
    actor: str,
    now: datetime,
) -> tuple[WorkflowRecord, bool]:
    """Store a started workflow run with its steps, transitions, event and audit entry (or find
    the one a concurrent start with the same key stored first)."""
    tenant = record.tenant_id
    workflow_run_id = record.workflow_run_id
    definition_id, definition_digest = record.job_definition_id, record.definition_digest
    tx.snapshot_put(snapshot, now)
    if not tx.workflow_insert(record, steps, transitions):
        again = tx.workflow_by_key(existing_key)
        assert again is not None
        return again, False
    _publish(tx, record, events.EventType.WORKFLOW_STARTED, RunStatus.SCHEDULED, None, now)
    audit.record(
        tx,
        audit.event(
            tenant,
            actor,
            "workflow.started",
            "workflow",
            workflow_run_id,
            now,
            reason=request.reason,
            payload={
                "job_definition_id": definition_id,
                "definition_digest": definition_digest,
                "config_digest": snapshot.config_digest,
                "idempotency_key": existing_key,
                "step_definitions": pinned,
            },
        ),
    )
    return record, True


def _same_start(engine: Engine, tx: StoreTx, found: WorkflowRecord, request: StartWorkflow) -> bool:
    """Whether ``request`` asks for what ``found`` was started with: the same scope and, value by
    value, the same parameters (as its definition version reads them: a default left out is the
    default, ``+007`` the integer ``7``), as a run's repeated key is judged."""
    if found.scope != request.scope.as_dict():
        return False
    return dict(request.params) == dict(found.params) or same_params(
        engine.definitions, tx, found.tenant_id, found.job_definition_id, request.params, found.params,
        version=found.definition_version,
    )  # fmt: skip


def _repeat_key(request: StartWorkflow) -> str | None:
    """The key that makes a start repeatable: the caller's key, or the trigger run's id."""
    tenant = request.scope.tenant_id
    if request.client_key is not None:
        return client_request_key(tenant, "workflow:" + request.client_key)
    if request.trigger_run_id is not None:
        return digest({"tenant_id": tenant, "workflow_of_run": request.trigger_run_id})
    return None


def step_run_key(tenant_id: str, workflow_run_id: str, step_id: str, *, compensation: bool) -> str:
    """A step run's idempotency key: the workflow and the step alone, in a shape no caller's key
    (``client_request_key``) can take."""
    return digest(
        {
            "tenant_id": tenant_id,
            "workflow_run_id": workflow_run_id,
            "workflow_step": step_id,
            "compensation": compensation,
        }
    )


# ---------------------------------------------------------------------- cancel
def cancel_workflow(
    engine: Engine, workflow_run_id: str, *, actor: str, tenant_id: str | None = None
) -> WorkflowRecord:
    """Ask for the workflow to stop; the coordinator cancels pending steps and stops running ones.

    Refused while it compensates: undoing half a compensation would leave the saga neither done
    nor undone; it ends FAILED (or ESCALATED) on its own. Refused too once a step failed: the
    workflow follows its failure policy from there (``workflows.plan`` ignores a cancel then), so
    a cancel accepted would never land."""
    now = engine.clock.now()
    with engine.store.write(tenant_id=tenant_id) as tx:
        record = tx.workflow_get(workflow_run_id, tenant_id)
        if record is None:
            raise NotFoundError(f"no workflow run {workflow_run_id!r}", field="workflow_run_id")
        if record.phase == Phase.COMPENSATING.value and record.status in WORKFLOW_ACTIVE:
            raise ConflictError("the workflow run is compensating; it cannot be cancelled now", field="status")
        failing = [s for s in tx.workflow_steps(workflow_run_id) if s.status in ("FAILED", "STOPPING")]
        if failing and record.status in WORKFLOW_ACTIVE:
            raise ConflictError(
                f"the workflow run is failing (step {failing[0].step_id!r} is {failing[0].status}): it follows its"
                " failure policy and cannot be cancelled now",
                field="status",
            )
        if record.status not in WORKFLOW_ACTIVE or not tx.workflow_request_cancel(workflow_run_id):
            current = tx.workflow_get(workflow_run_id, tenant_id)
            status = (current or record).status.value
            raise ConflictError(f"workflow run is {status}; only an active one can be cancelled", field="status")
        audit.record(
            tx, audit.event(record.tenant_id, actor, "workflow.cancel_requested", "workflow", workflow_run_id, now)
        )
    advance(engine, workflow_run_id, actor=actor)
    return workflow_view(engine, workflow_run_id, tenant_id).record


# ---------------------------------------------------------------------- read
def workflow_view(
    engine: Engine, workflow_run_id: str, tenant_id: str | None = None, *, transitions: bool = True
) -> WorkflowView:
    """The workflow run, scoped to ``tenant_id`` (row-level security binds too on PostgreSQL)."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        record = tx.workflow_get(workflow_run_id, tenant_id)
        if record is None:
            raise NotFoundError(f"no workflow run {workflow_run_id!r}", field="workflow_run_id")
        history = tx.workflow_transitions(workflow_run_id) if transitions else []
        steps = tx.workflow_steps(workflow_run_id)
        ids = [i for s in steps for i in (s.job_run_id, s.compensation_run_id) if i is not None]
        statuses = {r.job_run_id: r.status.value for r in tx.runs_get(ids)} if ids else {}
        return WorkflowView(record, steps, history, statuses)


# ---------------------------------------------------------------------- advance
def state_of(record: WorkflowRecord, steps: Sequence[StepRecord]) -> WorkflowState:
    return WorkflowState(
        workflow_run_id=record.workflow_run_id,
        tenant_id=record.tenant_id,
        status=record.status,
        phase=Phase(record.phase),
        params=dict(record.params),
        steps={
            s.step_id: StepState(
                s.step_id,
                StepStatus(s.status),
                s.job_run_id,
                s.compensation_run_id,
                s.outputs,
                s.completed_order,
                s.error_code,
            )
            for s in steps
        },
        cancel_requested=record.cancel_requested,
        error_code=record.error_code,
        error_message=record.error_message,
    )


def advance(engine: Engine, workflow_run_id: str, *, actor: str = COORDINATOR) -> bool:
    """Decide and apply what follows for one workflow; False when nothing did (or another
    coordinator won the race, in which case it applied the same decision)."""
    for _ in range(5):
        outcome = _advance_once(engine, workflow_run_id, actor)
        if outcome is not None:
            return outcome
    log.warning(
        "workflow %s: lost the advance race five times",
        workflow_run_id,
        extra={"action": "workflow_contended", "workflow_run_id": workflow_run_id},
    )
    return False


@dataclass(frozen=True)
class UnreadableSpec:
    """Why the workflow block a run started with cannot be read now."""

    code: str
    message: str


def stored_spec(tx: StoreTx, record: WorkflowRecord) -> WorkflowSpec | UnreadableSpec:
    """The spec of the exact content the workflow run started with, read as stored (its digest
    pins it) rather than re-validated against today's configuration: removing a retry policy
    or a target must not wedge the workflows already running (their steps meet today's
    configuration when they start, and are refused there). ``UnreadableSpec`` when the stored
    content no longer matches its digest, or when this version's reading of workflow blocks
    refuses what an earlier one stored (a condition literal that is no JSON, say): the
    workflow is then handed to a person, not retried at every pass."""
    from jobgate.definitions.schema import content_digest

    stored = tx.definition_get(record.tenant_id, record.job_definition_id, record.definition_version)
    if stored is None or content_digest(stored.content) != record.definition_digest:
        return UnreadableSpec(
            "definition_digest_mismatch",
            "the stored workflow definition no longer matches the digest the run started with",
        )
    try:
        return workflow_spec_of(stored.content, record.job_definition_id)
    except ValidationError as exc:
        where = f" ({exc.field})" if exc.field else ""
        return UnreadableSpec(
            "definition_unreadable", f"the stored workflow block cannot be read{where}: {exc.message}"
        )


def _advance_once(engine: Engine, workflow_run_id: str, actor: str) -> bool | None:
    now = engine.clock.now()
    with engine.store.read() as tx:
        record = tx.workflow_get(workflow_run_id)
        if record is None:
            return False
        steps = tx.workflow_steps(workflow_run_id)
        if record.status not in WORKFLOW_ACTIVE:  # ended from outside (the SLA monitor's escalation)
            return _halt_ended(engine, record, steps, actor, now)
        spec = stored_spec(tx, record)
        watched = [s.job_run_id for s in steps if s.status in ("RUNNING", "STOPPING") and s.job_run_id]
        watched += [s.compensation_run_id for s in steps if s.status == "COMPENSATING" and s.compensation_run_id]
        outcomes = {
            r.job_run_id: RunOutcome(r.status, r.result, r.error_code, ended_at=r.ended_at)
            for r in tx.runs_get(watched)
            if r.status.is_terminal
        }
        # A workflow the admission rule would no longer let run (its approval revoked, its
        # definition suspended or retired, its class suspended by safe mode) starts nothing
        # more: its running steps finish; the next step is refused, and the failure policy applies.
        refusal = _continuation_refusal(engine, tx, record, now)
    if isinstance(spec, UnreadableSpec):
        return _escalate_unreadable(engine, record, steps, actor, now, spec)
    state = state_of(record, steps)
    prepared: dict[tuple[str, bool], PreparedSubmission] = {}
    refusals: Refusals = {}
    decided = plan(spec, state, outcomes)
    for _ in range(len(spec.steps) + 1):
        if refusal is None:
            refused = _prepare_starts(engine, record, decided.starts, prepared, refusals, actor, now)
        else:
            refused = _refuse_starts(record, decided.starts, refusals, refusal)
        if not refused:
            break
        outcomes = {**outcomes, **refused}
        decided = plan(spec, state, outcomes)
    if decided.empty:
        return False
    with engine.store.write() as tx:
        locked = tx.workflow_lock(workflow_run_id)
        again = _continuation_refusal(engine, tx, record, now)
        if locked is None or locked.version != record.version or _code_of(again) != _code_of(refusal):
            return None  # someone advanced it (or a gate changed) meanwhile: decide again
        wanted = [prepared[(s.step_id, s.compensation)] for s in decided.starts]
        results = engine.pipeline.create(tx, wanted, now)
        run_ids = {(s.step_id, s.compensation): r.run.job_run_id for s, r in zip(decided.starts, results, strict=True)}
        update = _update(record, steps, decided, run_ids, actor, now, next_seq=_next_seq(tx, workflow_run_id))
        if not tx.workflow_apply(update):
            return None
        _stop_runs(tx, decided, actor, now)
        _announce(tx, record, decided, now)
        # A refused step start is a material fact: audited with the decision it caused, once
        # (a coordinator that lost the race above wrote nothing).
        landed = {
            (c.step_id, c.reason == "compensation_refused")
            for c in decided.changes
            if isinstance(c, StepChange) and c.reason in ("step_refused", "compensation_refused")
        }
        for key, (request, exc) in refusals.items():
            if key in landed:
                audit.record(tx, refusal_event(request, exc, actor=actor, now=now))
    return True


class _WorkflowAsRun(NamedTuple):
    """A workflow run as the admission rule's gate reads a run (``gates.AttemptGate``)."""

    job_run_id: str
    tenant_id: str
    job_definition_id: str
    definition_version: int
    trigger_type: str
    reviewed_by: str | None


def _continuation_refusal(
    engine: Engine, tx: StoreTx, record: WorkflowRecord, now: datetime
) -> GovernanceRefusal | None:
    """The admission rule for a workflow run going on, as for a held run looked at again
    (``Moment.RELEASE``: lifecycle, the approval of the content it started with, signature,
    safe mode; its steps are each judged as they start, the scheduler policy included)."""
    trigger = record.trigger.get("trigger_type")
    reviewed_by = record.trigger.get("reviewed_by")
    as_run = _WorkflowAsRun(
        record.workflow_run_id,
        record.tenant_id,
        record.job_definition_id,
        record.definition_version,
        trigger if isinstance(trigger, str) and trigger in _TRIGGER_TYPES else TriggerType.WORKFLOW.value,
        reviewed_by if isinstance(reviewed_by, str) else None,
    )
    verdict = AttemptGate(AttemptFacts(engine), tx, now, moment=Moment.RELEASE).verdict(as_run)
    return None if verdict.admitted else verdict.refusal()


_TRIGGER_TYPES = frozenset(t.value for t in TriggerType)


def _code_of(refusal: GovernanceRefusal | None) -> str | None:
    return None if refusal is None else refusal.code


def _escalate_unreadable(
    engine: Engine,
    record: WorkflowRecord,
    steps: Sequence[StepRecord],
    actor: str,
    now: datetime,
    why: UnreadableSpec,
) -> bool | None:
    """The stored definition cannot be read as the workflow started with it: nothing more may
    start from it; a human must look (ESCALATED), and replay will name the difference."""
    escalate = WorkflowChange(
        record.status, RunStatus.ESCALATED, "definition_unreadable", Phase(record.phase), why.code, why.message
    )
    return _halt(engine, record, steps, actor, now, then=escalate)


def _halt_ended(
    engine: Engine, record: WorkflowRecord, steps: Sequence[StepRecord], actor: str, now: datetime
) -> bool | None:
    """A workflow ended by someone else (ESCALATED by the SLA monitor) starts nothing more: its
    pending steps are cancelled and its running ones stopped, as its own failure would do."""
    if not any(s.status in _OPEN for s in steps):
        return False
    return _halt(engine, record, steps, actor, now)


_OPEN = ("PENDING", "RUNNING", "STOPPING", "COMPENSATING")


def _halt(
    engine: Engine,
    record: WorkflowRecord,
    steps: Sequence[StepRecord],
    actor: str,
    now: datetime,
    *,
    then: WorkflowChange | None = None,
) -> bool | None:
    """Cancel every open step and stop its run (a compensating step: its compensation run),
    then apply ``then``, in one compare-and-set; None when another advance won the race."""
    open_steps = [s for s in steps if s.status in _OPEN]
    changes: list[StepChange | WorkflowChange] = [
        StepChange(s.step_id, StepStatus(s.status), StepStatus.CANCELLED, "workflow_halted") for s in open_steps
    ]
    if then is not None:
        changes.append(then)
    stops = tuple(
        StopRun(s.step_id, run_id)
        for s in open_steps
        if (run_id := s.compensation_run_id if s.status == "COMPENSATING" else s.job_run_id) is not None
    )
    decided = Plan(tuple(changes), (), stops)
    with engine.store.write() as tx:
        locked = tx.workflow_lock(record.workflow_run_id)
        if locked is None or locked.version != record.version:
            return None
        update = _update(record, steps, decided, {}, actor, now, next_seq=_next_seq(tx, record.workflow_run_id))
        if not tx.workflow_apply(update):
            return None
        _stop_runs(tx, decided, actor, now)
        _announce(tx, record, decided, now)
    return True


def _next_seq(tx: StoreTx, workflow_run_id: str) -> int:
    return tx.workflow_next_seq(workflow_run_id)


Refusals = dict[tuple[str, bool], tuple[SubmitRequest, GovernanceRefusal]]


def _step_request(record: WorkflowRecord, start: StartRun) -> SubmitRequest:
    """A step's run: the definition version pinned at the workflow's start, the starter's role
    (policy ceilings), its trace, and a key no caller can choose."""
    suffix = ":compensate" if start.compensation else ""
    pinned = (record.trigger.get("step_definitions") or {}).get(start.job)
    version = pinned.get("version") if isinstance(pinned, dict) else None
    traceparent = record.trigger.get("traceparent")
    role = record.trigger.get("role")
    return SubmitRequest(
        job_definition_id=start.job,
        trigger_type=TriggerType.WORKFLOW,
        params=dict(start.params),
        scope=Scope.from_dict(record.scope),
        requested_by=record.requested_by,
        reason=f"workflow {record.workflow_run_id} step {start.step_id}{suffix}",
        run_key=step_run_key(record.tenant_id, record.workflow_run_id, start.step_id, compensation=start.compensation),
        workflow_run_id=record.workflow_run_id,
        retry_policy=start.retry_policy,
        timeout_policy=start.timeout_policy,
        definition_version=version if isinstance(version, int) else None,
        role=role if isinstance(role, str) else None,
        policy_context={"traceparent": traceparent} if isinstance(traceparent, str) else {},
    )


def _refuse_starts(
    record: WorkflowRecord, starts: Sequence[StartRun], refusals: Refusals, refusal: GovernanceRefusal
) -> dict[str, RunOutcome]:
    """Every step start refused because the workflow itself may no longer run (``refusal``):
    each fails its step and, like a refusal at preparation, is audited by the coordinator whose
    decision lands."""
    refused: dict[str, RunOutcome] = {}
    for start in starts:
        exc = GovernanceRefusal(
            f"workflow {record.job_definition_id} may not go on: {refusal.message}",
            code=refusal.code,
            rule=refusal.rule,
            field=refusal.field,
        )
        refused[f"refused:{start.step_id}"] = RunOutcome(RunStatus.FAILED, None, exc.code, exc.message)
        # Audited against the workflow's definition, whose approval (or state) refused it: the
        # step's own definition may well be approved still.
        as_workflow = replace(_step_request(record, start), job_definition_id=record.job_definition_id)
        refusals[(start.step_id, start.compensation)] = (as_workflow, exc)
    return refused


def _prepare_starts(
    engine: Engine,
    record: WorkflowRecord,
    starts: Sequence[StartRun],
    prepared: dict[tuple[str, bool], PreparedSubmission],
    refusals: Refusals,
    actor: str,
    now: datetime,
) -> dict[str, RunOutcome]:
    """Prepare the step runs through the engine's gates, admitted one by one into a growing
    batch so the batch's quotas count every step admitted before it; a refused one fails its
    step. Refusals are not audited here: only the coordinator whose decision lands does it."""
    todo = [s for s in starts if (s.step_id, s.compensation) not in prepared]
    if not todo:
        return {}
    accepted: list[tuple[StartRun, SubmitRequest]] = []
    batch: list[PreparedSubmission] = []
    refused: dict[str, RunOutcome] = {}
    for start in todo:
        request = _step_request(record, start)
        try:
            batch = engine.pipeline.prepare([r for _, r in accepted] + [request], now=now, actor=actor, record=False)
        except JobgateError as exc:
            log.warning(
                "workflow %s: step %s refused: %s",
                record.workflow_run_id,
                start.step_id,
                exc,
                extra={"action": "workflow_step_refused", "workflow_run_id": record.workflow_run_id},
            )
            refused[f"refused:{start.step_id}"] = RunOutcome(
                RunStatus.FAILED, None, getattr(exc, "code", None) or "refused", str(exc)
            )
            if isinstance(exc, GovernanceRefusal):
                refusals[(start.step_id, start.compensation)] = (request, exc)
            continue
        accepted.append((start, request))
    for (start, _), made in zip(accepted, batch, strict=True):
        prepared[(start.step_id, start.compensation)] = made
    return refused


def _update(
    record: WorkflowRecord,
    steps: Sequence[StepRecord],
    decided: Plan,
    run_ids: Mapping[tuple[str, bool], str],
    actor: str,
    now: datetime,
    *,
    next_seq: int,
) -> WorkflowUpdate:
    by_id = {s.step_id: s for s in steps}
    values: dict[str, Any] = {}
    transitions: list[WorkflowTransition] = []
    seq = next_seq
    advance = record.version + 1  # the version this advance writes: replay groups an advance's changes by it
    for change in decided.changes:
        if isinstance(change, WorkflowChange):
            values["status"] = change.to_status
            values["phase"] = change.phase.value
            if change.error_code is not None:
                values["error_code"] = change.error_code
            if change.error_message is not None:
                values["error_message"] = change.error_message
            if change.to_status is RunStatus.RUNNING and record.started_at is None:
                values["started_at"] = now
            if change.to_status not in WORKFLOW_ACTIVE:
                values["ended_at"] = now
            detail: dict[str, Any] = {"advance": advance}
            if change.error_code:
                detail["error_code"] = change.error_code
            transitions.append(
                WorkflowTransition(
                    record.workflow_run_id,
                    seq,
                    None,
                    change.from_status.value,
                    change.to_status.value,
                    change.reason,
                    actor,
                    now,
                    detail,
                )
            )
        else:
            by_id[change.step_id] = _step_after(by_id[change.step_id], change, run_ids, now)
            transitions.append(
                WorkflowTransition(
                    record.workflow_run_id,
                    seq,
                    change.step_id,
                    change.from_status.value,
                    change.to_status.value,
                    change.reason,
                    actor,
                    now,
                    {**_step_detail(change, by_id[change.step_id]), "advance": advance},
                )
            )
        seq += 1
    changed = {c.step_id for c in decided.changes if isinstance(c, StepChange)}
    return WorkflowUpdate(
        record.workflow_run_id,
        record.tenant_id,
        record.version,
        values,
        [by_id[sid] for sid in sorted(changed)],
        transitions,
    )


def _step_after(
    step: StepRecord, change: StepChange, run_ids: Mapping[tuple[str, bool], str], now: datetime
) -> StepRecord:
    to = change.to_status
    values: dict[str, Any] = {"status": to.value}
    if to is StepStatus.RUNNING:
        values.update(job_run_id=run_ids[(step.step_id, False)], started_at=now)
    elif to is StepStatus.COMPENSATING:
        values["compensation_run_id"] = run_ids.get((step.step_id, True), step.compensation_run_id)
    elif to is StepStatus.COMPLETED:
        values.update(outputs=dict(change.outputs or {}), completed_order=change.completed_order, ended_at=now)
    elif to in (StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.SKIPPED):
        values.update(ended_at=now, error_code=change.error_code)
    elif to is StepStatus.COMPENSATION_FAILED:
        values["error_code"] = change.error_code
    return replace(step, **values)


def _step_detail(change: StepChange, step: StepRecord) -> dict[str, Any]:
    detail: dict[str, Any] = dict(change.detail)
    if change.to_status is StepStatus.RUNNING:
        detail["job_run_id"] = step.job_run_id
    if change.to_status is StepStatus.COMPENSATING and step.compensation_run_id:
        detail["job_run_id"] = step.compensation_run_id
    if change.outputs is not None:
        detail["outputs"] = dict(change.outputs)
    if change.error_code is not None:
        detail["error_code"] = change.error_code
    return detail


def _stop_runs(tx: StoreTx, decided: Plan, actor: str, now: datetime) -> None:
    """Cancel a stopped step's run if it has not started, or ask its worker to stop it."""
    for stop in decided.stops:
        run = tx.run_get(stop.job_run_id)
        if run is None or run.status.is_terminal:
            continue
        if run.status.is_pending and tx.runs_apply(
            [transitions.cancelled(run, actor=actor, reason="workflow stopped", now=now)]
        ):
            continue
        # Running, or it started between the read and the cancel (a worker's commit on
        # PostgreSQL): ask its worker to stop it, as a person's stop would. A run that ended
        # meanwhile needs nothing.
        if not run.stop_requested:
            control.request_stop(tx, run, actor=actor, reason="workflow stopped", now=now)


def _publish(
    tx: StoreTx,
    record: WorkflowRecord,
    event_type: events.EventType,
    status: RunStatus,
    error_code: str | None,
    now: datetime,
) -> None:
    """The workflow run's event in the outbox, delivered after the transaction commits."""
    event = events.workflow_changed(
        event_type,
        workflow_run_id=record.workflow_run_id,
        tenant_id=record.tenant_id,
        job_definition_id=record.job_definition_id,
        job_class=record.job_class,
        status=status.value,
        error_code=error_code,
        now=now,
    )
    tx.outbox_append([(None, record.tenant_id, event)], now)


def _announce(tx: StoreTx, record: WorkflowRecord, decided: Plan, now: datetime) -> None:
    """An event and an audit entry when the workflow ends (the transitions hold the rest)."""
    for change in decided.changes:
        if not isinstance(change, WorkflowChange) or change.to_status not in _TERMINAL_EVENTS:
            continue
        final = decided.state
        code = final.error_code if final is not None else change.error_code
        _publish(tx, record, _TERMINAL_EVENTS[change.to_status], change.to_status, code, now)
        audit.record(
            tx,
            audit.event(
                record.tenant_id,
                COORDINATOR,
                f"workflow.{change.to_status.value.lower()}",
                "workflow",
                record.workflow_run_id,
                now,
                reason=change.reason,
                payload={"error_code": code, "definition_digest": record.definition_digest},
            ),
        )
