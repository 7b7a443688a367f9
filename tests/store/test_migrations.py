"""The migration history builds exactly the schema declared in ``store/tables.py``, on both backends."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from jobgate.store.migrate import HEAD, MIGRATIONS, alembic_config
from jobgate.store.sqlstore import Store
from jobgate.store.tables import metadata


def _url(database_url: str) -> str:
    return database_url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_head_constant_is_alembic_head(database_url: str) -> None:
    engine = create_engine(_url(database_url))
    with engine.connect() as conn:
        script = ScriptDirectory.from_config(alembic_config(conn))  # type: ignore[arg-type]
        assert script.get_current_head() == HEAD
    engine.dispose()
    assert MIGRATIONS.is_dir()


def test_migrated_schema_matches_declared_tables(database_url: str) -> None:
    Store(database_url).dispose()
    engine = create_engine(_url(database_url))
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        diff = compare_metadata(context, metadata)
    engine.dispose()
    assert diff == []


def test_migrating_twice_is_a_no_op(database_url: str) -> None:
    Store(database_url).dispose()
    Store(database_url).dispose()
    engine = create_engine(_url(database_url))
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == HEAD
    engine.dispose()
