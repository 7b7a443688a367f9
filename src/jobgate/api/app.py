"""The FastAPI application: routes, the access rule check, errors, limits, metrics, OpenAPI.

Handlers are plain ``def`` functions: FastAPI runs them in its thread pool, where the
store's blocking calls belong; only the SSE stream is ``async`` (it sleeps between polls and
reads through the pool).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import jobgate
from jobgate.api import errors
from jobgate.api.access import enforce, rule_of
from jobgate.api.metrics import HttpMetrics
from jobgate.api.routes import (
    admin,
    audit,
    contract,
    definitions,
    evidence,
    health,
    operations,
    orchestrator,
    packs,
    plugins,
    requests,
    runs,
    safemode,
    sla,
    stream,
    telemetry,
    workflows,
)
from jobgate.api.server_state import ServerState
from jobgate.identity.sessions import SESSION_COOKIE
from jobgate.packs.archive import MAX_ARCHIVE_BYTES

ERROR_STATUSES = {
    "400": "malformed request (unreadable JSON, a broken cursor)",
    "401": "missing, malformed, unknown, revoked or expired token",
    "403": "the token's role lacks this route's scope",
    "404": "no such resource in your tenant",
    "409": "wrong state for this action, or an idempotency key reused",
    "413": "request body too large",
    "422": "a field failed validation (named in `field`)",
    "429": "daily run quota used up",
}


ROUTERS = (
    health.router,
    runs.router,
    stream.router,
    contract.router,
    contract.seed_router,
    definitions.router,
    operations.router,
    admin.router,
    audit.router,
    evidence.router,
    requests.router,
    safemode.router,
    workflows.router,
    telemetry.router,
    sla.router,
    plugins.router,
    packs.router,
    *orchestrator.ROUTERS,
)


def api_routes() -> list[APIRoute]:
    """Every route the application serves, each with its handler (and so its rule)."""
    return [route for router in ROUTERS for route in router.routes if isinstance(route, APIRoute)]


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(
        title="jobgate",
        version=jobgate.__version__,
        description="Governed job scheduler: every run explainable, approved and evidenced.",
        dependencies=[Depends(enforce)],
        openapi_url="/openapi.json",
        docs_url=None,  # served below from the installed fastapi-offline's files, not from a CDN
        redoc_url=None,
    )
    app.state.server = state
    errors.install(app)
    app.mount("/docs-assets", StaticFiles(directory=DOCS_ASSETS), name="docs-assets")
    app.add_route("/docs", _swagger_page, include_in_schema=False)
    app.add_route("/redoc", _redoc_page, include_in_schema=False)
    for router in ROUTERS:
        app.include_router(router)
    # An offline seed is a whole environment's definitions: its route takes archives up to their
    # own limit (the archive's entries are bounded again when it is read).
    larger = {packs.IMPORT_PATH: MAX_ARCHIVE_BYTES}
    app.add_middleware(_BodyLimit, max_bytes=state.engine.config.server.max_body_bytes, larger=larger)
    app.add_middleware(_SeedPaths)
    app.add_middleware(_PlainUrls)
    if not state.auth:
        app.add_middleware(_LoopbackCallersOnly)
    app.add_middleware(_Measured, metrics=state.http_metrics)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


# Swagger UI 5 and ReDoc as fastapi-offline installs them (public files, no CDN: the docs work
# offline).
DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"


async def _swagger_page(request: Request) -> HTMLResponse:
    """Swagger UI for ``/openapi.json``, every file from this server."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="jobgate API",
        swagger_js_url="/docs-assets/swagger-ui-bundle.js",
        swagger_css_url="/docs-assets/swagger-ui.css",
        swagger_favicon_url="/docs-assets/favicon.png",
    )


# ReDoc's sidebar always draws a logo from cdn.redoc.ly; the page's policy admits images from this
# server only, so the browser never asks for it (the image's error handler then hides it).
REDOC_POLICY = "img-src 'self' data:"


async def _redoc_page(request: Request) -> HTMLResponse:
    """ReDoc for ``/openapi.json``, every file from this server, no web fonts."""
    page = get_redoc_html(
        openapi_url="/openapi.json",
        title="jobgate API",
        redoc_js_url="/docs-assets/redoc.standalone.js",
        redoc_favicon_url="/docs-assets/favicon.png",
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = REDOC_POLICY
    return page


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def _host_name(value: str) -> str:
    """``host[:port]`` or ``[v6]:port`` -> the host, lower-case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class _LoopbackCallersOnly:
    """``--no-auth`` trusts whoever can reach the port, so it must be only this machine's own
    programs: a request naming another ``Host`` (DNS rebinding) or sent by a web page of
    another ``Origin`` (cross-site requests from a browser) is refused with 403. Another origin
    is any but the server's own, scheme aside: a page served on another local port (a dev
    server, a notebook) is another site, and without sign-in the console's forms carry no CSRF
    token (found by a review: such a page switched safe mode on)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
            host = _host_name(headers.get("host", ""))
            origin = headers.get("origin")
            own = headers.get("host", "").strip().lower()
            foreign = origin is not None and origin.split("://", 1)[-1].strip().rstrip("/").lower() != own
            if host not in LOOPBACK_NAMES or foreign:
                message = "without authentication only this machine's own programs may call (Host and Origin)"
                response = JSONResponse(errors.body("forbidden", message), status_code=403)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# A control character decoded into the path (TAB, CR, LF and NUL above all), raw in the request
# line, or percent-encoded in the query.
_CONTROL_TEXT = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_ENCODED = re.compile(rb"%[01][0-9a-fA-F]|%7[fF]|[\x00-\x1f\x7f]")


class _PlainUrls:
    """Refuse, before any routing, a URL whose path or query holds a control character (400).

    Checked on the ASGI scope itself: ``request.url`` goes through ``urllib.parse``, which drops
    TAB, CR and LF without a word, so a check there saw ``%09`` as nothing at all (and an
    unmatched route never reached the per-route check)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (
            _CONTROL_TEXT.search(scope.get("path", ""))
            or _CONTROL_ENCODED.search(scope.get("raw_path") or b"")
            or _CONTROL_ENCODED.search(scope.get("query_string") or b"")
        ):
            message = "control characters are not accepted in the path or the query"
            response = JSONResponse(errors.body("bad_request", message, "url"), status_code=400)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _SeedPaths:
    """Route an API call at one of seed 004's bare paths (``/scenarios``, ``/jobs``, …) to the
    compatibility surface at ``/api/orchestrator`` (``orchestrator.seed_path`` decides; a
    browser's console page at a shared path stays where it is)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and orchestrator.SEED_PATH.match(scope["path"]):  # else: nothing to decode
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
            target = orchestrator.seed_path(scope["path"], headers, session_cookie=SESSION_COOKIE)
            if target is not None:
                raw = scope.get("raw_path") or scope["path"].encode()
                scope = {**scope, "path": target, "raw_path": orchestrator.PREFIX.encode() + raw}
        await self.app(scope, receive, send)


class _BodyLimit:
    """Refuse oversized bodies with the API's JSON 413: at once when the declared
    ``Content-Length`` is over the limit, else the moment the bytes received pass it (a body
    sent without a length cannot make the server buffer without bound). Starlette's own
    limit answers in plain text, whatever the application's error shape."""

    def __init__(self, app: ASGIApp, max_bytes: int, larger: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = dict(larger or {})  # path -> its own limit (an offline seed's archive)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = max(self.max_bytes, self.larger.get(scope.get("path", ""), 0))
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            response = JSONResponse(errors.body("payload_too_large", self._message(limit)), status_code=413)
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:  # handled by the error handlers, as JSON
                raise StarletteHTTPException(413, self._message(limit))
            return message

        await self.app(scope, counted, send)

    @staticmethod
    def _message(limit: int) -> str:
        return f"the request body is larger than this server accepts ({limit} bytes)"


class _Measured:
    """Count and time every request by route template (pure ASGI: streams pass untouched)."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            principal = scope.get("state", {}).get("principal")
            tenant = getattr(principal, "tenant_id", None)
            self.metrics.observe(tenant, scope["method"], route, status, time.perf_counter() - started)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus what it cannot know: bearer auth per the route's rule, and the
    one error shape for every refusal."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["bearer"] = {"type": "http", "scheme": "bearer"}
    components.setdefault("schemas", {})["ErrorBody"] = errors.ErrorBody.model_json_schema()
    error_ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
    for route in api_routes():
        rule = rule_of(route.endpoint)
        for method in route.methods or ():
            op = schema["paths"].get(route.path_format, {}).get(method.lower())
            if op is None:
                continue
            anonymous = rule is not None and rule.anonymous
            op["security"] = [] if anonymous else [{"bearer": []}]
            responses = op.setdefault("responses", {})
            for status, text in ERROR_STATUSES.items():
                if anonymous and status in ("401", "403"):
                    continue
                responses[status] = {"description": text, **error_ref}
            if rule is not None and rule.roles is not None:
                roles = ", ".join(sorted(r.value for r in rule.roles))
                op["description"] = (op.get("description") or "") + f"\n\nRoles: {roles} (scope `{rule.scope}`)."
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    app.openapi_schema = schema
    return schema
