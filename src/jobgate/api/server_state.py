"""What the API's handlers share: the engine, the auth mode, the loops' state, open streams."""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from jobgate.api.metrics import HttpMetrics
from jobgate.core.tokens import TOKEN_PREFIX, Role
from jobgate.identity import sessions
from jobgate.identity.authenticator import Authenticator
from jobgate.identity.ldap import PREFIX as LDAP_PREFIX
from jobgate.identity.oidc_flow import CodeFlow
from jobgate.service import tokens
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
    loops_failing: Callable[[], dict[str, int]] = dict  # failed passes in a row, by loop
    pubsub: Callable[[], str] = lambda: "skip"  # /healthz: connected | disconnected | skip (seed 004)
    stopping: threading.Event = field(default_factory=threading.Event)
    http_metrics: HttpMetrics = field(default_factory=HttpMetrics)
    _streams: dict[str, dict[int, float]] = field(default_factory=dict)  # token -> {stream: opened at}
    _stream_ids: itertools.count[int] = field(default_factory=itertools.count)
    _streams_lock: threading.Lock = field(default_factory=threading.Lock)

    @functools.cached_property
    def authenticator(self) -> Authenticator:
        """The providers ``auth`` configures (built once: it keeps the OIDC provider's keys)."""
        return Authenticator(self.engine)

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller of a request: its credential's principal, or ``--no-auth``'s admin."""
        if not self.auth:
            return self.local_principal
        return self.authenticator.authenticate(authorization)

    def identifies_locally(self, request: Request, *, console: bool) -> bool:
        """Whether telling who made ``request`` only reads this host's database file (SQLite):
        no credential at all (``--no-auth``), a jobgate token, or a console session. Then the
        event loop asks itself: handing the read to a thread and back cost the loop more than
        the read (``api.access.enforce``). An LDAP bind, an OIDC provider's keys and every
        PostgreSQL read may wait on a network, and are asked from a thread."""
        if not self.auth:
            return True
        if not self.engine.store.local:
            return False
        if console:
            return True
        scheme, _, raw = (request.headers.get("authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and raw.strip().startswith(TOKEN_PREFIX)

    @functools.cached_property
    def _session_key(self) -> bytes:
        return sessions.session_key(self.engine.config.data_dir)

    def signer(self, purpose: str) -> sessions.Signer:
        """Signs the console's cookies of one ``purpose`` (a session, a sign-in in progress)."""
        return sessions.Signer(self._session_key, purpose)

    @property
    def code_flow(self) -> CodeFlow | None:
        """The console's OIDC sign-in, when ``auth.oidc`` names a client id."""
        oidc = self.authenticator.oidc
        return None if oidc is None or oidc.settings.client_id is None else CodeFlow(oidc)

    def session_principal(self, cookie: str | None) -> tuple[Principal, str]:
        """The caller of a console page and its session's CSRF token, or ``Unauthenticated``."""
        if not self.auth:
            return self.local_principal, ""
        payload = self.signer("session").loads(cookie)
        if payload is None:
            raise tokens.refused("no valid console session")
        principal = self._principal_of(payload)
        if principal is None:
            raise tokens.refused("a console session of an unknown shape")
        with self.engine.store.read(tenant_id=principal.tenant_id) as tx:
            ended = tx.session_ended(sessions.session_id(payload))
        if ended:
            raise tokens.refused("a console session signed out")
        if principal.credential.startswith("token:"):
            tokens.check_still_valid(self.engine, principal.credential.removeprefix("token:"))
        elif (directory := self.authenticator.ldap) is not None and principal.credential.startswith(LDAP_PREFIX):
            # The person as the directory has them now: gone, or in no mapped group, ends the
            # session; a changed group changes the role it acts with.
            now = directory.still_member(principal)
            principal = replace(principal, role=now.role, display_name=now.display_name)
        return principal, str(payload.get("csrf", ""))

    def end_session(self, cookie: str | None) -> None:
        """Sign a console session out on the server: a copy of its cookie opens nothing more."""
        payload = self.signer("session").loads(cookie) if self.auth else None
        principal = None if payload is None else self._principal_of(payload)
        if payload is None or principal is None:
            return
        now = self.engine.clock.now()
        expires = datetime.fromtimestamp(float(payload["exp"]), tz=UTC)
        with self.engine.store.write(tenant_id=principal.tenant_id) as tx:
            tx.session_end(principal.tenant_id, sessions.session_id(payload), now, max(expires, now))

    @staticmethod
    def _principal_of(payload: dict[str, Any]) -> Principal | None:
        """A session's principal, None for a payload of an unknown shape."""
        try:
            return sessions.principal_of(payload)
        except (KeyError, ValueError, TypeError):
            return None

    @property
    def local_principal(self) -> Principal:
        """``--no-auth`` (loopback only): every request acts as the default tenant's admin."""
        return Principal(f"token:{LOCAL_TOKEN_ID}", self.engine.config.server.tenant, Role.ADMIN, None)

    def open_stream(self, holder: str) -> int | None:
        """Register one more open stream for ``holder`` (``Principal.holder``); None (nothing registered) at the
        limit. Entries older than a stream can live are dropped first, so a stream whose end
        was never seen (a client gone before the first byte) cannot hold a slot for ever."""
        server = self.engine.config.server
        now = time.monotonic()
        oldest = now - server.stream_max.total_seconds() - 60
        with self._streams_lock:
            mine = {k: at for k, at in self._streams.get(holder, {}).items() if at >= oldest}
            if len(mine) >= server.streams_per_token:
                self._streams[holder] = mine
                return None
            stream_id = next(self._stream_ids)
            mine[stream_id] = now
            self._streams[holder] = mine
            return stream_id

    def close_stream(self, holder: str, stream_id: int) -> None:
        with self._streams_lock:
            mine = self._streams.get(holder, {})
            mine.pop(stream_id, None)
            if not mine:
                self._streams.pop(holder, None)


async def server_state(request: Request) -> ServerState:
    """The server's state (a handler dependency; ``async``, as ``access.principal`` says why)."""
    found: ServerState = request.app.state.server
    return found
