"""``driver.owe``: a statement whose effect ends with its transaction (a lock, a local setting)
travels with the transaction's next statement, whichever path sends it, and is never carried
into another transaction; a write owed travels with the next statement or the commit; the
transaction's own ``BEGIN`` is owed, and a transaction is still one on the server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import StaticPool

from jobgate.store.sql import driver

SETTING = "jobgate.owed_test"
OWED = f"SELECT set_config('{SETTING}', 'owed', true)"
ASK = f"SELECT current_setting('{SETTING}', true)"


@pytest.fixture
def one_connection(database_url: str) -> Iterator[Engine]:
    """An engine with a single connection, so every transaction below uses the same one."""
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite runs an owed statement at once; nothing travels")
    url = database_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(url, poolclass=StaticPool)
    driver.owing(engine)
    yield engine
    engine.dispose()


NEXT_STATEMENTS: dict[str, Callable[[Connection], Any]] = {
    "driver": lambda c: driver.rows_sql(c, ASK, [])[0][0],
    "driver, in a pipeline": lambda c: driver.returning_each(c, [(text(ASK), {})])[0][0]["current_setting"],
    "core": lambda c: c.execute(text(ASK)).scalar(),
    "driver's parameterless": lambda c: (driver.execute(c, "SELECT 1"), c.execute(text(ASK)).scalar())[1],
    "stream": lambda c: next(driver.stream(c, text(ASK)))["current_setting"],
}


@pytest.mark.parametrize("send", NEXT_STATEMENTS.values(), ids=NEXT_STATEMENTS.keys())
def test_what_is_owed_holds_for_the_next_statement_however_it_is_sent(
    one_connection: Engine, send: Callable[[Connection], Any]
) -> None:
    with one_connection.begin() as conn:
        driver.owe(conn, OWED)
        assert send(conn) == "owed"


def test_what_a_transaction_owed_and_never_sent_is_not_carried_into_the_next(one_connection: Engine) -> None:
    with one_connection.begin() as conn:
        driver.owe(conn, OWED)  # and nothing else: committed without sending it
    with one_connection.begin() as conn:
        assert conn.execute(text(ASK)).scalar() in (None, "")
    with one_connection.connect() as conn:  # a rolled-back one neither
        driver.owe(conn, OWED)
        conn.rollback()
        assert conn.execute(text(ASK)).scalar() in (None, "")
        conn.rollback()


def test_a_failing_owed_statement_fails_the_statement_it_travelled_with(one_connection: Engine) -> None:
    import psycopg

    with pytest.raises(psycopg.errors.UndefinedFunction), one_connection.begin() as conn:
        driver.owe(conn, "SELECT no_such_function()")
        driver.rows_sql(conn, "SELECT 1", [])


@pytest.mark.parametrize("send", NEXT_STATEMENTS.values(), ids=NEXT_STATEMENTS.keys())
def test_the_owed_begin_makes_one_transaction_whichever_path_sends_first(
    one_connection: Engine, send: Callable[[Connection], Any]
) -> None:
    """psycopg's connections are in autocommit mode and a transaction's ``BEGIN`` is owed: it
    must reach the server with the first statement, whichever path sends it, or every statement
    after it would commit on its own. One transaction has one ``now()`` and one id."""
    with one_connection.begin() as conn:
        send(conn)
        first = conn.execute(text("SELECT now(), pg_current_xact_id()::text")).one()
        conn.execute(text("SELECT pg_sleep(0.002)"))
        second = conn.execute(text("SELECT now(), pg_current_xact_id()::text")).one()
        assert first == second
        assert conn.execute(text("SELECT now() < clock_timestamp()")).scalar() is True


def test_a_rolled_back_transaction_leaves_nothing_and_a_committed_one_everything(one_connection: Engine) -> None:
    _fresh_rows(one_connection)
    with pytest.raises(RuntimeError), one_connection.begin() as conn:
        driver.run_sql(conn, "INSERT INTO owed_rows VALUES (%s)", [1])
        conn.execute(text("INSERT INTO owed_rows VALUES (2)"))
        raise RuntimeError("rolled back")
    with one_connection.begin() as conn:
        driver.run_sql(conn, "INSERT INTO owed_rows VALUES (%s)", [3])
    assert _rows(one_connection) == [3]


def test_a_transaction_that_sent_nothing_never_began_on_the_server(one_connection: Engine) -> None:
    with one_connection.begin() as conn:
        dbapi: Any = conn.connection.dbapi_connection
        assert dbapi.info.transaction_status.name == "IDLE"  # BEGIN still owed
        driver.rows_sql(conn, "SELECT 1", [])
        assert dbapi.info.transaction_status.name == "INTRANS"
    assert dbapi.info.transaction_status.name == "IDLE"


def _fresh_rows(engine: Engine) -> None:
    with engine.begin() as conn:  # a table of this session (one connection)
        conn.execute(text("CREATE TEMP TABLE IF NOT EXISTS owed_rows (n int)"))
        conn.execute(text("DELETE FROM owed_rows"))


def _rows(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT coalesce(array_agg(n ORDER BY n), '{}') FROM owed_rows")).scalar()
        conn.rollback()
    return list(found)


def test_an_owed_write_is_sent_with_the_commit_when_nothing_follows_it(one_connection: Engine) -> None:
    _fresh_rows(one_connection)
    with one_connection.begin() as conn:
        driver.run_sql(conn, "INSERT INTO owed_rows VALUES (%s)", [1])
        driver.owe(conn, "INSERT INTO owed_rows VALUES (%s)", [2], write=True)
    assert _rows(one_connection) == [1, 2]


def test_an_owed_write_is_seen_by_the_next_statement(one_connection: Engine) -> None:
    _fresh_rows(one_connection)
    with one_connection.begin() as conn:
        driver.owe(conn, "INSERT INTO owed_rows VALUES (%s)", [5], write=True)
        assert conn.execute(text("SELECT count(*) FROM owed_rows")).scalar() == 1
    assert _rows(one_connection) == [5]


def test_an_owed_write_that_fails_fails_the_commit_and_nothing_is_kept(one_connection: Engine) -> None:
    import psycopg

    _fresh_rows(one_connection)
    with pytest.raises(psycopg.errors.DivisionByZero), one_connection.begin() as conn:
        driver.run_sql(conn, "INSERT INTO owed_rows VALUES (%s)", [1])
        driver.owe(conn, "INSERT INTO owed_rows VALUES (1 / %s)", [0], write=True)
    assert _rows(one_connection) == []
    with one_connection.begin() as conn:  # the connection is fit for the next transaction
        driver.run_sql(conn, "INSERT INTO owed_rows VALUES (%s)", [3])
    assert _rows(one_connection) == [3]


def test_a_rolled_back_transaction_never_sends_its_owed_write(one_connection: Engine) -> None:
    _fresh_rows(one_connection)
    with pytest.raises(RuntimeError), one_connection.begin() as conn:
        driver.run_sql(conn, "INSERT INTO owed_rows VALUES (%s)", [1])
        driver.owe(conn, "INSERT INTO owed_rows VALUES (%s)", [2], write=True)
        raise RuntimeError("rolled back")
    with one_connection.begin() as conn:  # nor carries it into the next one
        driver.run_sql(conn, "INSERT INTO owed_rows VALUES (%s)", [3])
    assert _rows(one_connection) == [3]


def test_a_session_lost_before_the_commit_fails_it_and_the_connection_is_not_reused(
    one_connection: Engine, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The owed write travels with the COMMIT, inside SQLAlchemy's commit event: a session killed
    before it fails the commit, nothing is kept, and the pool replaces the connection (a review
    found it handed back for a reset that logged a traceback)."""
    import psycopg

    _fresh_rows(one_connection)
    with one_connection.connect() as conn:  # a plain table: the temp one dies with the session
        conn.execute(text("CREATE TABLE IF NOT EXISTS owed_kept (n int)"))
        conn.execute(text("DELETE FROM owed_kept"))
        conn.commit()
    with pytest.raises(psycopg.OperationalError), one_connection.begin() as conn:
        driver.run_sql(conn, "INSERT INTO owed_kept VALUES (%s)", [1])
        driver.owe(conn, "INSERT INTO owed_kept VALUES (%s)", [2], write=True)
        pid = conn.connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        with psycopg.connect(database_url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # no reset of a dead session tried
    with one_connection.begin() as conn:  # a new session: the next transaction works
        assert conn.execute(text("SELECT count(*) FROM owed_kept")).scalar() == 0
        conn.execute(text("DROP TABLE owed_kept"))
