"""Shared fixtures: the same engine tests run on a real SQLite file and on the real PostgreSQL.

PostgreSQL: ``JOBGATE_TEST_POSTGRES_URL`` (default: the local test server). Locally a missing
server skips those tests; in CI (``CI=true``) it fails them, so a green CI always means both
backends were exercised.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import APP_ROLE, PG_URL, SERVER_URL, make_config
from jobgate.config import JobgateConfig
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store
from jobgate.store.tables import metadata

TESTS = Path(__file__).resolve().parent
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _psycopg(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def _pg_available() -> str | None:
    try:
        eng = create_engine(_psycopg(PG_URL))
        with eng.connect() as conn:
            conn.execute(text("SELECT 1"))
        eng.dispose()
        return None
    except Exception as exc:  # the reason is shown in the skip or failure
        return f"{type(exc).__name__}: {exc}"


def pytest_configure(config: pytest.Config) -> None:
    """Before any test: the application role every PostgreSQL test connects as and, under
    pytest-xdist, this worker's own database. Workers start together, so the role is created
    under an advisory lock; an unreachable server is left to ``pg_schema_url`` to report."""
    try:
        admin = create_engine(_psycopg(SERVER_URL), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(hashtext('jobgate tests: roles'))"))
            if not conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": APP_ROLE}).first():
                conn.execute(text(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS"))
            conn.execute(text("SELECT pg_advisory_unlock(hashtext('jobgate tests: roles'))"))
            database = make_url(PG_URL).database
            if (
                database != make_url(SERVER_URL).database
                and not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": database}).first()
            ):
                conn.execute(text(f'CREATE DATABASE "{database}"'))
        admin.dispose()
    except Exception:  # reported, with its reason, by the first test that needs PostgreSQL
        pass


@pytest.fixture(scope="session")
def pg_schema_url() -> Iterator[str]:
    """A private schema for this test session, migrated once; dropped at the end."""
    problem = _pg_available()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI and is not reachable at {PG_URL}: {problem}")
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {problem}")
    schema = f"jobgate_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(_psycopg(PG_URL))
    with admin.begin() as conn:
        # As in a deployment, jobgate connects as an ordinary role that owns its schema: not a
        # superuser, so the row-level security policies bind every query of the suite.
        conn.execute(text(f'CREATE SCHEMA "{schema}" AUTHORIZATION {APP_ROLE}'))
    sep = "&" if "?" in PG_URL else "?"
    app_url = make_url(PG_URL).set(username=APP_ROLE).render_as_string(hide_password=False)
    url = f"{app_url}{sep}options=-csearch_path%3D{schema}"
    Store(url).dispose()  # migrate once
    try:
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def _truncate_pg(url: str) -> None:
    eng = create_engine(_psycopg(url))
    with eng.begin() as conn:
        names = ", ".join(t.name for t in metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY"))
    eng.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once for the session: each test gets a copy, where migrating a
    fresh file cost 0.15 s for every one of some two thousand tests (the migration history is
    tested on its own, in tests/store/test_migrations.py)."""
    import sqlite3

    path = tmp_path_factory.mktemp("template") / "jobgate.db"
    Store(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as conn:  # everything in the main file, nothing left in the WAL
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        import shutil

        shutil.copyfile(request.getfixturevalue("sqlite_template"), tmp_path / "jobgate.db")
        return f"sqlite:///{tmp_path}/jobgate.db"
    url: str = request.getfixturevalue("pg_schema_url")
    _truncate_pg(url)
    return url


@pytest.fixture
def config(tmp_path: Path) -> JobgateConfig:
    return make_config(tmp_path)


@pytest.fixture
def engine(database_url: str, config: JobgateConfig) -> Iterator[Engine]:
    store = Store(database_url)
    eng = Engine(store, config)
    yield eng
    store.dispose()
