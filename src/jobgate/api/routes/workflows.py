"""Workflow runs over HTTP: start, list, status (seed 000 §44), transitions, cancel.

Like runs, a workflow run of another tenant is a 404, and an activator may cancel only the
workflow runs it started. Starting goes through every gate a run meets; ``Idempotency-Key``
makes a repeated start return the first workflow run (200 instead of 201).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response

from jobgate.api import pagination
from jobgate.api.access import READ, RUN, RUN_CONTROL, allow, principal
from jobgate.api.errors import Forbidden
from jobgate.api.responses import repeated
from jobgate.api.routes.runs import ensure_may_use
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import NotFoundError
from jobgate.core.models import Scope
from jobgate.core.records import WorkflowRecord
from jobgate.core.trace import parse_traceparent
from jobgate.service import manual
from jobgate.service import workflows as workflow_service
from jobgate.service.tokens import Principal
from jobgate.service.workflows import StartWorkflow, WorkflowView
from jobgate.views.schemas import Page, WorkflowRunOut, WorkflowStartIn, WorkflowTransitionOut
from jobgate.workflows.plan import WorkflowStatusName

router = APIRouter(prefix="/api/v1", tags=["workflows"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


def visible_workflow(state: ServerState, caller: Principal, workflow_run_id: str) -> WorkflowView:
    """The workflow run if the caller may see it; otherwise the same 404 as a missing one."""
    view = workflow_service.workflow_view(state.engine, workflow_run_id, caller.tenant_id)
    if not caller.may_use(view.record.job_definition_id):
        raise NotFoundError(f"no workflow run {workflow_run_id!r}", field="workflow_run_id")
    return view


@router.post("/workflows", status_code=201, response_model=WorkflowRunOut, responses=repeated(WorkflowRunOut))
@allow(RUN)
def start_workflow(
    body: WorkflowStartIn,
    response: Response,
    caller: Caller,
    state: State,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
    traceparent: Annotated[str | None, Header(max_length=200)] = None,
) -> WorkflowRunOut:
    """Start a workflow run of an approved workflow definition."""
    ensure_may_use(caller, body.job_definition_id)
    with manual.quota_turn(state.engine, caller.tenant_id):  # counted and started as one step
        record, created = _start(body, caller, state, idempotency_key, traceparent)
    if not created:
        response.status_code = 200
    return WorkflowRunOut.of(workflow_service.workflow_view(state.engine, record.workflow_run_id, caller.tenant_id))


def _start(
    body: WorkflowStartIn, caller: Principal, state: ServerState, key: str | None, traceparent: str | None
) -> tuple[WorkflowRecord, bool]:
    return workflow_service.start_workflow(
        state.engine,
        StartWorkflow(
            job_definition_id=body.job_definition_id,
            params=body.params,
            scope=Scope(tenant_id=caller.tenant_id),
            requested_by=caller.actor,
            reason=body.reason,
            client_key=key,
            role=caller.role.value,
            traceparent=parse_traceparent(traceparent),
        ),
        actor=caller.actor,
        quota=lambda steps: manual.check_daily_quota(state.engine, caller.tenant_id, adding=steps),  # its steps
    )


@router.get("/workflows", response_model=Page[WorkflowRunOut])
@allow(READ)
def list_workflows(
    caller: Caller,
    state: State,
    status: WorkflowStatusName | None = None,
    job_definition_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: str | None = None,
) -> Page[WorkflowRunOut]:
    """Newest first; ``next_cursor`` fetches the next page."""
    before = pagination.decode_time_key(cursor)
    items: list[WorkflowRunOut] = []
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        while len(items) < limit:
            page = tx.workflows_list(
                caller.tenant_id,
                status=status,
                job_definition_id=job_definition_id,
                before=before,
                limit=limit,
            )
            for r in page:
                before = (r.created_at, r.workflow_run_id)
                if caller.may_use(r.job_definition_id):
                    view = WorkflowView(r, tx.workflow_steps(r.workflow_run_id), [])
                    items.append(WorkflowRunOut.of(view))
                    if len(items) == limit:
                        break
            if len(page) < limit:
                before = None
                break
    next_cursor = None if before is None or len(items) < limit else pagination.encode_time_key(*before)
    return Page[WorkflowRunOut](items=items, next_cursor=next_cursor)


@router.get("/workflows/{workflow_run_id}", response_model=WorkflowRunOut)
@allow(READ)
def get_workflow(workflow_run_id: str, caller: Caller, state: State) -> WorkflowRunOut:
    """Seed 000 §44: status, current step, completed and remaining steps."""
    return WorkflowRunOut.of(visible_workflow(state, caller, workflow_run_id))


@router.get("/workflows/{workflow_run_id}/transitions", response_model=list[WorkflowTransitionOut])
@allow(READ)
def workflow_transitions(workflow_run_id: str, caller: Caller, state: State) -> list[WorkflowTransitionOut]:
    """Every state change of the workflow and its steps, in order (what replay recomputes)."""
    view = visible_workflow(state, caller, workflow_run_id)
    return [
        WorkflowTransitionOut(
            seq=t.seq,
            step_id=t.step_id,
            from_status=t.from_status,
            to_status=t.to_status,
            reason=t.reason,
            actor=t.actor,
            at=t.at,
            detail=dict(t.detail),
        )
        for t in view.transitions
    ]


@router.post("/workflows/{workflow_run_id}/cancel", response_model=WorkflowRunOut)
@allow(RUN_CONTROL)
def cancel_workflow(workflow_run_id: str, caller: Caller, state: State) -> WorkflowRunOut:
    """Cancel pending steps and stop running ones (409 when the workflow already ended)."""
    view = visible_workflow(state, caller, workflow_run_id)
    if caller.role in RUN_CONTROL.owner_roles and view.record.requested_by != caller.actor:
        raise Forbidden(f"role {caller.role.value} may act on its own workflow runs only", field="workflow_run_id")
    workflow_service.cancel_workflow(state.engine, workflow_run_id, actor=caller.actor, tenant_id=caller.tenant_id)
    return WorkflowRunOut.of(workflow_service.workflow_view(state.engine, workflow_run_id, caller.tenant_id))
