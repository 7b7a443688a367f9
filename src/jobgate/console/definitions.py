"""The console's definitions: versions, a side-by-side diff of any two, the approval state, and
approve / revoke.

The approve form shows the exact content digest and code digest being approved and sends
them; the service refuses (409) if either changed since the page was drawn, and refuses a
second credential of the applier (403 ``four_eyes``) — the page says which, in the service's
words. Reads and actions go through the API handlers they mirror.
"""

from __future__ import annotations

import difflib
import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from jobgate.api.access import ADMIN, GOVERNANCE_READ, READ, allow, console
from jobgate.api.forms import form_of
from jobgate.api.routes import definitions as definition_routes
from jobgate.api.routes.runs import ensure_may_use
from jobgate.console.pages import act, allowed, caller_of, render, state_of
from jobgate.core.errors import NotFoundError
from jobgate.views.schemas import ApproveIn, refuse_nul

router = APIRouter(include_in_schema=False)


@router.get("/definitions", response_class=HTMLResponse)
@allow(READ)
@console
def definitions_page(request: Request) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    listed = definition_routes.list_definitions(caller, state, limit=500).items
    return render(request, "definitions.html", definitions=listed)


def _contents(request: Request, job: str) -> dict[int, str]:
    """Every version's content as the canonical JSON lines a diff compares, by version."""
    caller, state = caller_of(request), state_of(request)
    ensure_may_use(caller, job)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        versions = tx.definition_versions(caller.tenant_id, job)
    if not versions:
        raise NotFoundError(f"no job definition {job!r}", field="job_definition_id")
    return {v.version: json.dumps(dict(v.content), indent=2, sort_keys=True) for v in versions}


def _definition_page(
    request: Request,
    job: str,
    *,
    left: int | None = None,
    right: int | None = None,
    message: str | None = None,
    status: int = 200,
) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    versions = definition_routes.definition_versions(job, caller, state)
    contents = _contents(request, job)
    current = max(contents)
    left = left if left in contents else max(current - 1, min(contents))
    right = right if right in contents else current
    diff = difflib.HtmlDiff(tabsize=2, wrapcolumn=70).make_table(
        contents[left].splitlines(), contents[right].splitlines(), f"version {left}", f"version {right}", context=True
    )
    approval = definition_routes.definition_approval(job, caller, state) if allowed(GOVERNANCE_READ, caller) else None
    return render(
        request,
        "definition.html",
        status=status,
        job=job,
        versions=versions,
        content=contents[current],
        left=left,
        right=right,
        diff=diff,
        approval=approval,
        may_approve=allowed(ADMIN, caller),
        message=message,
    )


@router.get("/definitions/{job_definition_id}", response_class=HTMLResponse)
@allow(READ)
@console
def definition_page(
    request: Request,
    job_definition_id: str,
    left: Annotated[int | None, Query(alias="from", ge=1)] = None,
    right: Annotated[int | None, Query(alias="to", ge=1)] = None,
) -> HTMLResponse:
    return _definition_page(request, job_definition_id, left=left, right=right)


@router.post("/definitions/{job_definition_id}/approve")
@allow(ADMIN)
@console
async def approve(request: Request, job_definition_id: str) -> Response:
    form = await form_of(request)
    caller, state = caller_of(request), state_of(request)

    def approve_it() -> object:
        body = ApproveIn(
            digest=form.get("digest", ""), code_digest=form.get("code_digest") or None, note=form.get("note") or None
        )
        return definition_routes.approve_definition(job_definition_id, body, caller, state)

    return await act(
        approve_it,
        done=lambda _: f"/definitions/{job_definition_id}",
        again=lambda message, status: _definition_page(request, job_definition_id, message=message, status=status),
        what="Not approved",
    )


@router.post("/definitions/{job_definition_id}/revoke")
@allow(ADMIN)
@console
async def revoke(request: Request, job_definition_id: str) -> Response:
    form = await form_of(request)
    caller, state = caller_of(request), state_of(request)
    reason = (form.get("reason") or "").strip() or None

    def revoke() -> object:
        refuse_nul(reason, "reason")  # what the API's body models refuse, refused on this form too
        return definition_routes.revoke_approval(job_definition_id, caller, state, reason)

    return await act(
        revoke,
        done=lambda _: f"/definitions/{job_definition_id}",
        again=lambda message, status: _definition_page(request, job_definition_id, message=message, status=status),
        what="Not revoked",
    )
