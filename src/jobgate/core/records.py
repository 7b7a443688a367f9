"""Records the store returns: plain values, no I/O.

Defined here, not beside the SQL that reads them, so that services, faces and the store all
take them from the bottom layer: nothing above ``store`` needs to import the store's
internals to name what it is given (``tests/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobgate.core.states import RunStatus


@dataclass(frozen=True)
class AuditFilter:
    tenant_id: str
    actor: str | None = None
    action: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    at_from: datetime | None = None
    at_to: datetime | None = None
    after_seq: int = 0  # pages in chain order
    limit: int = 100
    newest: bool = False  # the last ``limit`` entries (still given in chain order), not the first


@dataclass(frozen=True)
class Approval:
    """One approval of one definition digest, as given (``approval_id`` orders them). The code
    identity names what the approver's host found the definition executes (``core.code_identity``)."""

    tenant_id: str
    job_definition_id: str
    digest: str
    version: int
    approved_by: str
    approved_at: datetime
    note: str | None
    revoked_at: datetime | None
    revoked_by: str | None
    code_digest: str | None = None
    code_identity: dict[str, str] | None = None
    approval_id: int = 0  # assigned when stored

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class RunRequest:
    request_id: str
    tenant_id: str
    job_definition_id: str
    params: dict[str, str]
    title: str
    reason: str
    requested_by: str
    status: str  # pending | approved | rejected
    created_at: datetime
    tested_at: datetime | None = None
    tested_by: str | None = None
    verdict: dict[str, Any] | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None
    decision_note: str | None = None
    job_run_id: str | None = None
    # The version the proposal named, then the one its last dry run saw: approval runs it.
    digest: str | None = None
    version: int | None = None
    requester_lineage: tuple[str, ...] = ()  # who minted the proposer's credential


@dataclass(frozen=True)
class Anchor:
    tenant_id: str
    anchor_seq: int
    mode: str  # batch | direct
    window_start: datetime
    window_end: datetime
    first_seq: int
    last_seq: int
    leaf_count: int
    root: str
    prev_chain: str
    chain: str
    created_at: datetime
    sink: str
    # Ed25519 over ``evidence.anchors.anchor_message`` with the deployment's evidence key (schema
    # 0019); None: made without a key (before it existed, or none is configured).
    key_id: str | None = None
    signature: str | None = None
    # An RFC 3161 timestamping authority's token over the same message (schema 0020), base64
    # of its DER TimeStampResp; None: made without a TSA configured, or a direct anchor.
    timestamp_token: str | None = None


@dataclass(frozen=True)
class SafeModePeriod:
    tenant_id: str
    activation: int  # 1, 2, ... per tenant
    activated_at: datetime
    activated_by: str
    reason: str
    deactivated_at: datetime | None = None
    deactivated_by: str | None = None
    deactivation_reason: str | None = None
    actions: dict[str, Any] = field(default_factory=dict)  # what this period put in force

    @property
    def active(self) -> bool:
        return self.deactivated_at is None


@dataclass(frozen=True)
class StoredToken:
    token_id: str
    tenant_id: str
    role: str
    jobs: tuple[str, ...] | None  # None: every definition of the tenant
    label: str
    secret_hash: str
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None
    principal: str | None = None  # None: the token is a principal of its own (``token:<id>``)
    minted_by: tuple[str, ...] = ()  # the principals whose tokens minted this one, nearest first

    @property
    def principal_name(self) -> str:
        return self.principal or f"token:{self.token_id}"


@dataclass(frozen=True)
class DefinitionPolicies:
    """The policy names one stored definition version carries (its content is immutable)."""

    tenant_id: str
    job_definition_id: str
    version: int
    sla_policy: str | None
    timeout_policy: str | None
    step_timeouts: bool = False  # a workflow whose steps name timeout policies of their own


@dataclass(frozen=True)
class WorkflowSubject:
    """What the monitor needs of a workflow run (``version`` for the compare-and-set)."""

    workflow_run_id: str
    tenant_id: str
    job_definition_id: str
    definition_version: int
    job_class: str
    status: RunStatus
    params: dict[str, Any]
    scope: dict[str, Any]
    created_at: datetime
    version: int


@dataclass(frozen=True)
class Left:
    """A transition out of an open status: the subject was in ``from_status`` until ``at``."""

    id: int
    from_status: RunStatus
    to_status: RunStatus
    attempt: int
    at: datetime


@dataclass(frozen=True)
class BreachRecord:
    """One reminder or breach, recorded once per (tenant, subject, kind, phase)."""

    sla_breach_id: str
    tenant_id: str
    subject_kind: str
    subject_id: str
    job_class: str
    job_definition_id: str
    eco_number: str | None
    kind: str
    phase: str
    sla_policy: str
    deadline: datetime
    detected_at: datetime
    severity: str
    requires_escalation: bool
    escalated: bool = False


@dataclass(frozen=True)
class PeriodCounts:
    scheduled: int  # runs created in the period (the cohort)
    completed: int  # of those, completed before the period ended
    retries: int  # transitions of the cohort to RETRY_WAIT before the end
    dead_lettered: int  # cohort runs dead-lettered before the end (each run once)
    breached: int  # cohort runs with an SLA breach detected before the end (each run once)
    dal_scheduled: int  # the cohort's DAL_ANCHOR_JOB runs
    dal_completed: int
    workflows_finished: int  # workflows created and finished in the period
    workflow_latency_us: int  # the sum of their ended_at - created_at
    replay_backlog: int  # REPLAY_JOB runs created before the end and not finished by it


@dataclass(frozen=True)
class Publication:
    tenant_id: str
    period: str
    period_start: datetime
    period_end: datetime
    figures: dict[str, object]
    digest: str
    published_at: datetime
    sink: str
    job_run_id: str | None


Group = tuple[str, str]  # (tenant_id, job_class)


@dataclass(frozen=True)
class RunCounts:
    """One (tenant, job class, queue) group of runs."""

    tenant_id: str
    job_class: str
    queue: str
    created: int
    started: int  # transitions to RUNNING
    completed: int
    failed: int  # runs that ended FAILED (dead letters and escalations are not failures here)
    retries: int  # transitions to RETRY_WAIT
    pending: int  # waiting for a worker: CREATED, SCHEDULED, DISPATCHED, RETRY_WAIT


@dataclass(frozen=True)
class Distribution:
    """A histogram of one (tenant, job class) group: cumulative counts per bound, in ms."""

    tenant_id: str
    job_class: str
    cumulative: tuple[int, ...]  # observations <= each bound, in the bounds' order
    count: int
    sum_ms: float


@dataclass(frozen=True)
class LockInfo:
    name: str
    owner: str
    token: int  # the fencing token: grows with every new holder
    acquired_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class WorkflowRecord:
    workflow_run_id: str
    tenant_id: str
    idempotency_key: str
    job_definition_id: str
    definition_version: int
    definition_digest: str
    job_class: str
    status: RunStatus
    phase: str
    params: dict[str, str]
    scope: dict[str, Any]
    trigger: dict[str, Any]
    config_snapshot_id: str
    config_digest: str
    requested_by: str | None
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error_code: str | None = None
    error_message: str | None = None
    cancel_requested: bool = False
    version: int = 0


@dataclass(frozen=True)
class StepRecord:
    workflow_run_id: str
    step_id: str
    tenant_id: str
    position: int
    status: str
    job_run_id: str | None = None
    compensation_run_id: str | None = None
    outputs: dict[str, Any] | None = None
    completed_order: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error_code: str | None = None


@dataclass(frozen=True)
class WorkflowTransition:
    workflow_run_id: str
    seq: int
    step_id: str | None
    from_status: str | None
    to_status: str
    reason: str
    actor: str
    at: datetime
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowUpdate:
    """One advance: the new workflow values (empty: unchanged), step rows to write, transitions."""

    workflow_run_id: str
    tenant_id: str
    expected_version: int
    values: dict[str, Any]
    steps: Sequence[StepRecord]
    transitions: Sequence[WorkflowTransition]


@dataclass(frozen=True)
class Batch:
    tenant_id: str
    seq: int  # the audit entry's position
    count: int
    root: str


@dataclass(frozen=True)
class BatchEntry:
    """A ``records.sealed`` entry: the tenant's seals with ``after < id <= last_id`` are its leaves."""

    seq: int
    after: int
    last_id: int
    count: int
    root: str | None


@dataclass(frozen=True)
class Finding:
    """One record that does not match its seal (or a batch that does not match its entry)."""

    kind: str
    record_id: str
    problem: str  # changed | resealed | unsealed | deleted | history_cut | batch_changed | batch_missing | ...
    part: str | None = None
    column: str | None = None
    seal_id: int | None = None
    detail: str | None = None  # "sealed X, now Y", where the seal kept the values

    def message(self) -> str:
        where = f"{self.kind} {self.record_id}"
        if self.problem == "changed":
            col = f", column {self.column}" if self.column else ""
            if not self.column and self.part == "history":  # sealed from its chain: no values kept
                col = " (one of its transitions was changed, removed or added)"
            detail = f" ({self.detail})" if self.detail else ""
            return f"{where}: its {self.part} differs from seal #{self.seal_id}{col}{detail}"
        if self.problem == "resealed":
            part = f" its {self.part}" if self.part else ""
            col = f", column {self.column}" if self.column else ""
            detail = f" ({self.detail})" if self.detail else ""
            return f"{where}: seal #{self.seal_id} is not one jobgate writes for it:{part} changed{col}{detail}"
        if self.problem == "unsealed" and self.seal_id is not None:  # ended after its latest seal
            covers = f", which covers {self.detail} transitions," if self.detail else ""
            return f"{where}: ended after seal #{self.seal_id}{covers} but its end has no seal"
        gone = f" ({self.detail} is not one jobgate writes for it)" if self.detail else ""
        return {
            "unsealed": f"{where}: ended but has no seal",
            "deleted": f"{where}: sealed (seal #{self.seal_id}) but its row is gone{gone}",
            "sealed_after_tombstone": f"{where}: sealed again (seal #{self.seal_id}) after its tombstone {self.detail}",
            "tombstone_mismatch": f"{where}: tombstone #{self.seal_id} does not close the seal before it",
            "retired_unexplained": f"{where}: retired (tombstone #{self.seal_id}) but no retention.deleted audit"
            " entry names it",
            "retired_record_missing": f"{where}: retired by retention, but the record of its key and slot"
            " (retired_runs) is gone: its trigger could run again",
            "retired_record_changed": f"{where}: retired by retention, but what retired_runs remembers of it"
            f" ({self.column or 'its key and slot'}) is not what its retention.deleted audit entry describes",
            "retired_record_unexplained": f"{where}: a record of a retired run (retired_runs) that no"
            " retention.deleted audit entry names",
            "trigger_reused": f"{where}: holds the key or slot of run {self.detail}, retired by retention:"
            " a trigger has one run, ever",
            "history_cut": f"{where}: has fewer transitions than seal #{self.seal_id} covers",
            "back_after_tombstone": f"{where}: its row is there again after its tombstone #{self.seal_id}"
            f" ({self.detail}): no jobgate write brings a record back",
            "unreadable": f"{where}: column {self.column} holds a value no jobgate write makes ({self.detail})",
            "seal_changed": f"{where}: seal #{self.seal_id} does not hash to its own parts",
            "batch_changed": f"{where}: the seals that audit entry (records.sealed) chained no longer give its root:"
            " a seal in it was rewritten, added or removed",
            "batch_missing": f"{where}: the seals that audit entry (records.sealed) chained are gone",
            "batch_gap": f"{where}: does not start where the previous records.sealed entry ended",
            "outside_batches": f"{where}: lies before the first records.sealed entry's range (no jobgate"
            " seal has an id below 1): it is chained by no entry",
        }.get(self.problem, f"{where}: {self.problem}")


@dataclass
class RecordsReport:
    tenant_id: str
    checked: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    batches: int = 0
    pending: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings
