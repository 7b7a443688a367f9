"""The console's sign-in and sign-out: a jobgate token, a directory account (LDAP) or the
identity provider's own page (OpenID Connect, authorization code with PKCE).

Every way in ends the same: the provider checks the credential exactly as it does for the API
(``identity.authenticator``), and the principal it names gets a session cookie
(``identity.sessions``). A failed sign-in shows one message whatever the reason (the reason goes
to the log); an unreachable provider says so (503). The sign-in forms carry a token that must
match a cookie set with the page (no other site can sign a browser in to an account of its
choosing), and every state-changing console form carries the session's CSRF token.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from jobgate.api.access import PUBLIC, READ, allow, console
from jobgate.api.forms import form_of
from jobgate.console.pages import page_response, state_of, templates
from jobgate.core.errors import JobgateError
from jobgate.identity import sessions
from jobgate.identity.errors import IdentityProviderUnavailable
from jobgate.identity.oidc_flow import Pending
from jobgate.service.tokens import Principal

router = APIRouter(include_in_schema=False)
LOGIN_COOKIE = "jobgate_login"  # the sign-in form's anti-forgery value
PENDING_PATH = "/login/oidc"  # the OIDC flow's cookie goes only to its two pages
FAILED = "Sign-in failed: check the name and password, or the token."
UNAVAILABLE = "The identity provider cannot be reached; try again later."


def _cookie(
    response: Response,
    request: Request,
    name: str,
    value: str,
    max_age: int,
    *,
    samesite: Literal["strict", "lax"] = "strict",
    path: str = "/",
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite=samesite,
        secure=request.url.scheme == "https",
        path=path,
    )


def _page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page drawn before anyone signed in (``pages.render`` draws those of a signed-in caller)."""
    return page_response(templates.get_template(name).render(**context), status)


def _login_page(request: Request, message: str | None = None, status: int = 200) -> HTMLResponse:
    state = state_of(request)
    auth = state.authenticator
    csrf = secrets.token_urlsafe(24)
    oidc = auth.oidc.settings.issuer if auth.oidc is not None and auth.oidc.settings.client_id else None
    page = _page(
        "login.html", status, message=message, csrf=csrf, tokens=auth.settings.tokens, ldap=auth.ldap, oidc=oidc
    )
    _cookie(page, request, LOGIN_COOKIE, csrf, sessions.PENDING_SECONDS)
    return page


def _signed_in(request: Request, principal: Principal, *, bounded: bool = False) -> Response:
    """A session for ``principal``. ``bounded``: the person pasted a credential (a jobgate token,
    a provider's JWT) that expires; the session ends with it, never ``session_hours`` later."""
    state = state_of(request)
    lifetime = state.authenticator.settings.session.total_seconds()
    now = state.engine.clock.now()
    if bounded and principal.expires_at is not None:
        lifetime = min(lifetime, (principal.expires_at - now).total_seconds())
        if lifetime < 1:
            return _login_page(request, FAILED, status=401)
    elif not bounded:
        # A directory session, or one from the provider's page, lasts its session_hours, and
        # what it mints lasts no longer (found by a review: a directory session minted tokens
        # that never expired; a provider-page session could mint none once the ID token it
        # signed in with expired, minutes in).
        principal = replace(principal, expires_at=now + timedelta(seconds=lifetime))
    value = state.signer("session").dumps(sessions.session_payload(principal), lifetime)
    response = RedirectResponse("/", status_code=303)
    _cookie(response, request, sessions.SESSION_COOKIE, value, int(lifetime))
    response.delete_cookie(LOGIN_COOKIE, path="/")
    return response


@router.get("/login", response_class=HTMLResponse)
@allow(PUBLIC)
@console
def login_page(request: Request) -> HTMLResponse:
    return _login_page(request)


@router.post("/login", response_class=HTMLResponse)
@allow(PUBLIC)
@console
async def login(request: Request) -> Response:
    form = await form_of(request)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not expected or not secrets.compare_digest(form.get("csrf", ""), expected):
        return _login_page(request, "The sign-in form expired; please try again.", status=403)
    auth = state_of(request).authenticator
    method = form.get("method")
    if method == "ldap" and auth.ldap is not None:
        return await _sign_in_with(request, auth.ldap.authenticate, form.get("username", ""), form.get("password", ""))
    if method == "token" and auth.settings.tokens:
        bearer = f"Bearer {form.get('token', '').strip()}"
        return await _sign_in_with(request, auth.authenticate, bearer, bounded=True)
    return _login_page(request, FAILED, status=401)


async def _sign_in_with(
    request: Request, check: Callable[..., Principal], *args: Any, bounded: bool = False
) -> Response:
    """Ask a provider (off the event loop); its principal gets a session (``_signed_in``), a
    refusal the one message, an unreachable provider its own (503)."""
    try:
        principal = await run_in_threadpool(check, *args)
    except IdentityProviderUnavailable:
        return _login_page(request, UNAVAILABLE, status=503)
    except JobgateError:
        return _login_page(request, FAILED, status=401)
    return _signed_in(request, principal, bounded=bounded)


@router.get("/login/oidc")
@allow(PUBLIC)
@console
async def login_oidc(request: Request) -> Response:
    state = state_of(request)
    flow = state.code_flow
    if flow is None:
        return _login_page(request, "Sign-in through an identity provider is not configured.", status=404)
    try:
        url, pending = await run_in_threadpool(flow.start)
    except IdentityProviderUnavailable:
        return _login_page(request, UNAVAILABLE, status=503)
    carried = state.signer("signin").dumps(
        {"state": pending.state, "nonce": pending.nonce, "verifier": pending.verifier}, sessions.PENDING_SECONDS
    )
    response = RedirectResponse(url, status_code=302)
    # Lax, not Strict: the provider's redirect back is a top-level navigation from its site.
    _cookie(
        response,
        request,
        sessions.PENDING_COOKIE,
        carried,
        sessions.PENDING_SECONDS,
        samesite="lax",
        path=PENDING_PATH,
    )
    return response


@router.get("/login/oidc/callback")
@allow(PUBLIC)
@console
async def login_oidc_callback(request: Request, code: str = "", state: str = "", error: str = "") -> Response:
    server = state_of(request)
    flow = server.code_flow
    carried = server.signer("signin").loads(request.cookies.get(sessions.PENDING_COOKIE))
    if flow is None or carried is None or error:
        answer: Response = _login_page(request, FAILED, status=401)
    else:
        pending = Pending(str(carried["state"]), str(carried["nonce"]), str(carried["verifier"]))
        answer = await _sign_in_with(request, flow.finish, code, state, pending)
    # The flow's state is spent whatever the answer (a failed callback leaves nothing behind),
    # deleted where it was set: a cookie is removed only by its own path.
    answer.delete_cookie(sessions.PENDING_COOKIE, path=PENDING_PATH)
    return answer


@router.post("/logout")
@allow(READ)
@console
def logout(request: Request) -> Response:
    state_of(request).end_session(request.cookies.get(sessions.SESSION_COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(sessions.SESSION_COOKIE, path="/")
    return response
