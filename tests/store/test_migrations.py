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


def test_events_written_before_the_outbox_cursor_keep_their_delivery_state(database_url: str) -> None:
    """Migration 0017 on PostgreSQL: events already delivered are not delivered again, those
    still pending are delivered next, in id order, before anything written afterwards."""
    if not database_url.startswith("postgresql"):
        import pytest

        pytest.skip("SQLite delivered by cursor before 0017 and still does")
    from datetime import UTC, datetime

    from jobgate.clock import SystemClock
    from jobgate.core.events import EventType
    from jobgate.runtime.outbox import RecordingSink, publish_once
    from jobgate.store.migrate import upgrade

    schema = f"jobgate_0017_{uuid.uuid4().hex[:8]}"
    admin = create_engine(_url(PG_URL))
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}" AUTHORIZATION {APP_ROLE}'))
    url = database_url.split("?")[0] + f"?options=-csearch_path%3D{schema}"
    try:
        old = Store(url, migrate=False)
        with old._writer.connect() as conn:
            upgrade(conn, "0016")
            for i, delivered in enumerate([True, False, True, False], start=1):
                conn.execute(
                    text(
                        "INSERT INTO outbox (tenant_id, job_run_id, event_type, payload, created_at, delivered_at) "
                        "VALUES ('default', :rid, 'job_started', :payload, 1, :delivered)"
                    ),
                    {"rid": f"r{i}", "payload": f'{{"n":{i}}}', "delivered": 1 if delivered else None},
                )
            conn.commit()
        old.dispose()
        store = Store(url)  # migrates to the head
        with store.write() as tx:
            tx.outbox_append([("r5", "default", (EventType.JOB_STARTED, {"n": 5}))], datetime.now(UTC))
        sink = RecordingSink()
        with store.read() as tx:
            assert tx.outbox_backlog() == 3
        assert publish_once(store, [sink], SystemClock()) == 3
        assert [e.payload["n"] for e in sink.events] == [2, 4, 5]
        assert publish_once(store, [sink], SystemClock()) == 0
        store.dispose()
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
