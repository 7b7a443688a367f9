"""Outages: killed database sessions do not lose a run's outcome or cost it an attempt."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from runtime_support import get_run, running_worker, wait_until
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.errors import is_transient
from jobgate.store.notify import APPLICATION_NAME
from jobgate.store.sqlstore import StoreTx
from jobgate.testing import connection

SECONDS = [{"name": "seconds", "pattern": "[0-9.]+"}]


def kill_other_sessions(engine: Engine) -> int:
    """Terminate every other session of this database role, as a failover or an operator would."""
    with engine.store.write() as tx:
        return int(
            connection(tx)
            .execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE usename = current_user AND pid <> pg_backend_pid() AND datname = current_database()"
                )
            )
            .scalar_one()
        )


def test_sessions_killed_again_and_again_mid_run_lose_nothing(engine: Engine) -> None:
    if engine.store.dialect != "postgresql":
        pytest.skip("sessions to kill are PostgreSQL's")
    job = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    runs = [engine.submit(SubmitRequest(job, params={"seconds": "1"}, request_id=f"r{i}")).run for i in range(6)]
    ids = [r.job_run_id for r in runs]
    with running_worker(engine, concurrency=3):
        wait_until(lambda: sum(get_run(engine, i).status is RunStatus.RUNNING for i in ids) >= 3, what="running")
        killed = 0
        deadline = time.monotonic() + 2.5  # kill repeatedly while attempts end and settle
        while time.monotonic() < deadline:
            killed += kill_other_sessions(engine)
            # real time: a chaos loop, kills 0.2 s apart over the seconds the server's sessions serve the worker
            time.sleep(0.2)
        assert killed >= 1
        wait_until(
            lambda: all(get_run(engine, i).status is RunStatus.COMPLETED for i in ids), timeout=30, what="all done"
        )
    assert [get_run(engine, i).attempt for i in ids] == [1] * len(ids)  # no attempt lost to the outage


def _through_an_outage_at_settlement(
    engine: Engine, ids: list[str], outage: Callable[[bool], None], *, failures: int
) -> None:
    """With a worker running the runs ``ids``: ``outage(True)`` once all run, wait until every
    attempt has ended with its settlement held and the worker's cycles writing them have failed
    ``failures`` times in a row, ``outage(False)``, and check every run completed on its first
    attempt, no write refused as stale."""
    with running_worker(engine) as worker:
        wait_until(lambda: all(get_run(engine, i).status is RunStatus.RUNNING for i in ids), what="all running")
        outage(True)
        wait_until(
            lambda: sorted(run_id for _, run_id in list(worker._pending)) == sorted(ids),
            what="the attempts to end, their settlements held",
            last=lambda: [run_id for _, run_id in list(worker._pending)],
        )
        failed = worker._cycle_failures
        wait_until(
            lambda: worker._cycle_failures >= max(failed + 1, failures),
            what=f"the worker's cycles to fail writing them, {failures} in a row",
            last=lambda: worker._cycle_failures,
        )
        outage(False)
        wait_until(lambda: all(get_run(engine, i).status is RunStatus.COMPLETED for i in ids), timeout=30, what="done")
        assert worker.stale_writes_refused == 0
    assert [get_run(engine, i).attempt for i in ids] == [1] * len(ids)


def test_a_database_outage_at_settlement_keeps_the_outcomes_and_uses_no_attempt(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write fails while attempts end (as during a server restart), cycle after cycle: the
    worker keeps their settlements and writes them when the database is back, instead of giving
    the runs up to the rescuer (which would retry them, using an attempt each)."""
    job = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    ids = [
        engine.submit(SubmitRequest(job, params={"seconds": "0.5"}, request_id=f"r{i}")).run.job_run_id
        for i in range(3)
    ]
    outage = threading.Event()
    real_write = engine.store.write

    @contextlib.contextmanager
    def write(tenant_id: str | None = None) -> Iterator[StoreTx]:
        if outage.is_set():
            raise OperationalError("BEGIN", {}, Exception("the database system is shutting down"))
        with real_write(tenant_id) as tx:
            yield tx

    monkeypatch.setattr(engine.store, "write", write)
    # The attempts end meanwhile; nothing can be written. The worker holds the three settlements,
    # and its cycles writing them keep failing (three in a row is when it would write them one by
    # one, were the error not a passing one).
    _through_an_outage_at_settlement(engine, ids, lambda on: outage.set() if on else outage.clear(), failures=3)


def test_a_file_that_cannot_take_writes_at_settlement_keeps_the_outcomes(engine: Engine) -> None:
    """The database file refusing writes while attempts end (a full disk, a read-only remount:
    here SQLite's own ``SQLITE_READONLY``, from ``query_only`` on the process's writing
    connection), then taking them again: the worker keeps the settlements and writes them (a
    lasting error made it give the runs up to the rescuer, which ran each again)."""
    if engine.store.dialect != "sqlite":
        pytest.skip("the file's refusal is SQLite's")
    job = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    ids = [
        engine.submit(SubmitRequest(job, params={"seconds": "0.5"}, request_id=f"r{i}")).run.job_run_id
        for i in range(3)
    ]
    with engine.store.write() as tx:
        writing = connection(tx).connection.dbapi_connection  # the one the process's turns share

    def refuse_writes(refused: bool) -> None:
        with engine.store._write_turn:  # between two turns: the connection is idle
            writing.execute(f"PRAGMA query_only = {'ON' if refused else 'OFF'}")  # type: ignore[union-attr]

    _through_an_outage_at_settlement(engine, ids, refuse_writes, failures=4)  # more than three in a row


def test_sqlites_own_full_disk_and_io_errors_are_passing(tmp_path: Path) -> None:
    """Judged by SQLite's result code: a full file (``max_page_count`` reached, as a full disk
    says it) is passing; a missing table is not."""
    conn = sqlite3.connect(tmp_path / "full.db", isolation_level=None)
    conn.execute("CREATE TABLE t (b BLOB)")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError) as full:
        for _ in range(100):
            conn.execute("INSERT INTO t VALUES (zeroblob(4000))")
    with pytest.raises(sqlite3.OperationalError) as missing:
        conn.execute("SELECT * FROM nowhere")
    conn.close()
    assert full.value.sqlite_errorcode == sqlite3.SQLITE_FULL and is_transient(full.value)
    assert not is_transient(missing.value)


def test_passing_errors_are_told_from_lasting_ones(engine: Engine) -> None:
    with pytest.raises(Exception) as lasting, engine.store.write() as tx:
        connection(tx).execute(text("INSERT INTO locks (name) VALUES (NULL)"))
    assert not is_transient(lasting.value)
    assert is_transient(OperationalError("SELECT 1", {}, Exception("server closed the connection")))


@pytest.mark.parametrize(
    ("error", "passing"),
    [
        (psycopg.errors.DeadlockDetected("deadlock detected"), True),
        (psycopg.errors.SerializationFailure("could not serialize access"), True),
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (sqlite3.OperationalError("database is locked"), True),
        (sqlite3.OperationalError("database or disk is full"), True),
        (sqlite3.OperationalError("disk I/O error"), True),
        (sqlite3.OperationalError("no such table: audit_log"), False),
        (psycopg.errors.UndefinedTable('relation "audit_log" does not exist'), False),
        (psycopg.errors.StringDataRightTruncation("value too long for type character varying(64)"), False),
        (psycopg.errors.UniqueViolation("duplicate key value"), False),
        (sqlite3.IntegrityError("UNIQUE constraint failed"), False),
        (ValueError("not a database error"), False),
    ],
)
def test_errors_straight_from_the_driver_are_judged_like_wrapped_ones(error: Exception, passing: bool) -> None:
    """The hot path executes through the driver's own cursor: its errors arrive unwrapped."""
    assert is_transient(error) is passing


def listening_sessions(engine: Engine) -> set[int]:
    """The backend pids of this role's sessions listening for new runs (workers' watchers)."""
    with engine.store.read() as tx:
        rows = connection(tx).execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE application_name = :a "
                "AND usename = current_user AND datname = current_database()"
            ),
            {"a": APPLICATION_NAME},
        )
        return {int(r[0]) for r in rows}


def test_a_worker_survives_a_killed_listening_and_pool_sessions_and_keeps_claiming(engine: Engine) -> None:
    if engine.store.dialect != "postgresql":
        pytest.skip("sessions to kill are PostgreSQL's")
    job = define(engine)
    with running_worker(engine) as worker:
        first = engine.submit(SubmitRequest(job, request_id="before")).run
        wait_until(lambda: get_run(engine, first.job_run_id).status is RunStatus.COMPLETED, what="first done")
        for _ in range(3):  # killed again and again: each time, once the worker listens anew
            wait_until(lambda: listening_sessions(engine) != set(), what="the worker to listen")
            before = listening_sessions(engine)
            assert kill_other_sessions(engine) >= 1
            wait_until(
                lambda before=before: (now := listening_sessions(engine)) != set() and not now & before,
                what="the worker to listen again on a new session",
                last=lambda: listening_sessions(engine),
            )
        later = engine.submit(SubmitRequest(job, request_id="after")).run
        wait_until(lambda: get_run(engine, later.job_run_id).status is RunStatus.COMPLETED, timeout=20, what="after")
        assert not worker.wait_stopped(0)


def test_pooled_connections_ended_while_idle_are_replaced_without_a_failed_transaction(engine: Engine) -> None:
    """Idle pooled sessions ended by the server (an operator, a failover, a timeout), at once
    before the next transactions, are found at checkout and replaced: no transaction fails."""
    if engine.store.dialect != "postgresql":
        pytest.skip("pooled server sessions are PostgreSQL's")
    for _ in range(20):
        with contextlib.ExitStack() as stack:  # three pooled connections, idle once the block ends
            for _ in range(3):
                connection(stack.enter_context(engine.store.read())).exec_driver_sql("SELECT 1")
        assert kill_other_sessions(engine) >= 2  # the idle ones beside the one that ends them
        with engine.store.read() as tx:  # at once: the ended sessions may not have said so yet
            assert connection(tx).exec_driver_sql("SELECT 1").scalar_one() == 1


def test_a_worker_whose_database_file_was_moved_away_says_so_once_and_goes_on_when_it_is_back(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A review: a worker whose SQLite file was removed logged a traceback ten times a second.
    One line now; the file moved back, it works again (the same file: the same device and inode)."""
    if engine.store.dialect != "sqlite":
        pytest.skip("a database file is SQLite's")
    path = Path(str(engine.store.url).removeprefix("sqlite:///"))
    job = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    with running_worker(engine), caplog.at_level(logging.WARNING):
        first = engine.submit(SubmitRequest(job, params={"seconds": "0"})).run
        wait_until(lambda: get_run(engine, first.job_run_id).status is RunStatus.COMPLETED, what="a first run")
        path.rename(tmp_path / "aside.db")
        try:
            wait_until(
                lambda: any(getattr(r, "action", None) == "turn_failed" for r in caplog.records),
                what="the worker to notice",
            )
            time.sleep(0.5)  # real time: turns go on failing, every 0.1 s, while the file is away
            failures = [r for r in caplog.records if getattr(r, "action", None) == "turn_failed"]
        finally:
            (tmp_path / "aside.db").rename(path)
        run = engine.submit(SubmitRequest(job, params={"seconds": "0"})).run
        wait_until(lambda: get_run(engine, run.job_run_id).status is RunStatus.COMPLETED, what="the run to complete")
    assert len(failures) == 1 and failures[0].levelno == logging.WARNING and not failures[0].exc_info
    assert "removed or replaced" in failures[0].getMessage()
