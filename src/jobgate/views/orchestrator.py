"""The seed 004 ("orchestrator") API's request and response shapes, over jobgate's records.

That API speaks of scenarios, jobs and an approval's ``sha256``; jobgate of definitions, runs
and content digests. These models are the translation, and nothing else: every value comes
from the same records the ``/api/v1`` shapes read, so the two faces can never disagree about
what happened. Where the seed shows a body (an approval, a new token) the field names are the
seed's; where it is silent, each shape carries the seed's vocabulary plus jobgate's exact
status, so a client of either never has to guess.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field

from jobgate.core.models import JobRun
from jobgate.core.records import Approval, StoredToken
from jobgate.core.states import RunStatus
from jobgate.core.tokens import Role
from jobgate.scheduling.model import Schedule, ScheduleKind
from jobgate.scheduling.records import StoredSchedule
from jobgate.service.approvals import ApprovalStatus
from jobgate.service.control import Cancellation
from jobgate.store.base import StoredDefinition
from jobgate.views.schemas import IDENTIFIER, Request, RequestOut

# The seed's job vocabulary: pending (not started), running, and how it ended. jobgate's own
# status is beside it in every job (``state``), since several of its statuses map to one word.
_JOB_STATUS = {
    RunStatus.CREATED: "pending",
    RunStatus.SCHEDULED: "pending",
    RunStatus.DISPATCHED: "pending",
    RunStatus.HELD: "pending",
    RunStatus.RETRY_WAIT: "pending",
    RunStatus.RUNNING: "running",
    RunStatus.COMPLETED: "completed",
    RunStatus.FAILED: "failed",
    RunStatus.DEAD_LETTERED: "failed",
    RunStatus.ESCALATED: "failed",
    RunStatus.CANCELLED: "cancelled",
}
NOTE_ON_TOKEN = "store this token now — it is not retrievable later"


def sha256_hex(digest: str) -> str:
    """jobgate writes digests as ``sha256:<hex>``; the seed's ``sha256`` field is the hex."""
    return digest.removeprefix("sha256:")


def job_status(status: RunStatus) -> str:
    return _JOB_STATUS[status]


class ScenarioOut(BaseModel):
    """A loaded scenario (a definition's current version) and whether it may run."""

    name: str
    description: str | None
    runner: str | None = Field(description="the named runner its content declares (None: not a runner job)")
    permissions: list[str]
    params: list[dict[str, Any]]
    sha256: str = Field(description="the SHA-256 of the loaded content: what an approval pins")
    version: int
    status: str = Field(description="the definition's lifecycle status (ACTIVE, DISABLED, RETIRED, ...)")
    approved: bool = Field(description="an active approval of exactly this content is on record")

    @classmethod
    def of(cls, d: StoredDefinition, approved: bool) -> ScenarioOut:
        content = d.content
        runner = content.get("runner")
        return cls(
            name=d.job_definition_id,
            description=content.get("description"),
            runner=runner if isinstance(runner, str) else None,
            permissions=[str(p) for p in content.get("permissions") or []],
            params=[dict(p) for p in content.get("params") or [] if isinstance(p, dict)],
            sha256=sha256_hex(d.digest),
            version=d.version,
            status=d.status.value,
            approved=approved,
        )


class ScenarioDetailOut(ScenarioOut):
    content: str | None = Field(description="the scenario's text (its body) as loaded, when it has one")
    definition: dict[str, Any] = Field(description="the whole definition document the digest covers")

    @classmethod
    def of_detail(cls, d: StoredDefinition, approved: bool) -> ScenarioDetailOut:
        body = d.content.get("body")
        return cls(
            **ScenarioOut.of(d, approved).model_dump(),
            content=body if isinstance(body, str) else None,
            definition=dict(d.content),
        )


class ScenarioApprovalOut(BaseModel):
    """Seed 004: ``{"name","sha256","approved_by","approved_at","enabled"}``."""

    name: str
    sha256: str
    approved_by: str
    approved_at: datetime
    enabled: bool = Field(description="the approval is in force (not revoked)")
    version: int
    code_digest: str | None = Field(description="the code the approval also binds")

    @classmethod
    def of(cls, name: str, a: Approval) -> ScenarioApprovalOut:
        return cls(
            name=name,
            sha256=sha256_hex(a.digest),
            approved_by=a.approved_by,
            approved_at=a.approved_at,
            enabled=a.active,
            version=a.version,
            code_digest=a.code_digest,
        )


class ScenarioApprovalStatusOut(BaseModel):
    """The approval on record and whether the loaded content (and its code) still match it:
    ``matches`` false means execution is blocked until an admin approves again."""

    name: str
    sha256: str = Field(description="the loaded content's SHA-256")
    approval: ScenarioApprovalOut | None
    matches: bool
    changed: list[str] = Field(description="what differs from the approval: content, or named code parts")

    @classmethod
    def of(cls, st: ApprovalStatus) -> ScenarioApprovalStatusOut:
        a = st.approval
        return cls(
            name=st.job_definition_id,
            sha256=sha256_hex(st.current_digest),
            approval=None if a is None else ScenarioApprovalOut.of(st.job_definition_id, a),
            matches=st.matches,
            changed=st.changed,
        )


class ScenarioApproveIn(Request):
    """Optional: the content the reviewer saw. The seed's route takes no body and approves what
    is loaded; a reviewer who pins what they read gets 409 if it is not what is loaded now."""

    sha256: str | None = Field(
        default=None, pattern=r"^(sha256:)?[0-9a-f]{64}$", description="the scenario's sha256 you reviewed"
    )


class ScenarioRunIn(Request):
    params: dict[str, str] = Field(default_factory=dict)
    reason: str | None = Field(default=None, max_length=2000)


class JobStartedOut(BaseModel):
    job_id: str
    status: str
    created: bool = Field(description="false: an earlier request with the same Idempotency-Key made this job")


class JobOut(BaseModel):
    """A job as seed 004 lists it: who submitted it, which runner ran it, who cancelled it."""

    id: str
    scenario: str
    status: str = Field(description="pending, running, completed, failed or cancelled")
    state: str = Field(description="jobgate's exact run status")
    params: dict[str, Any]
    runner: str | None = Field(description="the runner of the definition version this job ran (not today's)")
    sha256: str = Field(description="the SHA-256 of the scenario content this job ran")
    version: int
    submitted_by: str | None
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancelled_by: str | None
    cancelled_at: datetime | None
    error: str | None
    artifact_sha256: str | None = Field(description="the output file's SHA-256 (hex), when it produced one")
    artifact_size: int | None

    @classmethod
    def of(cls, run: JobRun, runner: str | None, cancelled: Cancellation | None) -> JobOut:
        error = None if run.error_code is None else f"{run.error_code}: {run.error_message or ''}".rstrip(": ")
        return cls(
            id=run.job_run_id,
            scenario=run.job_definition_id,
            status=job_status(run.status),
            state=run.status.value,
            params=dict(run.params),
            runner=runner,
            sha256=sha256_hex(run.definition_digest),
            version=run.definition_version,
            submitted_by=run.requested_by,
            submitted_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.ended_at,
            cancelled_by=None if cancelled is None else cancelled.by,
            cancelled_at=None if cancelled is None else cancelled.at,
            error=error,
            artifact_sha256=None if run.artifact_sha256 is None else sha256_hex(run.artifact_sha256),
            artifact_size=run.artifact_size,
        )


class JobDetailOut(JobOut):
    log: str = Field(
        description="the job's log (its last part when it is long; the whole one at /api/v1/runs/{id}/log)"
    )
    log_truncated: bool


class ScheduleEntryIn(Request):
    """A schedule as the seed's schedule seed file writes one (``scenario``, ``schedule``)."""

    id: str = Field(pattern=IDENTIFIER)
    scenario: str = Field(pattern=IDENTIFIER)
    schedule: str = Field(min_length=1, max_length=200, description="a five-field cron expression")
    params: dict[str, str] = Field(default_factory=dict)
    timezone: str | None = Field(default=None, max_length=64)
    enabled: bool = True
    allow_pending: bool = Field(
        default=False, description="store it paused until its scenario is approved, instead of 422"
    )


class ScheduleEntryOut(BaseModel):
    id: str
    scenario: str
    schedule: str | None = Field(description="the cron expression (None: a schedule of another kind)")
    kind: str
    params: dict[str, Any]
    timezone: str
    enabled: bool
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, stored: StoredSchedule) -> ScheduleEntryOut:
        s: Schedule = stored.schedule
        return cls(
            id=s.schedule_id,
            scenario=s.job_definition_id,
            schedule=s.cron if s.kind is ScheduleKind.CRON else None,
            kind=s.kind.value,
            params=dict(s.params),
            timezone=s.timezone,
            enabled=not s.paused,
            created_at=stored.created_at,
            updated_at=stored.updated_at,
        )


class TokenIssueIn(Request):
    """Seed 004: ``{"name","role","scenarios"}``; ``scenarios`` empty or omitted: all of them."""

    name: str = Field(min_length=1, max_length=200)
    role: Role
    scenarios: list[Annotated[str, Field(pattern=IDENTIFIER)]] = Field(default_factory=list, max_length=1000)
    expires_in_seconds: int | None = Field(default=None, ge=1, le=3650 * 86400)


class TokenIssuedOut(BaseModel):
    id: str
    token: str
    note: str = NOTE_ON_TOKEN


class TokenListedOut(BaseModel):
    """A token without its value (only its hash is stored)."""

    id: str
    name: str
    role: str
    scenarios: list[str] = Field(description="the scenarios it may use; empty: all")
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, t: StoredToken) -> TokenListedOut:
        return cls(
            id=t.token_id,
            name=t.label,
            role=t.role,
            scenarios=[] if t.jobs is None else list(t.jobs),
            created_by=t.created_by,
            created_at=t.created_at,
            expires_at=t.expires_at,
            revoked_at=t.revoked_at,
        )


class RequestProposeIn(Request):
    """Seed 004: ``{"scenario","params","title"}``; ``reason`` defaults to the title."""

    scenario: str = Field(pattern=IDENTIFIER)
    params: dict[str, str] = Field(default_factory=dict)
    title: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, min_length=1, max_length=2000)


class RequestEntryOut(BaseModel):
    """A proposed run: pending until a reviewer approves (``job_id`` links the job it made)
    or rejects it (with a ``note``)."""

    id: str
    scenario: str
    params: dict[str, str]
    title: str
    reason: str
    status: str = Field(description="pending, approved or rejected")
    requested_by: str
    created_at: datetime
    tested_at: datetime | None
    tested_by: str | None
    verdict: dict[str, Any] | None = Field(description="the last dry run's checks")
    decided_at: datetime | None
    decided_by: str | None
    note: str | None
    job_id: str | None

    @classmethod
    def of(cls, r: RequestOut) -> RequestEntryOut:
        return cls(
            id=r.request_id,
            scenario=r.job_definition_id,
            params=r.params,
            title=r.title,
            reason=r.reason,
            status=r.status,
            requested_by=r.requested_by,
            created_at=r.created_at,
            tested_at=r.tested_at,
            tested_by=r.tested_by,
            verdict=r.verdict,
            decided_at=r.decided_at,
            decided_by=r.decided_by,
            note=r.decision_note,
            job_id=r.job_run_id,
        )


class RequestTestedOut(BaseModel):
    """The dry run's verdict: every admission check, nothing stored or executed."""

    request: RequestEntryOut
    admissible: bool
    checks: list[dict[str, Any]]
