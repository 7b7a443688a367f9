"""The console's audit page (the chain, paged, and its verification) and admin page (the safe-
mode switch with its reason and history).

Both read and act through the API handlers they mirror, with their rules: the audit log and
its verification are for auditors and admins, the switch for admins; a token limited to some
definitions sees neither (they concern the whole tenant).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from jobgate.api.access import ADMIN, AUDIT, allow, console, whole_tenant
from jobgate.api.forms import form_of
from jobgate.api.routes import audit as audit_routes
from jobgate.api.routes import safemode as safemode_routes
from jobgate.console.pages import act, caller_of, render, state_of
from jobgate.service import safemode
from jobgate.views.schemas import SafeModeIn

router = APIRouter(include_in_schema=False)


@router.get("/audit", response_class=HTMLResponse)
@allow(AUDIT)
@console
def audit_page(
    request: Request,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$")] = None,
    verify: Annotated[bool, Query()] = False,
) -> HTMLResponse:
    caller, state = whole_tenant(caller_of(request)), state_of(request)
    page = audit_routes.list_audit(caller, state, limit=50, cursor=cursor)
    chain = audit_routes.verify_audit(caller, state) if verify else None
    records = audit_routes.verify_records(caller, state) if verify else None
    return render(request, "audit.html", entries=page.items, next_cursor=page.next_cursor, chain=chain, records=records)


def _admin_page(request: Request, *, message: str | None = None, status: int = 200) -> HTMLResponse:
    caller, state = whole_tenant(caller_of(request)), state_of(request)
    current = safemode_routes.safe_mode_state(caller, state)
    history = safemode.history(state.engine, caller.tenant_id, limit=20)
    return render(request, "admin.html", status=status, safe=current, history=history, message=message)


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
        body = SafeModeIn(active=form.get("active") == "true", reason=form.get("reason", "").strip())
        return safemode_routes.switch_safe_mode(body, caller, state)

    return await act(
        switch,
        done=lambda _: "/admin",
        again=lambda message, status: _admin_page(request, message=message, status=status),
        what="Not switched",
    )
