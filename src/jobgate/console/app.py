"""The whole web application: the HTTP API with the console's pages beside it.

The API knows nothing of the console (it is one face, the console another, and faces do not
import each other back); this is where the two are put together, for ``jobgate serve``.
"""

from __future__ import annotations

from fastapi import FastAPI

from jobgate.api import app as api_app
from jobgate.api.server_state import ServerState
from jobgate.console import signin


def create_app(state: ServerState) -> FastAPI:
    app = api_app.create_app(state)
    app.include_router(signin.router)
    return app
