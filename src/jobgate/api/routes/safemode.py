"""Safe mode over HTTP (seed 000 §39-40): its state for every reader, the switch for admins."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from jobgate.api.access import ADMIN, READ, WholeTenant, allow, principal
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.records import SafeModePeriod
from jobgate.service import safemode
from jobgate.service.tokens import Principal
from jobgate.views.schemas import SafeModeIn, SafeModeOut

router = APIRouter(prefix="/api/v1", tags=["safe mode"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


def _out(tenant_id: str, p: SafeModePeriod | None, run_id: str | None = None) -> SafeModeOut:
    if p is None:
        return SafeModeOut(
            tenant_id=tenant_id, active=False, activation=None, reason=None, since=None, by=None, actions={}
        )
    if p.active:
        return SafeModeOut(
            tenant_id=tenant_id, active=True, activation=p.activation, reason=p.reason, since=p.activated_at,
            by=p.activated_by, actions=p.actions, safe_mode_job_run_id=run_id,
        )  # fmt: skip
    return SafeModeOut(
        tenant_id=tenant_id, active=False, activation=p.activation, reason=p.deactivation_reason,
        since=p.deactivated_at, by=p.deactivated_by, actions={}, safe_mode_job_run_id=run_id,
    )  # fmt: skip


@router.get("/safe-mode", response_model=SafeModeOut)
@allow(READ)
def safe_mode_state(caller: Caller, state: State) -> SafeModeOut:
    """Whether safe mode is on for the tenant, since when, by whom, why, and what it enforces."""
    return _out(caller.tenant_id, safemode.status(state.engine, caller.tenant_id))


@router.post("/safe-mode", response_model=SafeModeOut)
@allow(ADMIN)
def switch_safe_mode(body: SafeModeIn, caller: WholeTenant, state: State) -> SafeModeOut:
    """Activate (``active: true``) or deactivate, with a reason; 409 when already in that state."""
    period, run_id = safemode.switch(
        state.engine, caller.tenant_id, body.active, actor=caller.actor, reason=body.reason
    )
    return _out(caller.tenant_id, period, run_id)
