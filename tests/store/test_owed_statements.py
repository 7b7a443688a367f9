"""``driver.owe``: a statement whose effect ends with its transaction (a lock, a local setting)
travels with the transaction's next statement, whichever path sends it, and is never carried
into another transaction."""

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
