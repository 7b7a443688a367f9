"""SLA breaches and reminders over HTTP (seed 000 §22-23): what the SLA monitor recorded."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from jobgate.api import pagination
from jobgate.api.access import READ, allow, principal
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.records import BreachRecord
from jobgate.core.sla import DeadlineKind, Phase
from jobgate.service import sla
from jobgate.service.tokens import Principal
from jobgate.views.schemas import Page

router = APIRouter(prefix="/api/v1", tags=["sla"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


class SlaBreachOut(BaseModel):
    """The seed §23 fields, with the subject named as ``job_run_id`` or ``workflow_run_id``."""

    sla_breach_id: str
    job_run_id: str | None
    workflow_run_id: str | None
    job_class: str
    job_definition_id: str
    eco_number: str | None
    sla_policy: str
    kind: DeadlineKind
    phase: Phase
    deadline: datetime
    breached_at: datetime
    severity: str
    requires_escalation: bool
    escalated: bool

    @classmethod
    def of(cls, b: BreachRecord) -> SlaBreachOut:
        workflow = b.subject_kind == "workflow"
        return cls(
            sla_breach_id=b.sla_breach_id,
            job_run_id=None if workflow else b.subject_id,
            workflow_run_id=b.subject_id if workflow else None,
            job_class=b.job_class,
            job_definition_id=b.job_definition_id,
            eco_number=b.eco_number,
            sla_policy=b.sla_policy,
            kind=DeadlineKind(b.kind),
            phase=Phase(b.phase),
            deadline=b.deadline,
            breached_at=b.detected_at,
            severity=b.severity,
            requires_escalation=b.requires_escalation,
            escalated=b.escalated,
        )


@router.get("/sla/breaches", response_model=Page[SlaBreachOut])
@allow(READ)
def list_sla_breaches(
    caller: Caller,
    state: State,
    phase: Phase | None = None,
    kind: DeadlineKind | None = None,
    subject_id: Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")] = None,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> Page[SlaBreachOut]:
    """The tenant's SLA breaches and reminders, newest first; a token limited to definitions
    sees only theirs. ``subject_id``: one run or workflow run."""
    found = sla.breaches(
        state.engine,
        caller.tenant_id,
        phase=None if phase is None else phase.value,
        kind=None if kind is None else kind.value,
        subject_id=subject_id,
        job_definition_ids=caller.jobs,
        before=pagination.decode_time_key(cursor),
        limit=limit + 1,
    )
    page, more = found[:limit], len(found) > limit
    next_cursor = pagination.encode_time_key(page[-1].detected_at, page[-1].sla_breach_id) if more else None
    return Page[SlaBreachOut](items=[SlaBreachOut.of(b) for b in page], next_cursor=next_cursor)
