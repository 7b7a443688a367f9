"""What every console page shares: the templates, the navigation the caller's role may use,
the safe-mode banner, and the caller's CSRF token for its forms.

The navigation is derived from the access rules of the API routes each page mirrors
(``api.access``): a link or a button is shown only to a role the rule admits, and the server
checks the same rule again when the page or the form arrives — hiding is a courtesy, the rule
is the guard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic import ValidationError as PydanticError
from starlette.concurrency import run_in_threadpool

from jobgate.api.access import Rule
from jobgate.api.errors import status_for
from jobgate.api.server_state import ServerState
from jobgate.core.errors import JobgateError, NotFoundError, ValidationError
from jobgate.service import safemode
from jobgate.service.tokens import Principal

T = TypeVar("T")
templates = Environment(loader=PackageLoader("jobgate.console", "templates"), autoescape=select_autoescape())


def _when(value: datetime | str | None) -> str:
    """An instant as every page writes it: to the second, in UTC (empty for none)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


templates.filters["when"] = _when


def form_instant(value: str, field: str) -> datetime | None:
    """A form's ``datetime-local`` (no zone: the form says UTC) or an ISO 8601 instant with its
    zone; empty is none."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError("not a date and time (YYYY-MM-DDTHH:MM, UTC)", field=field) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class NavItem:
    path: str
    label: str
    rule: Rule
    whole_tenant: bool = False  # a page about the whole tenant: not for a token limited to definitions


def _nav() -> tuple[NavItem, ...]:
    from jobgate.api.access import ADMIN, AUDIT, READ

    return (
        NavItem("/", "Overview", READ),
        NavItem("/runs", "Runs", READ),
        NavItem("/requests", "Requests", READ),
        NavItem("/definitions", "Definitions", READ),
        NavItem("/schedules", "Schedules", READ),
        NavItem("/workflows", "Workflows", READ),
        NavItem("/audit", "Audit", AUDIT, whole_tenant=True),
        NavItem("/admin", "Admin", ADMIN, whole_tenant=True),
    )


def allowed(rule: Rule, principal: Principal) -> bool:
    """Whether ``rule`` admits ``principal``'s role (ownership is checked per run)."""
    return rule.roles is None or principal.role in rule.roles


def _may_export(principal: Principal) -> bool:
    """Whether the caller may download evidence bundles (``api.routes.evidence``: auditors and
    admins, of the whole tenant)."""
    from jobgate.api.access import AUDIT

    return allowed(AUDIT, principal) and principal.jobs is None


def state_of(request: Request) -> ServerState:
    found: ServerState = request.app.state.server
    return found


def caller_of(request: Request) -> Principal:
    found: Principal = request.state.principal
    return found


# Every console page: its scripts and styles from this server only (the layout's one <style>
# block is inline), never inside another site's frame, its type never sniffed, no address sent
# to other sites. A script an attacker got into a page (a name, a message) would not run.
PAGE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": PAGE_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",  # a signed-in page is not kept: Back after sign-out shows nothing
}


def page_response(html: str, status: int = 200) -> HTMLResponse:
    """A console page as the browser gets it, with ``PAGE_HEADERS``."""
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)


def render(request: Request, name: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    """A page for the signed-in caller: the layout's navigation, banner and CSRF token included."""
    caller = caller_of(request)
    state = state_of(request)
    period = safemode.status(state.engine, caller.tenant_id)
    page = templates.get_template(name).render(
        caller=caller,
        display=caller.display_name or caller.actor,
        csrf=getattr(request.state, "csrf", ""),
        nav=[i for i in _nav() if allowed(i.rule, caller) and not (i.whole_tenant and caller.jobs is not None)],
        current=request.url.path,
        safe_mode=period if period is not None and period.active else None,
        allowed=lambda rule: allowed(rule, caller),
        may_export=_may_export(caller),
        **context,
    )
    return page_response(page, status)


def refusal(what: str, exc: JobgateError) -> str:
    """A refusal as every console page says it: what did not happen, the code, the field, why."""
    named = f", {exc.field}" if exc.field else ""
    return f"{what} ({exc.code}{named}): {exc.message}"


async def act(
    action: Callable[[], T],
    *,
    done: Callable[[T], str | Response],
    again: Callable[[str, int], HTMLResponse],
    what: str,
) -> Response:
    """A console form's action: ``action`` (the API handler the form mirrors, its body built
    inside, so a malformed field is a refusal like any other) runs off the event loop; then the
    browser goes to ``done(result)``, or ``again(message, status)`` draws the page once more with
    the service's words and the status the API answers for the same refusal. A record the caller
    may not see stays a 404, as in the API."""
    try:
        result = await run_in_threadpool(action)
    except PydanticError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'form'}: {e['msg']}" for e in exc.errors())
        return await run_in_threadpool(again, f"{what}: {fields}", 422)
    except NotFoundError:
        raise
    except JobgateError as exc:
        return await run_in_threadpool(again, refusal(what, exc), status_for(exc))
    after = await run_in_threadpool(done, result)
    return after if isinstance(after, Response) else RedirectResponse(after, status_code=303)
