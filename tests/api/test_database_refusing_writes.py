"""The API while its SQLite file refuses writes (a full disk, a read-only remount: here SQLite's
own ``SQLITE_READONLY``, from ``query_only`` on the process's writing connection): a write is
503 with Retry-After, never an internal error; reads still answer; nothing is stored by a
refused request, and writes are taken again once the file takes them."""

from __future__ import annotations

import pytest
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count

from jobgate.core.tokens import Role
from jobgate.testing import connection


def test_a_file_refusing_writes_is_503_and_stores_nothing(world: World) -> None:
    if world.engine.store.dialect != "sqlite":
        pytest.skip("the file's refusal is SQLite's")
    store = world.engine.store
    with store.write() as tx:
        writing = connection(tx).connection.dbapi_connection

    def refuse_writes(refused: bool) -> None:
        with store._write_turn:  # between two turns: the connection is idle
            writing.execute(f"PRAGMA query_only = {'ON' if refused else 'OFF'}")  # type: ignore[union-attr]

    headers = world.headers("acme", Role.OPERATOR)
    body = {"job_definition_id": ACME_JOB, "params": {"n": "1"}}
    before = count(world.engine, "job_runs")
    refuse_writes(True)
    try:
        posted = world.client.post("/api/v1/runs", json=body, headers=headers)
        listed = world.client.get("/api/v1/runs", headers=headers)
    finally:
        refuse_writes(False)
    assert posted.status_code == 503, posted.text
    assert posted.headers["Retry-After"].isdigit() and posted.json()["error"] == "unavailable"
    assert "INSERT" not in posted.text and "Traceback" not in posted.text
    assert listed.status_code == 200
    assert count(world.engine, "job_runs") == before
    again = world.client.post("/api/v1/runs", json=body, headers=headers)
    assert again.status_code == 201, again.text
    assert count(world.engine, "job_runs") == before + 1
