"""Seed 004's request workflow (``/requests…``) over the ``/api/v1/requests`` handlers.

Propose, list, read, dry-run, approve, reject: the same handlers, rules and four-eyes checks
as ``/api/v1``; only the body speaks the seed's words (``scenario``, ``job_id``, ``note``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends

from jobgate.api.access import PROPOSE, READ, REVIEW, allow, principal
from jobgate.api.routes import requests as v1
from jobgate.api.routes.orchestrator.fields import seed_names
from jobgate.api.routes.orchestrator.paths import PREFIX
from jobgate.api.server_state import ServerState, server_state
from jobgate.service.tokens import Principal
from jobgate.views.orchestrator import RequestEntryOut, RequestProposeIn, RequestTestedOut
from jobgate.views.schemas import DecisionIn, RejectIn, RequestIn

router = APIRouter(prefix=PREFIX, tags=["orchestrator compatibility"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


@router.post("/requests", status_code=201, response_model=RequestEntryOut)
@allow(PROPOSE)
def propose(body: RequestProposeIn, caller: Caller, state: State) -> RequestEntryOut:
    """Propose a run of ``scenario``; it waits, pending, for a reviewer."""
    ask = RequestIn(
        job_definition_id=body.scenario, params=body.params, title=body.title, reason=body.reason or body.title
    )
    with seed_names(job_definition_id="scenario"):
        return RequestEntryOut.of(v1.propose(ask, caller, state))


@router.get("/requests", response_model=list[RequestEntryOut])
@allow(READ)
def list_requests(
    caller: Caller, state: State, status: Literal["pending", "approved", "rejected"] | None = None
) -> list[RequestEntryOut]:
    """A consumer's own requests; a reviewer's whole tenant's. Newest first."""
    return [RequestEntryOut.of(r) for r in v1.list_requests(caller, state, status=status).items]


@router.get("/requests/{request_id}", response_model=RequestEntryOut)
@allow(READ)
def get_request(request_id: str, caller: Caller, state: State) -> RequestEntryOut:
    return RequestEntryOut.of(v1.get_request(request_id, caller, state))


@router.post("/requests/{request_id}/test", response_model=RequestTestedOut)
@allow(REVIEW)
def test_request(request_id: str, caller: Caller, state: State) -> RequestTestedOut:
    """Dry run: params and every gate checked, nothing stored or executed."""
    done = v1.test_request(request_id, caller, state)
    return RequestTestedOut(request=RequestEntryOut.of(done.request), admissible=done.admissible, checks=done.checks)


@router.post("/requests/{request_id}/approve", response_model=RequestEntryOut)
@allow(REVIEW)
def approve_request(request_id: str, caller: Caller, state: State, body: DecisionIn | None = None) -> RequestEntryOut:
    """Run it (the job is linked as ``job_id``); the proposer may never approve their own."""
    return RequestEntryOut.of(v1.approve_request(request_id, caller, state, body))


@router.post("/requests/{request_id}/reject", response_model=RequestEntryOut)
@allow(REVIEW)
def reject_request(request_id: str, body: RejectIn, caller: Caller, state: State) -> RequestEntryOut:
    return RequestEntryOut.of(v1.reject_request(request_id, body, caller, state))
