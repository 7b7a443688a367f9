"""The four-eyes request workflow over HTTP (seed 004): propose, list, read, test, approve, reject.

A consumer sees only the requests it proposed (another's answers 404, like a missing one);
reviewers (operators, admins) see the tenant's. Approval creates the run through the normal
pipeline, so every gate applies at that moment; the proposer can never approve its own.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from jobgate.api import pagination
from jobgate.api.access import PROPOSE, READ, REVIEW, allow, principal
from jobgate.api.routes.runs import ensure_may_use
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import NotFoundError
from jobgate.core.records import RunRequest
from jobgate.core.tokens import Role
from jobgate.service import manual, requests
from jobgate.service.tokens import Principal
from jobgate.views.schemas import DecisionIn, Page, RejectIn, RequestIn, RequestOut, TestedOut

router = APIRouter(prefix="/api/v1", tags=["requests"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


def _own_only(caller: Principal) -> str | None:
    """Consumers see their own requests only."""
    return caller.actor if caller.role is Role.CONSUMER else None


def visible_request(state: ServerState, caller: Principal, request_id: str) -> RunRequest:
    found = requests.get(state.engine, caller.tenant_id, request_id, visible_to=_own_only(caller))
    if not caller.may_use(found.job_definition_id):
        raise NotFoundError(f"no request {request_id!r}", field="request_id")
    return found


@router.post("/requests", status_code=201, response_model=RequestOut)
@allow(PROPOSE)
def propose(body: RequestIn, caller: Caller, state: State) -> RequestOut:
    """Propose a run; it waits, pending, for a reviewer."""
    ensure_may_use(caller, body.job_definition_id)
    made = requests.propose(
        state.engine,
        tenant_id=caller.tenant_id,
        requester=caller.actor,
        job_definition_id=body.job_definition_id,
        params=body.params,
        title=body.title,
        reason=body.reason,
        requester_lineage=caller.minted_by,
    )
    return RequestOut.of(made)


@router.get("/requests", response_model=Page[RequestOut])
@allow(READ)
def list_requests(
    caller: Caller,
    state: State,
    status: Literal["pending", "approved", "rejected"] | None = None,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: str | None = None,
) -> Page[RequestOut]:
    """Newest first: a consumer's own, anyone else's tenant's (a token limited to some
    definitions: theirs); ``next_cursor`` fetches the next page."""
    found = requests.listed(
        state.engine,
        caller.tenant_id,
        status=status,
        requested_by=_own_only(caller),
        job_definition_ids=caller.jobs,
        before=pagination.decode_time_key(cursor),
        limit=limit,
    )
    last = found[-1] if len(found) == limit else None
    next_cursor = None if last is None else pagination.encode_time_key(last.created_at, last.request_id)
    return Page[RequestOut](items=[RequestOut.of(r) for r in found], next_cursor=next_cursor)


@router.get("/requests/{request_id}", response_model=RequestOut)
@allow(READ)
def get_request(request_id: str, caller: Caller, state: State) -> RequestOut:
    return RequestOut.of(visible_request(state, caller, request_id))


@router.post("/requests/{request_id}/test", response_model=TestedOut)
@allow(REVIEW)
def test_request(request_id: str, caller: Caller, state: State) -> TestedOut:
    """A dry run: every admission check, nothing stored or executed; the verdict is kept."""
    visible_request(state, caller, request_id)
    request, verdict = requests.test(state.engine, caller.tenant_id, request_id, actor=caller.actor)
    return TestedOut(request=RequestOut.of(request), admissible=verdict.admissible, checks=verdict.as_dict()["checks"])


@router.post("/requests/{request_id}/approve", response_model=RequestOut)
@allow(REVIEW)
def approve_request(request_id: str, caller: Caller, state: State, body: DecisionIn | None = None) -> RequestOut:
    """Create the run of the version the last dry run saw and link it (403 for the proposer, or
    anyone whose token minted or was minted by the proposer's; 403 when a gate refuses; 409 when
    the definition changed since the test)."""
    asked = visible_request(state, caller, request_id)
    note = None if body is None else body.note
    with manual.quota_turn(state.engine, caller.tenant_id):  # an approval creates a run: it counts
        manual.check_daily_quota(state.engine, caller.tenant_id, [asked.job_definition_id])
        approved = requests.approve(
            state.engine, caller.tenant_id, request_id, actor=caller.actor, note=note, approver=caller.person
        )
    return RequestOut.of(approved)


@router.post("/requests/{request_id}/reject", response_model=RequestOut)
@allow(REVIEW)
def reject_request(request_id: str, body: RejectIn, caller: Caller, state: State) -> RequestOut:
    visible_request(state, caller, request_id)
    return RequestOut.of(
        requests.reject(state.engine, caller.tenant_id, request_id, actor=caller.actor, note=body.note)
    )
