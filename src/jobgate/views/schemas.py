"""Request and response bodies of the HTTP API, as pydantic models.

The models are the contract: FastAPI validates requests against them (a bad field is a 422
naming it) and publishes them in ``/openapi.json``, which the schemathesis run in CI checks
every response against. Requests forbid unknown fields: a misspelt option refused is better
than one silently ignored. Conversions from the core's dataclasses live here too, so a
route is a few lines: check, call the service, convert.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jobgate.core.audit import AuditEntry
from jobgate.core.errors import ValidationError, refuse_bytes
from jobgate.core.lineage import RETRY_EDGE
from jobgate.core.models import Attempt, DeadLetter, JobRun, Transition
from jobgate.core.records import Approval, RunRequest, StoredToken
from jobgate.core.states import RunStatus
from jobgate.core.tokens import Role
from jobgate.scheduling.plan import parse_slot
from jobgate.store.base import RetiredRun, StoredDefinition

T = TypeVar("T")

IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
_TENANT_CLAIMS = ("tenant_id", "tenant")


class Request(BaseModel):
    """A request body: unknown fields refused, and no NUL character anywhere (no database
    text type stores one; refused here with the field named rather than failing at write)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        refuse_nul(data, "")
        if isinstance(data, dict) and any(k in data for k in _TENANT_CLAIMS if k not in cls.model_fields):
            # A tenant claim the access check found to be the caller's own (another is 403
            # before validation): the tenant comes from the credential, so it changes nothing.
            data = {k: v for k, v in data.items() if k not in _TENANT_CLAIMS or k in cls.model_fields}
        return data


MAX_DEPTH = 32  # nesting of a request document: deeper is refused, never a recursion error later
_SURROGATE = re.compile("[\ud800-\udfff]")


def refuse_nul(value: Any, at: str, depth: int = 0) -> None:
    """Refuse what no database text column can store and no canonical JSON can encode: NUL, a
    lone surrogate (``\\ud800`` in JSON), and documents nested more than ``MAX_DEPTH`` deep;
    each refusal names the field."""
    if depth > MAX_DEPTH:
        raise ValidationError(f"nested more than {MAX_DEPTH} levels deep", field=at or None)
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationError("the NUL character is not accepted", field=at or None)
        if _SURROGATE.search(value):
            raise ValidationError("a lone UTF-16 surrogate is not a character", field=at or None)
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{at}.{key}" if at else str(key)
            if _SURROGATE.search(str(key)):
                raise ValidationError("a lone UTF-16 surrogate is not a character", field=at or None)
            refuse_nul(str(key), where, depth)
            refuse_nul(item, where, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            refuse_nul(item, f"{at}[{i}]", depth + 1)


class Page(BaseModel, Generic[T]):
    """One page of a list; ``next_cursor`` fetches the next (absent on the last page)."""

    items: list[T]
    next_cursor: str | None = None


# ---------------------------------------------------------------- runs
class RunOut(BaseModel):
    job_run_id: str
    tenant_id: str
    job_definition_id: str
    definition_version: int
    definition_digest: str
    job_class: str
    trigger_id: str
    trigger_type: str
    idempotency_key: str
    config_snapshot_id: str
    config_digest: str
    status: str
    attempt: int
    max_attempts: int
    priority: str
    queue: str
    params: dict[str, Any]
    scope: dict[str, Any]
    created_at: datetime
    due_at: datetime
    requested_by: str | None
    started_at: datetime | None
    ended_at: datetime | None
    next_retry_at: datetime | None
    error_code: str | None
    error_message: str | None
    result: dict[str, Any] | None
    stop_requested: bool
    has_artifact: bool
    artifact_sha256: str | None
    artifact_size: int | None
    workflow_run_id: str | None
    hold_reason: str | None = Field(
        default=None, description="HELD: which gate refused the start of its next attempt (it waits until it clears)"
    )
    held_at: datetime | None = None
    reviewed_by: str | None = Field(default=None, description="the second person who reviewed the run, if any")
    schedule_id: str | None = Field(
        default=None, description="the schedule whose slot this run is (scheduled, backfilled)"
    )
    slot_at: datetime | None = Field(default=None, description="the instant of that slot (a batch window's end)")
    retry_of: str | None = Field(default=None, description="the run this run retries (seed 001 retry contract)")
    result_ref: str | None = Field(
        default=None, description="seed §13: the API path the result artifact is read from (None: no artifact)"
    )

    @classmethod
    def of(cls, run: JobRun) -> RunOut:
        refuse_bytes(vars(run), f"run {run.job_run_id}")
        slot = parse_slot(run.slot)
        return cls(
            job_run_id=run.job_run_id,
            tenant_id=run.tenant_id,
            job_definition_id=run.job_definition_id,
            definition_version=run.definition_version,
            definition_digest=run.definition_digest,
            job_class=str(run.job_class),
            trigger_id=run.trigger_id,
            trigger_type=run.trigger_type.value,
            idempotency_key=run.idempotency_key,
            config_snapshot_id=run.config_snapshot_id,
            config_digest=run.config_digest,
            status=run.status.value,
            attempt=run.attempt,
            max_attempts=run.max_attempts,
            priority=run.priority.value,
            queue=run.queue,
            params=dict(run.params),
            scope=dict(run.scope),
            created_at=run.created_at,
            due_at=run.due_at,
            requested_by=run.requested_by,
            started_at=run.started_at,
            ended_at=run.ended_at,
            next_retry_at=run.next_retry_at,
            error_code=run.error_code,
            error_message=run.error_message,
            result=None if run.result is None else dict(run.result),
            stop_requested=run.stop_requested,
            has_artifact=run.artifact_path is not None,
            artifact_sha256=run.artifact_sha256,
            artifact_size=run.artifact_size,
            workflow_run_id=run.workflow_run_id,
            hold_reason=run.hold_reason if run.status is RunStatus.HELD else None,
            held_at=run.held_at if run.status is RunStatus.HELD else None,
            reviewed_by=run.reviewed_by,
            schedule_id=None if slot is None else slot[0],
            slot_at=None if slot is None else slot[1],
            retry_of=run.retry_of,
            result_ref=None if run.artifact_path is None else f"/api/v1/runs/{run.job_run_id}/artifact",
        )


class TransitionOut(BaseModel):
    sequence: int
    from_status: str | None
    to_status: str
    attempt: int
    reason: str
    actor: str
    at: datetime
    detail: dict[str, Any]

    @classmethod
    def of(cls, sequence: int, t: Transition) -> TransitionOut:
        refuse_bytes(vars(t), f"transition {sequence} of run {t.job_run_id}")
        return cls(
            sequence=sequence,
            from_status=None if t.from_status is None else t.from_status.value,
            to_status=t.to_status.value,
            attempt=t.attempt,
            reason=t.reason,
            actor=t.actor,
            at=t.at,
            detail=dict(t.detail),
        )


class AttemptOut(BaseModel):
    attempt: int
    worker_id: str
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    error_code: str | None
    error_message: str | None

    @classmethod
    def of(cls, a: Attempt) -> AttemptOut:
        return cls(
            attempt=a.attempt,
            worker_id=a.worker_id,
            started_at=a.started_at,
            ended_at=a.ended_at,
            outcome=a.outcome,
            error_code=a.error_code,
            error_message=a.error_message,
        )


class DeadLetterOut(BaseModel):
    dead_letter_id: str
    job_run_id: str
    job_class: str
    reason: str
    last_error_code: str | None
    attempts: int
    requires_manual_review: bool
    created_at: datetime
    resolved_at: datetime | None
    resolution: str | None

    @classmethod
    def of(cls, d: DeadLetter) -> DeadLetterOut:
        refuse_bytes(vars(d), f"dead letter {d.dead_letter_id} of run {d.job_run_id}")
        return cls(
            dead_letter_id=d.dead_letter_id,
            job_run_id=d.job_run_id,
            job_class=str(d.job_class),
            reason=d.reason.value,
            last_error_code=d.last_error_code,
            attempts=d.attempts,
            requires_manual_review=d.requires_manual_review,
            created_at=d.created_at,
            resolved_at=d.resolved_at,
            resolution=d.resolution,
        )


class RunDetailOut(BaseModel):
    run: RunOut
    transitions: list[TransitionOut]
    attempts: list[AttemptOut]
    dead_letter: DeadLetterOut | None
    progress: float | None
    progress_message: str | None


class RunEdgeOut(BaseModel):
    """One lineage edge: its kind (``retry``: derived from ``retry_of`` alone) and the run at
    its other end."""

    kind: str
    run: RunOut


class RetiredEdgeOut(BaseModel):
    """An edge's other end that retention deleted: what ``retired_runs`` remembers of it."""

    kind: str
    job_run_id: str
    job_definition_id: str
    status: str
    ended_at: datetime | None
    retired_at: datetime


def retired_edge(gone: RetiredRun) -> RetiredEdgeOut:
    """A lineage edge to a run retention deleted."""
    return RetiredEdgeOut(
        kind=RETRY_EDGE,
        job_run_id=gone.job_run_id,
        job_definition_id=gone.job_definition_id,
        status=gone.status,
        ended_at=gone.ended_at,
        retired_at=gone.retired_at,
    )


class RunLineageOut(BaseModel):
    """A run's parents (the run it retries) or children (the runs that retry it)."""

    job_run_id: str
    direction: str = Field(description="parents | children")
    edges: list[RunEdgeOut]
    retired: list[RetiredEdgeOut] = Field(
        default_factory=list, description="edges whose other end retention deleted (the parent, when it was retired)"
    )


class RunCreateIn(Request):
    job_definition_id: str = Field(pattern=IDENTIFIER)
    params: dict[str, str] = Field(default_factory=dict)
    reason: str | None = Field(default=None, max_length=2000)


class RunActionIn(Request):
    reason: str | None = Field(default=None, max_length=2000)


class RunCreatedOut(BaseModel):
    created: bool
    run: RunOut


# ---------------------------------------------------------------- seed 000 §42-43
class ScheduleScopeIn(Request):
    tenant_id: str | None = Field(default=None, max_length=64)
    environment: str | None = Field(default=None, max_length=200)
    region: str | None = Field(default=None, max_length=200)
    eco_number: str | None = Field(default=None, max_length=200)


class ScheduleTriggerIn(Request):
    trigger_type: str = Field(default="manual", pattern="^manual$")
    requested_by: str | None = Field(default=None, max_length=200)
    reason: str | None = Field(default=None, max_length=2000)


class ScheduleIn(Request):
    job_definition_id: str = Field(pattern=IDENTIFIER)
    scope: ScheduleScopeIn = Field(default_factory=ScheduleScopeIn)
    trigger: ScheduleTriggerIn = Field(default_factory=ScheduleTriggerIn)
    params: dict[str, str] = Field(default_factory=dict)


class ScheduleOut(BaseModel):
    status: str
    job_run_id: str
    config_snapshot_id: str
    scheduled_for: datetime


class CancelIn(Request):
    job_run_id: str = Field(max_length=64)
    reason: str | None = Field(default=None, max_length=2000)
    requested_by: str | None = Field(default=None, max_length=200)


class CancelOut(BaseModel):
    status: str
    job_run_id: str
    audit_required: bool


# ---------------------------------------------------------------- definitions
class DefinitionOut(BaseModel):
    job_definition_id: str
    version: int
    digest: str
    job_code: str
    job_class: str
    status: str
    is_current: bool
    source: str | None
    created_at: datetime

    @classmethod
    def of(cls, d: StoredDefinition) -> DefinitionOut:
        return cls(
            job_definition_id=d.job_definition_id,
            version=d.version,
            digest=d.digest,
            job_code=d.job_code,
            job_class=d.job_class,
            status=d.status.value,
            is_current=d.is_current,
            source=d.source,
            created_at=d.created_at,
        )


class DefinitionDetailOut(DefinitionOut):
    content: dict[str, Any]

    @classmethod
    def of(cls, d: StoredDefinition) -> DefinitionDetailOut:
        return cls(**DefinitionOut.of(d).model_dump(), content=dict(d.content))


class DefinitionsApplyIn(Request):
    definitions: list[dict[str, Any]] = Field(min_length=1, max_length=500)


class AppliedOut(BaseModel):
    job_definition_id: str
    version: int
    digest: str
    created: bool
    reverted: bool = Field(
        default=False, description="an older version is current again: its content was applied again (not created)"
    )


# ---------------------------------------------------------------- schedules, events, dead letters
class ScheduleItemOut(BaseModel):
    schedule_id: str
    job_definition_id: str
    kind: str
    paused: bool
    state: str = Field(description="active, paused, paused: unapproved (resumes when approved), or failing")
    owner: str = Field(description="definition (kept by its trigger_type and schedule_expression), or who stored it")
    failures: int = Field(default=0, description="plans or fires that failed in a row")
    last_error: str | None = None
    retry_at: datetime | None = Field(default=None, description="a failing schedule is tried again then")
    document: dict[str, Any]
    watermark: datetime
    created_at: datetime
    updated_at: datetime
    warnings: list[str] = Field(default_factory=list)


class ScheduleCreateIn(Request):
    schedule: dict[str, Any]
    allow_pending: bool = Field(
        default=False, description="store it paused (unapproved) when its definition is not approved, instead of 409"
    )


class MissOut(BaseModel):
    fire_at: datetime
    reason: str = Field(description="coalesced, beyond_max_catchup, skipped, paused, refused or overlap")
    recorded_at: datetime


class ScheduleChangedOut(BaseModel):
    schedule_id: str
    changed: bool


class EventIn(Request):
    """An event. Besides ``event_type``, ``event_id`` and ``data``, the seed 000 §18 trigger
    payload is accepted as written: ``trigger_id`` (the source's id of the event, when
    ``event_id`` is not given), ``trigger_type`` (``event``), the source engine's MEID and CMI,
    ``signal_id``, ``eco_number``, ``policy_context`` and ``created_at`` (when the source raised
    it; kept in the trigger's policy context as ``source_created_at``)."""

    event_type: str = Field(pattern=IDENTIFIER)
    event_id: str | None = Field(default=None, min_length=1, max_length=200)
    trigger_id: str | None = Field(default=None, min_length=1, max_length=200)
    trigger_type: Literal["event"] | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    source_engine_meid: str | None = Field(default=None, max_length=200)
    source_engine_cmi: str | None = Field(default=None, max_length=200)
    signal_id: str | None = Field(default=None, max_length=200)
    eco_number: str | None = Field(default=None, max_length=200)
    policy_context: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None


class EventFireOut(BaseModel):
    schedule_id: str
    job_definition_id: str
    job_run_id: str | None
    created: bool
    refused: str | None


class EventOut(BaseModel):
    event_type: str
    event_id: str
    fired: list[EventFireOut]


# ---------------------------------------------------------------- cluster and tenant views
class WorkerOut(BaseModel):
    worker_id: str
    state: str
    concurrency: int
    queues: list[str]
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    # The caller's definitions this worker cannot execute on its host (its code does not
    # import there, its runner or target is not configured there): their runs wait for another.
    cannot_run: list[str] = []


class WorkersOut(BaseModel):
    execution_mode: str  # embedded | standalone
    execution_availability: str  # available | unavailable
    visibility_state: str  # registrations | no_registrations
    total: int
    active: int
    stale: int
    items: list[WorkerOut]


class QuotaUsageOut(BaseModel):
    tenant_id: str
    unit: str
    period_start: datetime
    period_end: datetime
    measured_at: datetime
    used: int
    limit: int | None


# ---------------------------------------------------------------- tokens
class TokenOut(BaseModel):
    token_id: str
    role: str
    jobs: list[str] | None
    label: str
    principal: str = Field(description="the person (or service account) the token belongs to")
    minted_by: list[str] = Field(description="the principals whose tokens minted this one, nearest first")
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, t: StoredToken) -> TokenOut:
        return cls(
            token_id=t.token_id,
            role=t.role,
            jobs=None if t.jobs is None else list(t.jobs),
            label=t.label,
            principal=t.principal_name,
            minted_by=list(t.minted_by),
            created_by=t.created_by,
            created_at=t.created_at,
            expires_at=t.expires_at,
            revoked_at=t.revoked_at,
        )


class TokenCreateIn(Request):
    role: Role
    label: str = Field(default="", max_length=200)
    jobs: list[Annotated[str, Field(pattern=IDENTIFIER)]] | None = Field(default=None, max_length=1000)
    expires_in_seconds: int | None = Field(default=None, ge=1, le=3650 * 86400)
    principal: str | None = Field(
        default=None,
        max_length=200,
        description="whom the token belongs to (default: you); four eyes still counts you as its minter",
    )


class TokenCreatedOut(BaseModel):
    token: str = Field(description="the raw token: shown this once, never again")
    info: TokenOut


# ---------------------------------------------------------------- health
class CheckOut(BaseModel):
    name: str
    status: str  # green | amber | red
    detail: str


class ReadyOut(BaseModel):
    ready: bool
    checks: list[CheckOut]


class HealthOut(BaseModel):
    status: str
    pubsub: str = "skip"  # seed 004: connected | disconnected | skip (no subscriber configured)


# ---------------------------------------------------------------- governance
DIGEST = r"^sha256:[0-9a-f]{64}$"


class ApproveIn(Request):
    digest: str = Field(pattern=DIGEST, description="the content digest you reviewed (409 if the current differs)")
    code_digest: str | None = Field(
        default=None, pattern=DIGEST, description="the code digest you reviewed (409 if the code differs)"
    )
    note: str | None = Field(default=None, max_length=2000)


class ApprovalOut(BaseModel):
    approval_id: int
    digest: str
    version: int
    code_digest: str | None = Field(description="the code the approval binds (None: approved before code was bound)")
    code_identity: dict[str, str] | None = Field(description="the named parts the code digest covers")
    approved_by: str
    approved_at: datetime
    note: str | None
    revoked_at: datetime | None
    revoked_by: str | None
    active: bool

    @classmethod
    def of(cls, a: Approval) -> ApprovalOut:
        return cls(
            approval_id=a.approval_id,
            digest=a.digest,
            version=a.version,
            code_digest=a.code_digest,
            code_identity=a.code_identity,
            approved_by=a.approved_by,
            approved_at=a.approved_at,
            note=a.note,
            revoked_at=a.revoked_at,
            revoked_by=a.revoked_by,
            active=a.active,
        )


class ApprovalStatusOut(BaseModel):
    job_definition_id: str
    current_version: int
    current_digest: str
    current_code_digest: str | None = Field(description="the code this server reads for it now (None: unreadable)")
    code_problem: str | None = Field(description="why the code cannot be read here, if it cannot")
    approved: bool = Field(description="an active approval covers the current content")
    matches: bool = Field(description="the current content and the code here are both what was approved")
    changed: list[str] = Field(description="what differs from the approval: 'content', or the code's parts")
    approval: ApprovalOut | None = Field(description="the approval of the current content, if any")
    history: list[ApprovalOut]


class RevokedOut(BaseModel):
    job_definition_id: str
    revoked_digests: list[str]
    cancelled_runs: list[str]


class AuditEntryOut(BaseModel):
    seq: int
    at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    reason: str | None
    payload: dict[str, Any]
    prev_hash: str
    entry_hash: str

    @classmethod
    def of(cls, e: AuditEntry) -> AuditEntryOut:
        ev = e.event
        return cls(
            seq=e.seq,
            at=ev.at,
            actor=ev.actor,
            action=ev.action,
            target_type=ev.target_type,
            target_id=ev.target_id,
            reason=ev.reason,
            payload=dict(ev.payload),
            prev_hash=e.prev_hash,
            entry_hash=e.entry_hash,
        )


class RequestIn(Request):
    job_definition_id: str = Field(pattern=IDENTIFIER)
    params: dict[str, str] = Field(default_factory=dict)
    title: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=2000)


class DecisionIn(Request):
    note: str | None = Field(default=None, max_length=2000)


class RejectIn(Request):
    note: str = Field(min_length=1, max_length=2000)


class RequestOut(BaseModel):
    request_id: str
    job_definition_id: str
    params: dict[str, str]
    title: str
    reason: str
    requested_by: str
    status: str
    created_at: datetime
    tested_at: datetime | None
    tested_by: str | None
    verdict: dict[str, Any] | None
    decided_at: datetime | None
    decided_by: str | None
    decision_note: str | None
    job_run_id: str | None
    digest: str | None = Field(default=None, description="the version approval will run: the last dry run's")
    version: int | None = None

    @classmethod
    def of(cls, r: RunRequest) -> RequestOut:
        return cls(
            request_id=r.request_id,
            job_definition_id=r.job_definition_id,
            params=dict(r.params),
            title=r.title,
            reason=r.reason,
            requested_by=r.requested_by,
            status=r.status,
            created_at=r.created_at,
            tested_at=r.tested_at,
            tested_by=r.tested_by,
            verdict=r.verdict,
            decided_at=r.decided_at,
            decided_by=r.decided_by,
            decision_note=r.decision_note,
            job_run_id=r.job_run_id,
            digest=r.digest,
            version=r.version,
        )


class TestedOut(BaseModel):
    request: RequestOut
    admissible: bool
    checks: list[dict[str, Any]]


class SafeModeOut(BaseModel):
    tenant_id: str
    active: bool
    activation: int | None = Field(description="the latest period's number (None: never activated)")
    reason: str | None
    since: datetime | None = Field(description="when the current state began")
    by: str | None = Field(description="who switched to the current state")
    actions: dict[str, Any] = Field(description="what the open period puts in force (empty when off)")
    safe_mode_job_run_id: str | None = None


class SafeModeIn(Request):
    active: bool
    reason: str = Field(min_length=1, max_length=2000)


# ---------------------------------------------------------------- workflows
class WorkflowStartIn(Request):
    job_definition_id: str = Field(pattern=IDENTIFIER)
    params: dict[str, str] = Field(default_factory=dict)
    reason: str | None = Field(default=None, max_length=2000)


class WorkflowStepOut(BaseModel):
    step_id: str
    status: str
    job_run_id: str | None
    compensation_run_id: str | None
    outputs: dict[str, Any] | None


class WorkflowRunOut(BaseModel):
    """Seed 000 §44 (``workflow_run_id``, ``status``, ``current_step``, ``completed_steps``,
    ``remaining_steps``) and what an auditor needs besides: which exact definition, when, why
    it ended, and every step."""

    workflow_run_id: str
    status: str
    current_step: str | None
    completed_steps: list[str]
    remaining_steps: list[str]
    job_definition_id: str
    definition_version: int
    definition_digest: str
    tenant_id: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    error_code: str | None
    error_message: str | None
    steps: list[WorkflowStepOut]

    @classmethod
    def of(cls, view: Any) -> WorkflowRunOut:
        r = view.record
        return cls(
            workflow_run_id=r.workflow_run_id,
            status=r.status.value,
            current_step=view.current_step,
            completed_steps=view.completed_steps,
            remaining_steps=view.remaining_steps,
            job_definition_id=r.job_definition_id,
            definition_version=r.definition_version,
            definition_digest=r.definition_digest,
            tenant_id=r.tenant_id,
            created_at=r.created_at,
            started_at=r.started_at,
            ended_at=r.ended_at,
            error_code=r.error_code,
            error_message=r.error_message,
            steps=[
                WorkflowStepOut(
                    step_id=s.step_id,
                    status=s.status,
                    job_run_id=s.job_run_id,
                    compensation_run_id=s.compensation_run_id,
                    outputs=s.outputs,
                )
                for s in view.steps
            ],
        )


class WorkflowTransitionOut(BaseModel):
    seq: int
    step_id: str | None
    from_status: str | None
    to_status: str
    reason: str
    actor: str
    at: datetime
    detail: dict[str, Any]
