"""The API while its SQLite file refuses writes (a full disk, a read-only remount: here SQLite's
own ``SQLITE_READONLY``, from ``query_only`` on the process's writing connection): a write is
503 with Retry-After, never an internal error; reads still answer; nothing is stored by a
refused request, and writes are taken again once the file takes them. A file removed or
replaced under the server is refused outright: what it wrote there would be lost."""

from __future__ import annotations

import shutil
from pathlib import Path

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


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_database_file_removed_under_the_server_is_refused_not_written_to(
    world: World, tmp_path: Path, how: str
) -> None:
    """Deleted (or another file moved to its path), the file the server opened is one nobody
    else sees: a run acknowledged there is lost. Every request that needs the database is 503
    (no Retry-After: only a restart cures it), ``/readyz`` is red and ``/healthz`` too, so a
    supervisor restarts the process; nothing is acknowledged."""
    store = world.engine.store
    if store.dialect != "sqlite":
        pytest.skip("a database file is SQLite's")
    path = Path(str(store.url).removeprefix("sqlite:///"))
    headers = world.headers("acme", Role.OPERATOR)
    body = {"job_definition_id": ACME_JOB, "params": {"n": "1"}}
    assert world.client.post("/api/v1/runs", json=body, headers=headers).status_code == 201
    if how == "replaced":
        shutil.copyfile(path, tmp_path / "copy.db")  # a restore from a copy, moved into place
        (tmp_path / "copy.db").replace(path)
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    posted = world.client.post("/api/v1/runs", json=body, headers=headers)
    assert posted.status_code == 503 and posted.json()["error"] == "database_file_replaced"
    assert "restart" in posted.json()["message"] and str(path) not in posted.text
    assert "Retry-After" not in posted.headers  # a restart alone cures it, not a retry
    alive = world.client.get("/healthz")  # a supervisor restarts it
    assert alive.status_code == 503 and "restart" in alive.json()["status"]
    assert world.client.get("/api/v1/runs", headers=headers).status_code == 503
    ready = world.client.get("/readyz")
    assert ready.status_code == 503
    assert {c["name"]: c["status"] for c in ready.json()["checks"]}["database"] == "red"
