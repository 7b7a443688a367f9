"""Who made a request: asked on the event loop when that only reads this host's database file,
in a thread otherwise, and the same answer either way — a revocation made by another process
refuses the very next request."""

from __future__ import annotations

import base64
from pathlib import Path

from fastapi import Request
from tests.api.conftest import World
from tests.helpers import make_config

from jobgate.api.server_state import ServerState
from jobgate.core.tokens import Role
from jobgate.service import tokens
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store


def request_with(authorization: str | None) -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    return Request({"type": "http", "method": "GET", "path": "/api/v1/runs", "headers": headers, "query_string": b""})


def test_only_a_local_read_is_asked_on_the_loop(engine: Engine) -> None:
    state = ServerState(engine, auth=True)
    local = engine.store.dialect == "sqlite"
    token = "Bearer jgt_0123456789abcdef_secret"
    assert state.identifies_locally(request_with(token), console=False) is local
    assert state.identifies_locally(request_with(None), console=True) is local  # a console session
    # an LDAP bind or an OIDC provider's keys may wait on a network, whatever the store
    basic = "Basic " + base64.b64encode(b"someone:secret").decode()
    assert state.identifies_locally(request_with(basic), console=False) is False
    assert state.identifies_locally(request_with("Bearer eyJhbGciOi.x.y"), console=False) is False
    assert state.identifies_locally(request_with(None), console=False) is False
    # --no-auth reads nothing at all
    assert ServerState(engine, auth=False).identifies_locally(request_with(None), console=False) is True


def test_a_token_revoked_by_another_process_is_refused_at_the_next_request(
    world: World, database_url: str, tmp_path: Path
) -> None:
    headers = world.headers("acme", Role.OPERATOR)
    assert world.client.get("/api/v1/runs", headers=headers).status_code == 200
    # another process: its own store and engine over the same database
    other = Store(database_url)
    try:
        token_id = world.token_ids[("acme", Role.OPERATOR)]
        tokens.revoke(Engine(other, make_config(tmp_path)), "acme", token_id, actor="test")
    finally:
        other.dispose()
    refused = world.client.get("/api/v1/runs", headers=headers)
    assert refused.status_code == 401
    assert world.client.get("/api/v1/runs", headers=world.headers("acme", Role.ADMIN)).status_code == 200


def test_a_wrong_or_malformed_token_is_refused_on_either_path(world: World) -> None:
    token = world.tokens[("acme", Role.CONSUMER)]
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for authorization, status in ((f"Bearer {token}", 200), (f"Bearer {wrong}", 401), ("Bearer jgt_x", 401)):
        assert world.client.get("/api/v1/runs", headers={"Authorization": authorization}).status_code == status
