"""The migration history builds exactly the schema declared in ``store/tables.py``, on both backends."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from tests.helpers import APP_ROLE, PG_URL

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


def test_processes_starting_at_once_converge_on_one_schema(database_url: str, tmp_path: Path) -> None:
    """Four processes migrate an empty database at the same moment: all start, one schema."""
    if database_url.startswith("postgresql"):
        schema = f"jobgate_race_{uuid.uuid4().hex[:8]}"
        admin = create_engine(_url(PG_URL))
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}" AUTHORIZATION {APP_ROLE}'))
        url = database_url.split("?")[0] + f"?options=-csearch_path%3D{schema}"
    else:
        url = f"sqlite:///{tmp_path}/race.db"
    code = "import sys; from jobgate.store.sqlstore import Store; Store(sys.argv[1]).dispose()"
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE) for _ in range(4)]
        errors = [p.communicate(timeout=120)[1].decode() for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
        engine = create_engine(_url(url))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [HEAD]
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        engine.dispose()
    finally:
        if database_url.startswith("postgresql"):
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()
