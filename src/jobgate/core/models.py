"""The nouns of jobgate, each named once and frozen where identity must not change.

Field names follow the seed (seed 000 §12-§13, §17-§18, §26) so records read the same in
the database, the events and the documents auditors already hold.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from jobgate.core.states import RunStatus

if TYPE_CHECKING:  # jobgate.core.classes builds on this module
    from jobgate.core.classes import JobClassSpec

JsonObject = dict[str, Any]

DEFAULT_TENANT = "default"
DEFAULT_QUEUE = "default"


class Priority(StrEnum):
    """Execution order (seed 000 §19). Priority never bypasses safety, tenancy or config rules."""

    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"
    BACKGROUND = "background"

    @property
    def rank(self) -> int:
        """Lower rank is claimed first; stored on the run so the claim index can order by it."""
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {p: i for i, p in enumerate(Priority)}


class JobClass(StrEnum):
    """The canonical job classes (seed 000 §7)."""

    REPLAY_JOB = "REPLAY_JOB"
    DAL_ANCHOR_JOB = "DAL_ANCHOR_JOB"
    FEDERATION_SYNC_JOB = "FEDERATION_SYNC_JOB"
    QUARANTINE_SLA_JOB = "QUARANTINE_SLA_JOB"
    AI_FEEDBACK_JOB = "AI_FEEDBACK_JOB"
    AII_TELEMETRY_JOB = "AII_TELEMETRY_JOB"
    AUDIT_INTEGRITY_JOB = "AUDIT_INTEGRITY_JOB"
    CONFIG_REFRESH_JOB = "CONFIG_REFRESH_JOB"
    POLICY_REFRESH_JOB = "POLICY_REFRESH_JOB"
    OBSERVABILITY_JOB = "OBSERVABILITY_JOB"
    MAINTENANCE_JOB = "MAINTENANCE_JOB"
    SAFE_MODE_JOB = "SAFE_MODE_JOB"


class TriggerType(StrEnum):
    """What asks for a run (seed 000 §6, §17)."""

    CRON = "cron"
    INTERVAL = "interval"
    EVENT = "event"
    QUEUE = "queue"
    MANUAL = "manual"
    POLICY = "policy"
    ALERT = "alert"
    CONFIGURATION = "configuration"
    SAFE_MODE = "safe_mode"
    BACKFILL = "backfill"
    BATCH_WINDOW = "batch_window"
    ADAPTIVE = "adaptive"
    WORKFLOW = "workflow"  # a step of a workflow run, created by the workflow coordinator


class DefinitionStatus(StrEnum):
    """Lifecycle of a definition. Kept out of the digest: suspending is not a content change."""

    DRAFT = "draft"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    RETIRED = "retired"


class DeadLetterReason(StrEnum):
    """Why a run could not safely complete (seed 000 §26, plus the queue timeout of §22)."""

    MAXIMUM_RETRIES_EXCEEDED = "maximum_retries_exceeded"
    INVALID_CONFIGURATION = "invalid_configuration"
    MISSING_DEPENDENCY = "missing_dependency"
    NON_RETRYABLE_VALIDATION_FAILURE = "non_retryable_validation_failure"
    REPEATED_DAL_SUBMISSION_FAILURE = "repeated_dal_submission_failure"
    SIGNATURE_VERIFICATION_FAILURE = "signature_verification_failure"
    IMPOSSIBLE_FEDERATION_TARGET = "impossible_federation_target"
    AUDIT_WRITE_FAILURE = "audit_write_failure"
    UNSAFE_STATE_TRANSITION = "unsafe_state_transition"
    OPERATOR_CANCELLATION = "operator_cancellation"
    QUEUE_TIMEOUT_EXCEEDED = "queue_timeout_exceeded"
    RUN_MAXIMUM_AGE_EXCEEDED = "run_maximum_age_exceeded"  # seed 001: abandoned runs are closed
    SLA_ESCALATION_REQUIRED = "sla_escalation_required"  # seed 000 §22: escalated before it ran


@dataclass(frozen=True)
class ParamSpec:
    """A declared parameter (seed 004 ``params``): values are checked before anything runs.

    ``type`` is one of ``jobgate.core.params.PARAM_TYPES``: a value is stored and passed on in
    its type's one canonical text (``10.50`` and ``10.5`` are the same decimal, ``10.5``), so
    equal values make equal idempotency keys and digests. ``choices`` (canonical texts) and the
    inclusive ``minimum``/``maximum`` (numbers) narrow it further; ``pattern`` is for strings."""

    name: str
    required: bool = False
    pattern: str | None = None
    default: str | None = None
    description: str = ""
    type: str = "string"
    choices: tuple[str, ...] = ()
    minimum: str | None = None
    maximum: str | None = None


@dataclass(frozen=True)
class ExecutorSpec:
    """How a definition executes, resolved from its target, handler or runner.

    ``kind`` is ``python`` (``handler`` = ``module:function``), ``command`` (``runner`` names an
    entry of the runners registry) or ``http`` (``target`` names an entry of the target registry
    whose URL lives in configuration, never in a request).
    """

    kind: str
    handler: str | None = None
    runner: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class JobDefinition:
    """One immutable version of what can run (seed 000 §12).

    ``content`` is the canonical document the digest is computed over; the typed fields are
    read from it. ``status`` is lifecycle and lives outside the digest.
    """

    job_definition_id: str
    version: int
    digest: str
    content: JsonObject
    job_code: str
    job_class: str  # a built-in class (a ``JobClass`` member) or one declared in jobgate.yaml
    canonical_name: str
    trigger_type: TriggerType
    priority: Priority
    retry_policy: str
    timeout_policy: str | None
    sla_policy: str | None
    config_profile: str
    executor: ExecutorSpec
    # Triggers besides ``trigger_type`` its approved content lets start it (a seed 004 scenario:
    # cron entries and pub/sub events as well as manual runs); ``core.governance.allowed_triggers``.
    also_triggered_by: tuple[TriggerType, ...] = ()
    params: tuple[ParamSpec, ...] = ()
    queue: str = DEFAULT_QUEUE
    tenant_id: str = DEFAULT_TENANT
    status: DefinitionStatus = DefinitionStatus.ACTIVE
    concurrency_limit: int | None = None
    rate_limit_per_second: float | None = None
    audit_required: bool = False
    dal_anchor_required: bool = False
    idempotency_policy: str = "trigger"  # core.idempotency.IDEMPOTENCY_POLICIES
    target_engine_meid: str | None = None
    target_engine_cmi: str | None = None
    source: str | None = None
    # The declaration of ``job_class`` when it is declared in jobgate.yaml (``core.classes``);
    # None for a built-in class.
    class_spec: JobClassSpec | None = None

    @property
    def gates_as(self) -> JobClass:
        """The built-in class whose trust-gate, safe-mode and policy rules its runs follow."""
        if self.class_spec is not None:
            return self.class_spec.gates_as
        return JobClass(self.job_class)


@dataclass(frozen=True)
class Scope:
    """Tenant, environment, region and domain keys (e.g. ``eco_number``) a run is scoped to."""

    tenant_id: str = DEFAULT_TENANT
    environment: str | None = None
    region: str | None = None
    keys: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> JsonObject:
        out: JsonObject = {"tenant_id": self.tenant_id}
        if self.environment is not None:
            out["environment"] = self.environment
        if self.region is not None:
            out["region"] = self.region
        out.update(dict(self.keys))
        return out

    @classmethod
    def from_dict(cls, data: JsonObject | None) -> Scope:
        data = dict(data or {})
        tenant = str(data.pop("tenant_id", DEFAULT_TENANT))
        environment = data.pop("environment", None)
        region = data.pop("region", None)
        keys = tuple(sorted((str(k), str(v)) for k, v in data.items()))
        return cls(tenant, environment and str(environment), region and str(region), keys)


@dataclass(frozen=True)
class ExecutionWindow:
    """A half-open interval ``[start, end)`` a batch run covers (seed 000 §30-31)."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Trigger:
    """What asked for a run (seed 000 §17-18): type, source identity, policy context, payload.

    ``trigger_id`` identifies this request; ``source_event_id`` (events) and ``request_id``
    (manual) enter the idempotency key so a duplicate delivery finds the same run.
    """

    trigger_id: str
    trigger_type: TriggerType
    requested_by: str | None = None
    reason: str | None = None
    source_event_id: str | None = None
    request_id: str | None = None
    event_type: str | None = None
    source_engine_meid: str | None = None
    source_engine_cmi: str | None = None
    window: ExecutionWindow | None = None
    policy_context: JsonObject = field(default_factory=dict)
    payload: JsonObject = field(default_factory=dict)
    created_at: datetime | None = None
    # The requester's role where one was given (a token's role at the API): the scheduler
    # policy's ceilings judged the trigger by it, and a workflow the run starts judges its steps
    # by it too.
    role: str | None = None


@dataclass(frozen=True)
class ConfigSnapshot:
    """An immutable, digested copy of the configuration a run is bound to (seed 000 §4)."""

    config_snapshot_id: str
    config_digest: str
    profile: str
    content: JsonObject
    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True)
class JobRun:
    """One concrete execution (seed 000 §13). Retries are further attempts of the same run."""

    job_run_id: str
    tenant_id: str
    job_definition_id: str
    definition_version: int
    definition_digest: str
    job_class: str  # a ``JobClass`` member, or the name of a class declared in jobgate.yaml
    trigger_id: str
    trigger_type: TriggerType
    idempotency_key: str
    config_snapshot_id: str
    config_digest: str
    status: RunStatus
    attempt: int
    max_attempts: int
    priority: Priority
    queue: str
    retry_policy: str
    params: JsonObject
    scope: JsonObject
    created_at: datetime
    due_at: datetime
    workflow_run_id: str | None = None
    requested_by: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    next_retry_at: datetime | None = None
    queue_deadline_at: datetime | None = None
    execution_timeout: timedelta | None = None
    error_code: str | None = None
    error_message: str | None = None
    result: JsonObject | None = None
    result_ref: str | None = None
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires_at: datetime | None = None
    stop_requested: bool = False
    artifact_path: str | None = None
    artifact_sha256: str | None = None
    artifact_size: int | None = None
    # The retry policy as it was when the run was created (seed §21 shape): the run keeps the
    # rule it was admitted under even if the named policy is edited later.
    bound_retry_policy: JsonObject | None = None
    # The W3C traceparent its trigger carried (``policy_context.traceparent``, validated): the
    # run joins that trace (``core.trace``). Read from the stored trigger, not a column of its own.
    traceparent: str | None = None
    # HELD: which gate refused the start of its next attempt (``core.governance.Code``), and when.
    hold_reason: str | None = None
    held_at: datetime | None = None
    # The second person who reviewed this run before it could run (an approved request's
    # approver, the operator who requeued it); safe mode's manual review admits reviewed runs.
    reviewed_by: str | None = None
    # The schedule slot this run is the one run of (``schedule_id@instant``, a scheduled fire or a
    # backfill): unique per tenant in the store, whatever the configuration did since.
    slot: str | None = None
    # The run this one retries (seed 001 retry contract): the only source of retry lineage.
    retry_of: str | None = None

    def evolve(self, **changes: Any) -> JobRun:
        """A copy with ``changes``, like ``dataclasses.replace`` but without re-running
        ``__init__``: about 1 µs instead of 10 for these 46 fields, and a worker does this for
        every run it starts. Sound because the class has no ``__post_init__``; field names are
        still checked."""
        unknown = changes.keys() - _JOB_RUN_FIELDS
        if unknown:
            raise TypeError(f"JobRun has no field(s) {sorted(unknown)}")
        new = object.__new__(JobRun)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


_JOB_RUN_FIELDS = frozenset(JobRun.__dataclass_fields__)


@dataclass(frozen=True)
class Transition:
    """One persisted state change of a run, with who caused it and why."""

    job_run_id: str
    from_status: RunStatus | None
    to_status: RunStatus
    attempt: int
    reason: str
    actor: str
    at: datetime
    detail: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class Attempt:
    job_run_id: str
    attempt: int
    worker_id: str
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str | None = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True)
class DeadLetter:
    """A run that cannot safely complete and what review it needs (seed 000 §26-27)."""

    dead_letter_id: str
    job_run_id: str
    tenant_id: str
    job_class: str
    reason: DeadLetterReason
    last_error_code: str | None
    attempts: int
    requires_manual_review: bool
    created_at: datetime
    resolved_at: datetime | None = None
    resolution: str | None = None


@dataclass(frozen=True)
class OutboxEvent:
    """A committed event as the outbox holds it. The payload stays the stored JSON text until
    someone reads ``payload``: the JSON-lines sink writes the text as it is, so a publisher
    delivering thousands of events a second does not decode and re-encode each one."""

    event_id: int
    job_run_id: str | None
    tenant_id: str
    event_type: str
    payload_json: str
    created_at: datetime

    @functools.cached_property
    def payload(self) -> JsonObject:
        value: JsonObject = json.loads(self.payload_json)
        return value
