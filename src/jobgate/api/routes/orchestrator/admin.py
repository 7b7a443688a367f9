"""Seed 004 schedules and tokens, over the ``/api/v1`` handlers that own them.

Each handler here delegates to the ``/api/v1`` handler of the same action (which holds the
tenant, definition-list and four-eyes checks) and only translates the body: the seed's
schedule entry (``scenario``, ``schedule``) and token (``name``, ``role``, ``scenarios``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from jobgate.api.access import ADMIN, OPERATE, READ, WholeTenant, allow, principal
from jobgate.api.responses import repeated
from jobgate.api.routes import admin as v1_admin
from jobgate.api.routes import operations as v1_operations
from jobgate.api.routes.orchestrator.fields import seed_names
from jobgate.api.routes.orchestrator.paths import PREFIX
from jobgate.api.server_state import ServerState, server_state
from jobgate.service import tokens
from jobgate.service.tokens import Principal
from jobgate.views.orchestrator import ScheduleEntryIn, ScheduleEntryOut, TokenIssuedOut, TokenIssueIn, TokenListedOut
from jobgate.views.schemas import ScheduleCreateIn, TokenCreateIn

router = APIRouter(prefix=PREFIX, tags=["orchestrator compatibility"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


def _schedule(state: ServerState, caller: Principal, schedule_id: str) -> ScheduleEntryOut:
    return ScheduleEntryOut.of(v1_operations.visible_schedule(state, caller, schedule_id))


@router.get("/schedules", response_model=list[ScheduleEntryOut])
@allow(READ)
def list_schedules(caller: Caller, state: State) -> list[ScheduleEntryOut]:
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = [i for i in tx.schedules_list(caller.tenant_id) if caller.may_use(i.schedule.job_definition_id)]
    return [ScheduleEntryOut.of(i) for i in found]


@router.post("/schedules", status_code=201, response_model=ScheduleEntryOut, responses=repeated(ScheduleEntryOut))
@allow(OPERATE)
def add_schedule(body: ScheduleEntryIn, response: Response, caller: Caller, state: State) -> ScheduleEntryOut:
    """Add (201) or replace (200) a cron schedule written as a seed file entry; magic params
    (``{{current_month}}``, ``{{current_date}}``, ``{{yesterday}}``) resolve at each fire."""
    doc: dict[str, object] = {
        "id": body.id,
        "job": body.scenario,
        "cron": body.schedule,
        "params": dict(body.params),
        "paused": not body.enabled,
    }
    if body.timezone is not None:
        doc["timezone"] = body.timezone
    with seed_names(job="scenario", cron="schedule", paused="enabled", schedule="schedule"):
        v1_operations.add_schedule(
            ScheduleCreateIn(schedule=doc, allow_pending=body.allow_pending), response, caller, state
        )
    return _schedule(state, caller, body.id)


@router.patch("/schedules/{schedule_id}/enable", response_model=ScheduleEntryOut)
@allow(OPERATE)
def enable_schedule(schedule_id: str, caller: Caller, state: State) -> ScheduleEntryOut:
    """Resume (a repeat changes and records nothing)."""
    v1_operations.enable_schedule(schedule_id, caller, state)
    return _schedule(state, caller, schedule_id)


@router.patch("/schedules/{schedule_id}/disable", response_model=ScheduleEntryOut)
@allow(OPERATE)
def disable_schedule(schedule_id: str, caller: Caller, state: State) -> ScheduleEntryOut:
    """Pause (a repeat changes and records nothing)."""
    v1_operations.disable_schedule(schedule_id, caller, state)
    return _schedule(state, caller, schedule_id)


@router.delete("/schedules/{schedule_id}", status_code=204, response_class=Response)
@allow(OPERATE)
def delete_schedule(schedule_id: str, caller: Caller, state: State) -> Response:
    return v1_operations.delete_schedule(schedule_id, caller, state)


@router.get("/tokens", response_model=list[TokenListedOut], dependencies=[v1_admin.TokensInUse])
@allow(ADMIN)
def list_tokens(caller: WholeTenant, state: State) -> list[TokenListedOut]:
    """The tenant's tokens, never their values (only hashes are stored)."""
    return [TokenListedOut.of(t) for t in tokens.listed(state.engine, caller.tenant_id)]


@router.post("/tokens", status_code=201, response_model=TokenIssuedOut, dependencies=[v1_admin.TokensInUse])
@allow(ADMIN)
def issue_token(body: TokenIssueIn, caller: WholeTenant, state: State) -> TokenIssuedOut:
    """A token of the caller's tenant: the raw value is in this response only. 501 when this
    server accepts no jobgate tokens (people sign in through LDAP or OIDC)."""
    with seed_names(jobs="scenarios", label="name"):
        made = v1_admin.create_token(
            TokenCreateIn(
                role=body.role,
                label=body.name,
                jobs=list(body.scenarios) or None,
                expires_in_seconds=body.expires_in_seconds,
            ),
            caller,
            state,
        )
    return TokenIssuedOut(id=made.info.token_id, token=made.token)


@router.delete("/tokens/{token_id}", status_code=204, response_class=Response, dependencies=[v1_admin.TokensInUse])
@allow(ADMIN)
def revoke_token(token_id: str, caller: WholeTenant, state: State) -> Response:
    return v1_admin.revoke_token(token_id, caller, state)
