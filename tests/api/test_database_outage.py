"""The API while its PostgreSQL server cannot be reached (the network between them cut by a
proxy of this test's own): every route answers 503 with Retry-After, nothing is stored by a
refused request, the log has one line and neither a traceback nor a statement; a run stream
rides out an outage shorter than its heartbeat and ends cleanly at a longer one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlalchemy.engine import make_url
from tests.api.conftest import ACME_JOB, World, build_world
from tests.api.test_server_process import free_port
from tests.helpers import count, make_config
from tests.runtime.runtime_support import wait_until
from tests.tcp_proxy import TcpProxy, proxied

from jobgate.api.server_state import ServerState
from jobgate.console.app import create_app
from jobgate.core.tokens import Role
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


@pytest.fixture
def proxy(database_url: str) -> Iterator[TcpProxy]:
    url = make_url(database_url)
    with proxied(url.host or "127.0.0.1", url.port or 5432) as p:
        yield p


@pytest.fixture
def outage_world(database_url: str, proxy: TcpProxy, tmp_path: Path) -> Iterator[World]:
    via = make_url(database_url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    store = Store(via)
    engine = Engine(store, make_config(tmp_path, server={"stream_poll_ms": 50, "stream_heartbeat_seconds": 3}))
    world = build_world(engine)
    with world.client:
        yield world
    store.dispose()


def run_count(world: World) -> int:
    return count(world.engine, "job_runs")


def test_every_route_answers_503_while_the_database_is_cut_and_stores_nothing(
    outage_world: World, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    world = outage_world
    headers = world.headers("acme", Role.OPERATOR)
    before = run_count(world)
    proxy.cut()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        listed = world.client.get("/api/v1/runs", headers=headers)
        posted = world.client.post(
            "/api/v1/runs", json={"job_definition_id": ACME_JOB, "params": {"n": "1"}}, headers=headers
        )
        schedules = world.client.get("/api/v1/schedules", headers=headers)
    for response in (listed, posted, schedules):
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"].isdigit()
        assert response.json()["error"] == "unavailable"
        assert "SELECT" not in response.text and "Traceback" not in response.text
    assert "Traceback" not in caplog.text
    assert "SELECT" not in caplog.text and "INSERT" not in caplog.text
    assert any(getattr(r, "action", None) == "api_database_unavailable" for r in caplog.records)
    proxy.restore()
    assert run_count(world) == before  # the refused POST stored nothing
    again = world.client.post(
        "/api/v1/runs", json={"job_definition_id": ACME_JOB, "params": {"n": "1"}}, headers=headers
    )
    assert again.status_code == 201, again.text
    assert run_count(world) == before + 1


class ServedInThread:
    """The application under uvicorn in this process: a stream is read as it is written."""

    def __init__(self, state: ServerState) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(create_app(state), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        wait_until(lambda: self.server.started, timeout=20, what="uvicorn to start")
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)


def test_a_run_stream_outlasts_a_short_outage_and_ends_cleanly_at_a_long_one(
    outage_world: World, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    world = outage_world
    run = world.new_run()  # no worker here: it stays pending, so the stream stays open
    headers = world.headers("acme", Role.OPERATOR)
    state = world.client.app.state.server  # type: ignore[attr-defined]
    with ServedInThread(state) as url, caplog.at_level(logging.WARNING):
        with httpx.stream("GET", f"{url}/api/v1/runs/{run.job_run_id}/stream", headers=headers, timeout=30) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            seen: list[str] = []
            for line in lines:  # up to the first heartbeat
                seen.append(line)
                if line == "event: heartbeat":
                    break
            proxy.cut()  # shorter than the heartbeat: polls fail, the stream waits
            wait_until(
                lambda: any(getattr(x, "action", None) == "stream_database_unavailable" for x in caplog.records),
                timeout=10,
                what="a poll to meet the outage",
            )
            proxy.restore()
            for line in lines:  # the next heartbeat comes: the stream survived
                if line == "event: heartbeat":
                    break
            else:
                raise AssertionError("the stream ended at a short outage")
            proxy.cut()  # now past a heartbeat: its credential check cannot be answered
            rest = [line for line in lines if line.startswith("event: ")]  # ends when the server ends it
            assert "event: terminal" not in rest and "event: gone" not in rest
        proxy.restore()
    assert "Traceback" not in caplog.text
    assert "Exception in ASGI application" not in caplog.text
    said = [r for r in caplog.records if getattr(r, "action", None) == "stream_database_unavailable"]
    assert len(said) == 2  # once per outage, not at every poll


def test_a_worker_says_a_database_outage_once_not_at_every_turn(
    outage_world: World, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a regression review: an embedded worker logged a full traceback ten times a
    second while the database was away."""
    from tests.runtime.runtime_support import running_worker

    with caplog.at_level(logging.WARNING), running_worker(outage_world.engine):
        proxy.cut()
        wait_until(lambda: proxy.refused >= 20, timeout=60, what="the worker to try again and again")
        proxy.restore()
    failed = [r for r in caplog.records if getattr(r, "action", None) == "turn_failed"]
    assert len(failed) <= 2 and all(r.exc_info is None for r in failed)
    loops = [r.getMessage().split(":")[0] for r in caplog.records if getattr(r, "action", None) == "loop_failed"]
    assert len(loops) == len(set(loops))  # each background loop says it once per outage
    assert "Traceback" not in caplog.text
