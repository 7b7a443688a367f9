"""The whole web application: the HTTP API with the console's pages beside it.

The API knows nothing of the console (it is one face, the console another, and faces do not
import each other back); this is where the two are put together, for ``jobgate serve``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from jobgate.api import app as api_app
from jobgate.api.server_state import ServerState
from jobgate.console import definitions, governance, requests, schedules, signin, views, workflows


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
    return app
