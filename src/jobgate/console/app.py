"""The whole web application: the HTTP API with the console's pages beside it.

The API knows nothing of the console (it is one face, the console another, and faces do not
import each other back); this is where the two are put together, for ``jobgate serve``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobgate.api import app as api_app
from jobgate.api.access import CONSOLE_ATTRIBUTE
from jobgate.api.server_state import ServerState
from jobgate.console import definitions, governance, requests, schedules, signin, views, workflows
from jobgate.console.pages import PAGE_HEADERS, page_response, render, templates


def create_app(state: ServerState) -> FastAPI:
    app = api_app.create_app(state)
    # The console's own script and nothing else: public, from the installed package, no CDN.
    app.mount("/static", StaticFiles(packages=[("jobgate.console", "static")]), name="static")
    app.include_router(signin.router)
    app.include_router(views.router)
    app.include_router(requests.router)
    app.include_router(definitions.router)
    app.include_router(governance.router)
    app.include_router(schedules.router)
    app.include_router(workflows.router)
    app.state.refusal_page = refusal_page  # the API's error handlers draw a console page's refusal with it
    app.add_middleware(_ConsoleHeaders)
    return app


class _ConsoleHeaders:
    """Every answer of a console route carries the pages' headers (no-store, nosniff, the
    content policy), whatever built it: a download (a log, an artifact, an evidence bundle) or a
    redirect as much as a page. Found by a review: the evidence bundle's download had none, as
    the log's and the artifact's had not before them; one rule here instead of one per route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            # The router has named the endpoint in this scope by the time the answer starts.
            if message["type"] == "http.response.start" and getattr(scope.get("endpoint"), CONSOLE_ATTRIBUTE, False):
                ours = {k.lower().encode("latin-1"): v.encode("latin-1") for k, v in PAGE_HEADERS.items()}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in ours]
                message = {**message, "headers": [*kept, *ours.items()]}  # an event stream's no-cache too
            await send(message)

        await self.app(scope, receive, send_with_headers)


def refusal_page(request: Request, status: int, code: str, message: str, field: str | None) -> Response:
    """A refusal of a console page, drawn as a page: for the signed-in caller the console's own
    layout and navigation, the code, the field and why, and a way back; before anyone is known
    (a form refused for its CSRF token or its size, an address no page has) the same words on
    the sign-in page's plain layout."""
    named = f", {field}" if field else ""
    title, said = _PAGE_TITLES.get(status, "Refused"), f"{message} ({code}{named})"
    if getattr(request.state, "principal", None) is None:
        page = templates.get_template("refused.html").render(title=title, message=said)
        return page_response(page, status)
    return render(request, "message.html", status=status, title=title, message=said, back="/")


_PAGE_TITLES = {403: "Not allowed", 404: "Not found", 405: "Not here"}
