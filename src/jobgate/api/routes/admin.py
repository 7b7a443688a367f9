"""Cluster and tenant views (workers, quota usage, doctor) and token administration.

Workers follow seed 002: the execution mode this server runs in (``embedded`` when it
executes runs itself) is reported apart from the registrations, so an empty registry beside
an embedded worker is not read as "nothing executes". The registration's host, pid and free
metadata are not returned; the worker id is, because run attempts record it as the evidence
of where each attempt ran (by default it names the host and process: ``host:pid:suffix``).
Token administration is the admin's, within its tenant: raw values are shown once, at
creation, and another tenant's token answers 404 like a missing one.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, Field

from jobgate.api import pagination
from jobgate.api.access import ADMIN, GOVERNANCE_READ, OPERATE, READ, WholeTenant, allow, principal
from jobgate.api.errors import NotImplementedHere
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.capabilities import advertised
from jobgate.service import cluster, doctor, manual, tokens
from jobgate.service.tokens import Principal
from jobgate.views import governance
from jobgate.views.schemas import (
    CheckOut,
    Page,
    QuotaUsageOut,
    ReadyOut,
    TokenCreatedOut,
    TokenCreateIn,
    TokenOut,
    WorkerOut,
    WorkersOut,
)

router = APIRouter(prefix="/api/v1", tags=["administration"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


def tokens_in_use(state: State) -> None:
    """Seed 004: with jobgate's tokens turned off (``auth.tokens: false``: people sign in through
    the directory or the identity provider alone), the token routes answer 501 saying so, rather
    than mint or list credentials nothing accepts."""
    if state.auth and not state.authenticator.settings.tokens:
        raise NotImplementedHere(
            "this server accepts no jobgate tokens (auth.tokens: false); people sign in through "
            + " and ".join(
                p for p, on in (("LDAP", state.authenticator.ldap), ("OIDC", state.authenticator.oidc)) if on
            )
        )


TokensInUse = Depends(tokens_in_use)


@router.get("/workers", response_model=WorkersOut)
@router.get("/scheduler/workers", response_model=WorkersOut)  # seed 001 §5.1's path
@allow(READ)
def list_workers(
    state: State, caller: Annotated[Principal, Depends(principal)], limit: Annotated[int, Query(ge=1, le=100)] = 20
) -> WorkersOut:
    """The cluster's workers; ``cannot_run`` names the caller's definitions (the ones it may
    see) a worker found it cannot execute on its host, as the worker advertised them."""
    rows = cluster.workers(state.engine)
    active = sum(1 for r in rows if r.state == "alive")
    stale = sum(1 for r in rows if r.state == "stale")
    embedded = state.embedded_worker
    rows.sort(key=lambda r: (-r.info.heartbeat_at.timestamp(), r.info.worker_id))
    return WorkersOut(
        execution_mode="embedded" if embedded else "standalone",
        execution_availability="available" if embedded or active else "unavailable",
        visibility_state="registrations" if rows else "no_registrations",
        total=len(rows),
        active=active,
        stale=stale,
        items=[
            WorkerOut(
                worker_id=r.info.worker_id,
                state=r.state,
                concurrency=r.info.concurrency,
                queues=list(r.info.queues),
                started_at=r.info.started_at,
                heartbeat_at=r.info.heartbeat_at,
                heartbeat_age_seconds=round(r.heartbeat_age / timedelta(seconds=1), 3),
                cannot_run=sorted(
                    {
                        c.job_definition_id
                        for c in map(advertised, r.info.capabilities.values())
                        if not c.runnable and c.tenant_id == caller.tenant_id and caller.may_use(c.job_definition_id)
                    }
                ),
            )
            for r in rows[:limit]
        ],
    )


@router.get("/quotas/usage", response_model=QuotaUsageOut)
@allow(READ)
def quota_usage(caller: WholeTenant, state: State) -> QuotaUsageOut:
    """Seed 001: the caller's tenant's runs created in the current UTC day [start, next start);
    every state and every retry counts."""
    now = state.engine.clock.now()
    used, start, end = manual.runs_created_today(state.engine, caller.tenant_id, now)
    return QuotaUsageOut(
        tenant_id=caller.tenant_id,
        unit="runs",
        period_start=start,
        period_end=end,
        measured_at=now,
        used=used,
        limit=state.engine.config.server.daily_run_quota,
    )


@router.get("/doctor", response_model=ReadyOut)
@allow(OPERATE)
def run_doctor(caller: WholeTenant, state: State) -> ReadyOut:
    """Each check green, amber or red with its reason; ``ready`` is false when any is red."""
    checks = doctor.run_checks(state.engine, tenant_id=caller.tenant_id, embedded_worker=state.embedded_worker)
    return ReadyOut(
        ready=doctor.worst(checks) is not doctor.Level.RED,
        checks=[CheckOut(name=c.name, status=c.level.value, detail=c.detail) for c in checks],
    )


class GovernanceSettingOut(BaseModel):
    name: str = Field(description="the key in jobgate.yaml")
    value: str
    meaning: str


@router.get("/governance/settings", response_model=list[GovernanceSettingOut])
@allow(GOVERNANCE_READ)
def governance_settings(caller: WholeTenant, state: State) -> list[GovernanceSettingOut]:
    """The governance settings in force (``views.governance``), read-only: they change only in
    ``jobgate.yaml``. Paths, URLs and secrets are reported as configured or not, never shown."""
    del caller
    return [GovernanceSettingOut(**asdict(s)) for s in governance.governance_settings(state.engine.config)]


@router.get("/tokens", response_model=Page[TokenOut], dependencies=[TokensInUse])
@allow(ADMIN)
def list_tokens(
    caller: WholeTenant,
    state: State,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> Page[TokenOut]:
    found = tokens.listed(state.engine, caller.tenant_id)
    page, next_cursor = pagination.page_in_memory(found, lambda t: t.token_id, cursor=cursor, limit=limit)
    return Page[TokenOut](items=[TokenOut.of(t) for t in page], next_cursor=next_cursor)


@router.post("/tokens", status_code=201, response_model=TokenCreatedOut, dependencies=[TokensInUse])
@allow(ADMIN)
def create_token(body: TokenCreateIn, caller: WholeTenant, state: State) -> TokenCreatedOut:
    """A token of the caller's tenant. The raw value is in this response only. It belongs to
    ``principal`` (default: the caller); either way the caller is recorded as its minter, and four
    eyes never lets a token approve what its minter applied or proposed, nor the other way round."""
    made = tokens.create(
        state.engine,
        tenant_id=caller.tenant_id,
        role=body.role.value,
        actor=caller.actor,
        label=body.label,
        jobs=body.jobs,
        expires_in=None if body.expires_in_seconds is None else timedelta(seconds=body.expires_in_seconds),
        principal=body.principal,
        minted_by=caller,
    )
    return TokenCreatedOut(token=made.token, info=TokenOut.of(made.stored))


@router.delete("/tokens/{token_id}", status_code=204, response_class=Response, dependencies=[TokensInUse])
@allow(ADMIN)
def revoke_token(token_id: str, caller: WholeTenant, state: State) -> Response:
    """Revoke at once: the next request with it is a 401. Revoking twice changes nothing."""
    tokens.revoke(state.engine, caller.tenant_id, token_id, actor=caller.actor)
    return Response(status_code=204)
