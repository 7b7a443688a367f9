"""PostgreSQL notifications wake idle workers; a lost listening session is re-established."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text
from tests.helpers import define

from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.notify import APPLICATION_NAME, PgChangeWatcher
from jobgate.testing import connection


@pytest.fixture
def pg(engine: Engine) -> Engine:
    if engine.store.dialect != "postgresql":
        pytest.skip("notifications are PostgreSQL's; SQLite workers watch PRAGMA data_version")
    return engine


def listening(engine: Engine) -> tuple[PgChangeWatcher, threading.Event]:
    woken = threading.Event()
    watcher = engine.store.change_watcher(on_change=woken.set)
    assert isinstance(watcher, PgChangeWatcher)
    assert watcher.listening.wait(10)
    assert watcher.changed()  # the first look always reads the queue
    woken.clear()
    return watcher, woken


def test_a_submit_wakes_a_listening_worker_and_a_duplicate_does_not(pg: Engine) -> None:
    job = define(pg)
    watcher, woken = listening(pg)
    try:
        t0 = time.perf_counter()
        pg.submit(SubmitRequest(job, request_id="k-1"), actor="t")
        assert woken.wait(5)
        print(f"woken {1000 * (time.perf_counter() - t0):.1f} ms after the submit began")
        assert watcher.changed() and not watcher.changed()
        woken.clear()
        pg.submit(SubmitRequest(job, request_id="k-1"), actor="t")  # nothing new: no news
        assert not woken.wait(0.5)
    finally:
        watcher.close()


def test_a_killed_listening_session_reconnects_and_reports_a_change(pg: Engine) -> None:
    job = define(pg)
    watcher, woken = listening(pg)
    try:
        with pg.store.write() as tx:
            killed = (
                connection(tx)
                .execute(
                    text(  # this database's only: another suite may share the server
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE application_name = :a AND datname = current_database()"
                    ),
                    {"a": APPLICATION_NAME},
                )
                .scalar_one()
            )
        assert killed >= 1
        assert woken.wait(10)  # reconnected: whatever happened meanwhile is looked at
        assert watcher.listening.wait(10)
        woken.clear()
        pg.submit(SubmitRequest(job, request_id="after"), actor="t")
        assert woken.wait(5)
    finally:
        watcher.close()
