"""The transaction object itself: savepoints, the connection handed to completion effects and the
schema revision, on both backends.

The contract: a savepoint undoes its own part alone when its block raises (the error goes on,
the rest of the transaction stands); statements on the effect connection commit or roll back
with the transaction; the schema is at the revision this version of jobgate migrates to.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from tests.store_contract.support import T0

from jobgate.service.engine import Engine
from jobgate.store.migrate import HEAD


class Boom(Exception):
    pass


def _facts(engine: Engine, name: str) -> list[float]:
    with engine.store.read() as tx:
        return [value for _, value, _ in tx.facts_list("default", name)]


def test_a_savepoint_undoes_its_part_alone_when_its_block_raises(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.fact_record("default", "f", 1.0, T0, "before")
        with pytest.raises(Boom), tx.savepoint():
            tx.fact_record("default", "f", 2.0, T0, "inside")
            raise Boom
        with tx.savepoint("second_part"):
            tx.fact_record("default", "f", 3.0, T0, "kept")
            with pytest.raises(Boom), tx.savepoint("nested"):
                tx.fact_record("default", "f", 4.0, T0, "nested")
                raise Boom
        tx.fact_record("default", "f", 5.0, T0, "after")
    assert _facts(engine, "f") == [5.0, 3.0, 1.0]


def test_a_savepoint_needs_a_plain_name(engine: Engine) -> None:
    with engine.store.write() as tx:
        with pytest.raises(ValueError, match="savepoint"), tx.savepoint("x; DROP TABLE facts"):
            pass
        tx.fact_record("default", "f", 1.0, T0, "still usable")
    assert _facts(engine, "f") == [1.0]


def test_the_effect_connection_commits_and_rolls_back_with_the_transaction(engine: Engine) -> None:
    insert = text(
        "INSERT INTO facts (tenant_id, name, value, recorded_at, source) VALUES ('default', 'effect', :v, 0, 'h')"
    )
    with pytest.raises(Boom), engine.store.write() as tx:
        tx.effect_connection().execute(insert, {"v": 1.0})
        raise Boom
    with engine.store.write() as tx:
        tx.effect_connection().execute(insert, {"v": 2.0})
        assert [v for _, v, _ in tx.facts_list("default", "effect")] == [2.0]  # the transaction sees it
    assert _facts(engine, "effect") == [2.0]


def test_the_schema_is_at_the_revision_this_version_migrates_to(engine: Engine) -> None:
    with engine.store.read() as tx:
        assert tx.schema_revision() == HEAD


def test_the_role_row_level_security_does_not_bind_is_named(engine: Engine) -> None:
    """The suite connects as an ordinary role (PostgreSQL's policies bind it); the server's
    superuser is named; SQLite has no row security to bypass."""
    from tests.helpers import SERVER_URL

    from jobgate.store.sqlstore import Store

    with engine.store.read() as tx:
        assert tx.role_bypassing_rls() is None
    if engine.store.dialect != "postgresql":
        return
    admin = Store(SERVER_URL, migrate=False)
    try:
        with admin.read() as tx:
            assert tx.role_bypassing_rls() == make_url(SERVER_URL).username
    finally:
        admin.dispose()
