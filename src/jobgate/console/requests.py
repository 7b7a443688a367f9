"""The console's four-eyes requests: propose a run, dry-run it, approve or reject it.

Each form calls the API handler of the same action (``api.routes.requests``) with the console
caller, so the rules are the API's: a consumer proposes and sees only their own requests, a
reviewer dry-runs and decides, and the proposer — through any credential of theirs — is
refused as approver by the service whether or not the page showed the button (it does not).
A declared parameter's input carries its pattern, so the browser checks it as it is typed;
the server checks it again.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from jobgate.api.access import PROPOSE, READ, REVIEW, allow, console
from jobgate.api.forms import form_of
from jobgate.api.routes import definitions as definition_routes
from jobgate.api.routes import requests as request_routes
from jobgate.console.pages import act, allowed, caller_of, render, state_of
from jobgate.core.governance import Person, request_refusal
from jobgate.views.schemas import DecisionIn, RejectIn, RequestIn, RequestOut

router = APIRouter(include_in_schema=False)


def _declared_params(request: Request, job: str) -> list[dict[str, Any]]:
    detail = definition_routes.get_definition(job, caller_of(request), state_of(request))
    params = detail.content.get("params") or []
    return [p for p in params if isinstance(p, dict) and isinstance(p.get("name"), str)]


@router.get("/requests", response_class=HTMLResponse)
@allow(READ)
@console
def requests_page(request: Request, job: Annotated[str | None, Query(max_length=200)] = None) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    listed = request_routes.list_requests(caller, state, status=None, limit=200).items
    definitions = definition_routes.list_definitions(caller, state, limit=500).items
    chosen = job if job and any(d.job_definition_id == job for d in definitions) else None
    return render(
        request,
        "requests.html",
        requests=listed,
        definitions=definitions,
        chosen=chosen,
        params=_declared_params(request, chosen) if chosen else [],
        may_propose=allowed(PROPOSE, caller),
    )


@router.post("/requests")
@allow(PROPOSE)
@console
async def propose(request: Request) -> Response:
    form = await form_of(request)
    caller, state = caller_of(request), state_of(request)
    # A field left empty is a parameter not given (a form cannot send "no value"): an optional
    # one takes its default, a required one is refused as missing, not for its pattern.
    params = {k.removeprefix("param."): v for k, v in form.items() if k.startswith("param.") and v != ""}

    def propose_it() -> RequestOut:
        body = RequestIn(
            job_definition_id=form.get("job_definition_id", ""),
            params=params,
            title=form.get("title", ""),
            reason=form.get("reason", ""),
        )
        return request_routes.propose(body, caller, state)

    return await act(
        propose_it,
        done=lambda made: f"/requests/{made.request_id}",
        again=lambda message, status: _problem(request, message, status),
        what="Request not made",
    )


def _problem(request: Request, message: str, status: int) -> HTMLResponse:
    return render(request, "message.html", status=status, title="Request not made", message=message, back="/requests")


def _request_page(request: Request, request_id: str, *, message: str | None = None, status: int = 200) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    stored = request_routes.visible_request(state, caller, request_id)
    found = RequestOut.of(stored)
    reviewer = allowed(REVIEW, caller)
    # The service's own four-eyes rule: the proposer, or anyone who minted or was minted by them.
    own = request_refusal(caller.person, Person(stored.requested_by, stored.requester_lineage)) is not None
    return render(
        request,
        "request.html",
        status=status,
        req=found,
        checks=(found.verdict or {}).get("checks", []),
        may_test=reviewer and found.status == "pending",
        may_decide=reviewer and found.status == "pending" and not own,
        own=own,
        message=message,
    )


@router.get("/requests/{request_id}", response_class=HTMLResponse)
@allow(READ)
@console
def request_page(request: Request, request_id: str) -> HTMLResponse:
    return _request_page(request, request_id)


async def _act(request: Request, request_id: str, action: str) -> Response:
    form = await form_of(request)
    caller, state = caller_of(request), state_of(request)

    def decide() -> object:
        if action == "test":
            return request_routes.test_request(request_id, caller, state)
        if action == "approve":
            return request_routes.approve_request(request_id, caller, state, DecisionIn(note=form.get("note") or None))
        return request_routes.reject_request(request_id, RejectIn(note=form.get("note", "")), caller, state)

    return await act(
        decide,
        done=lambda _: f"/requests/{request_id}",
        again=lambda message, status: _request_page(request, request_id, message=message, status=status),
        what="Not done",
    )


@router.post("/requests/{request_id}/test")
@allow(REVIEW)
@console
async def test_request(request: Request, request_id: str) -> Response:
    return await _act(request, request_id, "test")


@router.post("/requests/{request_id}/approve")
@allow(REVIEW)
@console
async def approve_request(request: Request, request_id: str) -> Response:
    return await _act(request, request_id, "approve")


@router.post("/requests/{request_id}/reject")
@allow(REVIEW)
@console
async def reject_request(request: Request, request_id: str) -> Response:
    return await _act(request, request_id, "reject")
