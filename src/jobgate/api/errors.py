"""One error shape for every refusal: ``{"error": code, "message": text, "field"?: name}``.

The service layer raises ``JobgateError`` subclasses whose ``code`` and ``field`` are
attributes, so the mapping to HTTP is a table, not message parsing. Anything else is an
internal error: the client gets a request id to quote, the log gets the traceback; no stack
trace, SQL or exception text ever reaches a client.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobgate.core.errors import (
    ConflictError,
    GovernanceRefusal,
    JobgateError,
    NotFoundError,
    NotReadyError,
    QuotaExceededError,
    UnavailableError,
    UnusableReferenceError,
    ValidationError,
)
from jobgate.identity.errors import IdentityProviderUnavailable, TenantMissing
from jobgate.service.tokens import Unauthenticated
from jobgate.store.errors import driver_says, is_transient

log = logging.getLogger("jobgate.api")


class ErrorBody(BaseModel):
    error: str
    message: str
    field: str | None = None
    source: str | None = None  # what the refusal is about (a definition, a file), its message's first words


class Forbidden(JobgateError):
    """Authenticated, but the token's role or limits do not cover this (403)."""

    code = "forbidden"


class TenantClaimMismatch(Forbidden):
    """A body or query names another tenant than the caller's (seed 001: 403
    ``tenant_claim_mismatch``); the tenant comes from the credential alone."""

    code = "tenant_claim_mismatch"

    def __init__(self, *, field: str) -> None:
        super().__init__("the tenant comes from your credential; this names another tenant", field=field)


class NotImplementedHere(JobgateError):
    """A route this server's configuration turns off (501), the reason in the message."""

    code = "not_implemented"


class BadRequest(ValidationError):
    """Malformed rather than invalid: unreadable JSON, a broken cursor."""

    code = "bad_request"


_STATUS: list[tuple[type[JobgateError], int]] = [
    (Unauthenticated, 401),
    (IdentityProviderUnavailable, 503),
    (UnavailableError, 503),
    (NotReadyError, 503),
    (NotImplementedHere, 501),
    (TenantMissing, 400),
    (Forbidden, 403),
    (GovernanceRefusal, 403),
    (NotFoundError, 404),
    (ConflictError, 409),
    (QuotaExceededError, 429),
    (BadRequest, 400),
    (UnusableReferenceError, 400),
    (ValidationError, 422),
]


def status_for(exc: JobgateError) -> int:
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 400


def body(code: str, message: str, field: str | None = None, source: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"error": code, "message": message}
    if field:
        out["field"] = field
    if source:
        out["source"] = source
    return out


def _jobgate_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, JobgateError)
    status = status_for(exc)
    if isinstance(exc, Forbidden):
        _audit_forbidden(request, exc)
    if status == 401 and _is_console(request):  # a page or its form: sign in (again) first
        return RedirectResponse("/login", status_code=303)
    headers = {"WWW-Authenticate": _challenge(request)} if status == 401 else None
    if status == 503 and getattr(exc, "passes", True):
        headers = {"Retry-After": RETRY_AFTER_SECONDS}
    # ``field`` names a field of the request; ``source`` (which definition, which schedule)
    # is context for people and goes into the message.
    message = f"{exc.source}: {exc.message}" if exc.source else exc.message
    page = _console_page(request, status, exc.code, message, exc.field)
    if page is not None:
        return page
    return JSONResponse(body(exc.code, message, exc.field, exc.source), status_code=status, headers=headers)


def _console_page(request: Request, status: int, code: str, message: str, field: str | None) -> Response | None:
    """A refusal of a console page, as the console draws it (its ``refusal_page``, set on the
    application by ``console.app``: the API imports nothing of the console); None when it is
    not a console page or no console is served (the API's JSON answer then)."""
    draw = getattr(request.app.state, "refusal_page", None)
    if draw is None or not _wants_page(request):
        return None
    page: Response = draw(request, status, code, message, field)
    return page


def _wants_page(request: Request) -> bool:
    """A console page's request, or a browser's outside the API asking for a page (an address
    no page has, a form's address opened again): it is answered with a page, not JSON."""
    if _is_console(request):
        return True
    path = request.url.path
    return not path.startswith(("/api/", "/static/")) and "text/html" in request.headers.get("accept", "")


def _is_console(request: Request) -> bool:
    from jobgate.api.access import is_console  # access imports this module

    return is_console(request)


def _challenge(request: Request) -> str:
    """What a 401 asks for: a bearer credential, and HTTP Basic when a directory signs people in
    (so a browser or ``curl`` offers to ask for a name and a password)."""
    server = getattr(request.app.state, "server", None)
    if server is not None and server.auth and server.authenticator.ldap is not None:
        return 'Basic realm="jobgate", charset="UTF-8", Bearer'
    return "Bearer"


def _audit_forbidden(request: Request, exc: Forbidden) -> None:
    """A token refused for its role, its ownership or its limits is on the record: who tried
    what. (Governance refusals are audited where they are decided; an unauthenticated caller
    is nobody to attribute anything to, so it goes to the log only.)"""
    from jobgate.service import audit

    principal = getattr(request.state, "principal", None)
    server = getattr(request.app.state, "server", None)
    if principal is None or server is None:
        return
    route = getattr(request.scope.get("route"), "path", request.url.path)
    try:
        audit.record_now(
            server.engine,
            audit.event(
                principal.tenant_id,
                principal.actor,
                "access.refused",
                "route",
                f"{request.method} {route}",
                server.engine.clock.now(),
                reason=exc.message,
                payload={"role": principal.role.value, "path": request.url.path[:500]},
            ),
        )
    except Exception:  # the refusal stands even if it cannot be recorded; the log says so
        log.exception("could not record an access refusal in the audit log")


def _validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's request validation: name the first failing field, as the service layer does."""
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return JSONResponse(body("bad_request", "the body is not valid JSON"), status_code=400)
    where = [str(p) for p in first.get("loc", ())]
    loc = [p for p in where if p not in ("body", "query", "path", "header")]
    # a body missing or not an object names the body itself: every 422 names what to fix
    field = ".".join(loc) or (where[0] if where else None)
    message = str(first.get("msg", "invalid"))
    if field == "body":
        message = f"the request body: {message}"
    page = _console_page(request, 422, "validation_error", message, field)
    if page is not None:
        return page
    return JSONResponse(body("validation_error", message, field), status_code=422)


def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    codes = {
        400: "bad_request",
        404: "not_found",
        405: "method_not_allowed",
        401: "unauthenticated",
        403: "forbidden",
        413: "payload_too_large",
    }
    messages = {
        404: "no such route",
        405: "method not allowed on this route",
    }
    message = messages.get(exc.status_code, str(exc.detail))
    code = codes.get(exc.status_code, "http_error")
    field = None
    if exc.status_code == 400 and exc.detail == _FASTAPI_UNPARSEABLE:
        # FastAPI's words when the JSON decoder raised something else than a syntax error
        message, field = _UNPARSEABLE, "body"
    page = _console_page(request, exc.status_code, code, _PAGE_MESSAGES.get(exc.status_code, message), field)
    if page is not None:
        return page
    return JSONResponse(
        body(code, message, field),
        status_code=exc.status_code,
        headers=getattr(exc, "headers", None),
    )


_FASTAPI_UNPARSEABLE = "There was an error parsing the body"
_UNPARSEABLE = "the body cannot be read as JSON: not UTF-8, nested too deep, or a number with too many digits"
_PAGE_MESSAGES = {404: "the console has no such page", 405: "this address is a form's action, not a page"}


# What a 503 asks a client to wait before trying again: a database restart or a busy file is
# usually over in a second or two.
RETRY_AFTER_SECONDS = "2"


def _database_unavailable(request: Request, exc: Exception) -> Response:
    """The database refused or dropped the connection, or the pool had none to give: a passing
    condition, not a bug. 503 with Retry-After, and one warning line without the traceback
    (the driver's first line says what happened; the statement is not logged)."""
    first_line = driver_says(exc)
    log.warning(
        "database unavailable on %s %s: %s",
        request.method,
        request.url.path,
        first_line[:300],
        extra={"action": "api_database_unavailable"},
    )
    message = "the database is unavailable or busy; try again shortly"
    page = _console_page(request, 503, "unavailable", message, None)
    if page is not None:
        return page
    return JSONResponse(body("unavailable", message), status_code=503, headers={"Retry-After": RETRY_AFTER_SECONDS})


def database_unavailable(exc: BaseException) -> bool:
    """A database error worth retrying later (see ``store.errors.is_transient``) or a pool
    that timed out waiting for a connection."""
    return isinstance(exc, PoolTimeout) or is_transient(exc)


def _database_error(request: Request, exc: Exception) -> Response:
    """Registered for the database's own errors, so that the passing ones are answered here
    (Starlette re-raises whatever reaches the catch-all, and the server logs it again)."""
    if database_unavailable(exc):
        return _database_unavailable(request, exc)
    return _internal_error(request, exc)


def _internal_error(request: Request, exc: Exception) -> Response:
    request_id = uuid.uuid4().hex[:12]
    log.error(
        "internal error on %s %s (request %s)",
        request.method,
        request.url.path,
        request_id,
        exc_info=exc,
        extra={"action": "api_internal_error", "request_id": request_id},
    )
    return JSONResponse(
        body("internal", f"internal error; the server log has the details under request id {request_id}"),
        status_code=500,
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(JobgateError, _jobgate_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(PoolTimeout, _database_error)
    # The drivers' own errors, unwrapped: the hot path's statements go through the driver's
    # cursor, and SQLite's write lock is asked for in SQLAlchemy's begin event (a file that
    # refuses writes or stays locked fails there).
    app.add_exception_handler(sqlite3.Error, _database_error)
    app.add_exception_handler(psycopg.Error, _database_error)
    app.add_exception_handler(Exception, _internal_error)
