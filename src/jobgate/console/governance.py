"""The console's audit page (the chain, paged, its verification, an entry's inclusion proof and
evidence bundle downloads) and admin page (the safe-mode switch with its reason and history).

Both read and act through the API handlers they mirror, with their rules: the audit log and
its verification are for auditors and admins, the switch for admins; a token limited to some
definitions sees neither (they concern the whole tenant).
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from jobgate.api import pagination
from jobgate.api.access import ADMIN, AUDIT, allow, console, whole_tenant
from jobgate.api.errors import NotImplementedHere, status_for
from jobgate.api.forms import form_of
from jobgate.api.routes import admin as admin_routes
from jobgate.api.routes import audit as audit_routes
from jobgate.api.routes import evidence as evidence_routes
from jobgate.api.routes import safemode as safemode_routes
from jobgate.api.routes.evidence import InclusionProofOut
from jobgate.console.pages import act, caller_of, form_instant, refusal, render, state_of
from jobgate.core.errors import JobgateError, NotFoundError, ValidationError
from jobgate.core.tokens import Role
from jobgate.service import safemode
from jobgate.views.schemas import SafeModeIn, TokenCreatedOut, TokenCreateIn, TokenOut

router = APIRouter(include_in_schema=False)


def _audit_page(
    request: Request,
    *,
    cursor: str | None = None,
    verify: bool = False,
    proof: InclusionProofOut | None = None,
    message: str | None = None,
    status: int = 200,
) -> HTMLResponse:
    caller, state = whole_tenant(caller_of(request)), state_of(request)
    page = audit_routes.list_audit(caller, state, limit=50, cursor=cursor)
    chain = audit_routes.verify_audit(caller, state) if verify else None
    records = audit_routes.verify_records(caller, state) if verify else None
    return render(
        request,
        "audit.html",
        status=status,
        entries=page.items,
        next_cursor=page.next_cursor,
        chain=chain,
        records=records,
        proof=proof,
        message=message,
    )


@router.get("/audit", response_class=HTMLResponse)
@allow(AUDIT)
@console
def audit_page(
    request: Request,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$")] = None,
    verify: Annotated[bool, Query()] = False,
) -> HTMLResponse:
    return _audit_page(request, cursor=cursor, verify=verify)


@router.get("/audit/proof", response_class=HTMLResponse)
@allow(AUDIT)
@console
def audit_proof(request: Request, seq: Annotated[int, Query(ge=1, le=10**18)]) -> HTMLResponse:
    """An entry's inclusion proof (the API's), shown above the chain; one not anchored yet is
    said so, with the API's 404."""
    caller, state = whole_tenant(caller_of(request)), state_of(request)
    try:
        found = evidence_routes.audit_proof(seq, caller, state)
    except NotFoundError as exc:
        return _audit_page(request, message=f"No proof for entry {seq}: {exc.message}", status=404)
    return _audit_page(request, proof=found)


@router.get("/evidence")
@allow(AUDIT)
@console
def evidence_download(
    request: Request,
    job_run_id: Annotated[str, Query(max_length=200)] = "",
    workflow_run_id: Annotated[str, Query(max_length=200)] = "",
    job_definition_id: Annotated[str, Query(max_length=200)] = "",
    start: Annotated[str, Query(alias="from", max_length=40)] = "",
    end: Annotated[str, Query(alias="to", max_length=40)] = "",
) -> Response:
    """The API's evidence bundle, from the audit page's form or a run's, workflow's or
    definition's link; a refused scope draws the audit page again with the reason."""
    caller, state = whole_tenant(caller_of(request)), state_of(request)
    try:
        ids = {
            k: v.strip() or None
            for k, v in (
                ("job_run_id", job_run_id),
                ("workflow_run_id", workflow_run_id),
                ("job_definition_id", job_definition_id),
            )
        }
        for field, value in ids.items():
            if value is not None and not re.fullmatch(evidence_routes.RECORD_ID, value):
                raise ValidationError("not an identifier", field=field)
        return evidence_routes.evidence_bundle(
            caller, state, start=form_instant(start, "from"), end=form_instant(end, "to"), **ids
        )
    except NotFoundError as exc:
        return _audit_page(request, message=f"No evidence bundle: {exc.message}", status=404)
    except JobgateError as exc:
        return _audit_page(request, message=refusal("No evidence bundle", exc), status=status_for(exc))


def _admin_page(
    request: Request, *, message: str | None = None, status: int = 200, created: TokenCreatedOut | None = None
) -> HTMLResponse:
    caller, state = whole_tenant(caller_of(request)), state_of(request)
    current = safemode_routes.safe_mode_state(caller, state)
    history = safemode.history(state.engine, caller.tenant_id, limit=20)
    try:
        admin_routes.tokens_in_use(state)
        listed: list[TokenOut] | None = admin_routes.list_tokens(caller, state, limit=pagination.MAX_LIMIT).items
        tokens_off = None
    except NotImplementedHere as exc:
        listed, tokens_off = None, exc.message
    page = render(
        request,
        "admin.html",
        status=status,
        safe=current,
        history=history,
        message=message,
        tokens=listed,
        tokens_off=tokens_off,
        roles=[r.value for r in Role],
        created=created,
        settings=admin_routes.governance_settings(caller, state),
    )
    if created is not None:  # the secret is in this page only: no cache may keep it
        page.headers["Cache-Control"] = "no-store"
    return page


@router.get("/admin", response_class=HTMLResponse)
@allow(ADMIN)
@console
def admin_page(request: Request) -> HTMLResponse:
    return _admin_page(request)


@router.post("/admin/safe-mode")
@allow(ADMIN)
@console
async def switch_safe_mode(request: Request) -> Response:
    form = await form_of(request)
    caller, state = whole_tenant(caller_of(request)), state_of(request)

    def switch() -> object:
        # Read as the API reads it: "TRUE" switches on, a missing or unreadable value is refused
        # naming the field (anything but "true" switched safe mode off, found by a review).
        given = {"active": form["active"]} if "active" in form else {}
        body = SafeModeIn.model_validate({**given, "reason": form.get("reason", "").strip()})
        return safemode_routes.switch_safe_mode(body, caller, state)

    return await act(
        switch,
        done=lambda _: "/admin",
        again=lambda message, status: _admin_page(request, message=message, status=status),
        what="Not switched",
    )


@router.post("/admin/tokens")
@allow(ADMIN)
@console
async def create_token(request: Request) -> Response:
    """The API's token creation; the page that answers shows the secret once."""
    form = await form_of(request)
    caller, state = whole_tenant(caller_of(request)), state_of(request)

    def create() -> TokenCreatedOut:
        admin_routes.tokens_in_use(state)
        jobs = [j for j in re.split(r"[\s,]+", form.get("jobs", "")) if j]
        body = TokenCreateIn.model_validate(
            {
                "role": form.get("role", ""),
                "label": form.get("label", "").strip(),
                "jobs": jobs or None,
                "expires_in_seconds": _expiry_seconds(form.get("expires_in_days", "")),
            }
        )
        return admin_routes.create_token(body, caller, state)

    return await act(
        create,
        done=lambda made: _admin_page(request, created=made, status=201),
        again=lambda message, status: _admin_page(request, message=message, status=status),
        what="No token created",
    )


MAX_TOKEN_DAYS = 3650  # the API's limit (``TokenCreateIn.expires_in_seconds``), in the form's unit


def _expiry_seconds(days_text: str) -> int | None:
    """The form's whole days as the API's seconds; refused naming the form's own field (the API's
    seconds are never shown here). ASCII digits only: ``"²".isdigit()`` is true."""
    days = days_text.strip()
    if not days:
        return None
    if not re.fullmatch(r"[0-9]{1,6}", days) or not 1 <= int(days) <= MAX_TOKEN_DAYS:
        raise ValidationError(f"whole days from 1 to {MAX_TOKEN_DAYS}, or empty for no expiry", field="expires_in_days")
    return int(days) * 86400


@router.post("/admin/tokens/{token_id}/revoke")
@allow(ADMIN)
@console
async def revoke_token(request: Request, token_id: str) -> Response:
    """The API's revocation: the token's next request is refused."""
    caller, state = whole_tenant(caller_of(request)), state_of(request)

    def revoke() -> object:
        admin_routes.tokens_in_use(state)
        return admin_routes.revoke_token(token_id, caller, state)

    return await act(
        revoke,
        done=lambda _: "/admin",
        again=lambda message, status: _admin_page(request, message=message, status=status),
        what="Not revoked",
    )
