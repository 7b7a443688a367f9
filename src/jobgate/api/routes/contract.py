"""The seed 000 contract: ``POST /schedule`` (§42), ``POST /cancel`` (§43) and the workflow
status (§44), at ``/api/v1/…`` and at the seed's own route
``/api/trustgate/MEID_TRUST_ROUTE_SCHEDULER/…`` (the same handlers, rules and bodies).

Request and response bodies are the seed's. Two rules the seed leaves open are fixed here:
the tenant is the token's (a ``scope.tenant_id`` naming another tenant is refused, never
obeyed), and ``trigger.requested_by`` is what the caller states — it is kept in the trigger's
payload, while the run's ``requested_by`` is the authenticated token, so an audit names who
actually asked.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header

from jobgate.api.access import RUN, RUN_CONTROL, allow, check_run_access, principal
from jobgate.api.errors import TenantClaimMismatch
from jobgate.api.routes.runs import ensure_may_use, visible_run
from jobgate.api.routes.workflows import get_workflow
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.models import Scope
from jobgate.core.params import check_text
from jobgate.service import control, manual
from jobgate.service.tokens import Principal
from jobgate.views.schemas import CancelIn, CancelOut, ScheduleIn, ScheduleOut, WorkflowRunOut

router = APIRouter(prefix="/api/v1", tags=["seed contract"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


@router.post("/schedule", response_model=ScheduleOut)
@allow(RUN)
def schedule_job(
    body: ScheduleIn,
    caller: Caller,
    state: State,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    traceparent: Annotated[str | None, Header()] = None,
) -> ScheduleOut:
    """Seed 000 §42: schedule one manual run of a definition."""
    if body.scope.tenant_id is not None and body.scope.tenant_id != caller.tenant_id:
        raise TenantClaimMismatch(field="scope.tenant_id")
    ensure_may_use(caller, body.job_definition_id)
    keys = () if body.scope.eco_number is None else (("eco_number", body.scope.eco_number),)
    scope = Scope(caller.tenant_id, body.scope.environment, body.scope.region, keys)
    result = manual.submit_manual(
        state.engine,
        scope=scope,
        actor=caller.actor,
        job_definition_id=body.job_definition_id,
        params=body.params,
        reason=body.trigger.reason,
        idempotency_key=idempotency_key,
        role=caller.role.value,
        stated_requester=body.trigger.requested_by,
        traceparent=traceparent,
    )
    run = result.run
    return ScheduleOut(
        status=run.status.value.lower(),
        job_run_id=run.job_run_id,
        config_snapshot_id=run.config_snapshot_id,
        scheduled_for=run.due_at,
    )


@router.post("/cancel", response_model=CancelOut)
@allow(RUN_CONTROL)
def cancel_job(body: CancelIn, caller: Caller, state: State) -> CancelOut:
    """Seed 000 §43: cancel a pending run (a running one is 409: stop it instead)."""
    run = visible_run(state, caller, body.job_run_id)
    check_run_access(RUN_CONTROL, caller, run)
    reason = body.reason
    check_text(body.requested_by, "requested_by")  # folded into the reason: one line, printable
    if body.requested_by:
        reason = f"{reason or 'cancelled'} (stated by {body.requested_by})"
    done = control.cancel_run(
        state.engine, body.job_run_id, actor=caller.actor, reason=reason, tenant_id=caller.tenant_id
    )
    return CancelOut(status=done.status.value.lower(), job_run_id=done.job_run_id, audit_required=True)


# Seed 000 §42-44 name the route by the engine's MEID: served there too, so a client of the
# specification calls it as written.
SEED_ROUTE = "/api/trustgate/MEID_TRUST_ROUTE_SCHEDULER"
seed_router = APIRouter(prefix=SEED_ROUTE, tags=["seed contract"])
seed_router.add_api_route("/schedule", schedule_job, methods=["POST"], response_model=ScheduleOut)
seed_router.add_api_route("/cancel", cancel_job, methods=["POST"], response_model=CancelOut)
seed_router.add_api_route("/workflows/{workflow_run_id}", get_workflow, methods=["GET"], response_model=WorkflowRunOut)
