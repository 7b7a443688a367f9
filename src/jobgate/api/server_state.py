"""What the API's handlers share: the engine, the auth mode, and the state of the loops."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request

from jobgate.api.metrics import HttpMetrics
from jobgate.core.tokens import Role
from jobgate.service.engine import Engine
from jobgate.service.tokens import Principal

LOCAL_TOKEN_ID = "local"


@dataclass
class ServerState:
    """``loops`` reports each background loop this process runs and whether it is alive
    (``/readyz``); ``embedded_worker`` is the seed 002 execution mode."""

    engine: Engine
    auth: bool = True
    embedded_worker: bool = False
    loops: Callable[[], dict[str, bool]] = dict
    stopping: threading.Event = field(default_factory=threading.Event)
    http_metrics: HttpMetrics = field(default_factory=HttpMetrics)

    @property
    def local_principal(self) -> Principal:
        """``--no-auth`` (loopback only): every request acts as the default tenant's admin."""
        return Principal(LOCAL_TOKEN_ID, self.engine.config.server.tenant, Role.ADMIN, None)


def server_state(request: Request) -> ServerState:
    found: ServerState = request.app.state.server
    return found
