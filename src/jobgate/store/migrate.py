"""Schema migrations: one linear Alembic history for both backends, applied on start.

Starting processes race to migrate; PostgreSQL serialises them with an advisory lock and
SQLite with its write lock, so they converge on one schema. When the database is already at
``HEAD`` the check is one small query and Alembic is not loaded at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Connection, text

# The newest revision in migrations/versions; a test checks this equals Alembic's head.
HEAD = "0033"
MIGRATIONS = Path(__file__).parent / "migrations"
_ADVISORY_KEY = 0x6A6F6267  # "jobg"


def current_revision(conn: Connection) -> str | None:
    try:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except Exception:
        conn.rollback()
        return None


def alembic_config(conn: Connection) -> object:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def upgrade(conn: Connection, revision: str = "head") -> None:
    if revision == "head" and current_revision(conn) == HEAD:
        conn.rollback()
        return
    # End the check's transaction before waiting for the file lock: on SQLite it can hold the
    # database's write lock, which the process migrating under the file lock needs (a deadlock
    # that ended in "database is locked" once the history grew long enough to take a while).
    conn.rollback()
    from alembic import command

    with _sqlite_file_lock(conn):
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_KEY})
        try:
            # Alembic reads the current revision again under the lock: what a process that
            # migrated meanwhile did is not done twice.
            command.upgrade(alembic_config(conn), revision)  # type: ignore[arg-type]
            conn.commit()
        finally:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_KEY})
                conn.commit()


@contextlib.contextmanager
def _sqlite_file_lock(conn: Connection) -> Iterator[None]:
    """SQLite: an exclusive lock on ``<database>.migrate-lock`` for the whole upgrade.

    SQLite's own write lock does not span Alembic's steps (DDL and the version table are
    written in more than one transaction), and four processes starting on an empty file at
    once were seen to apply one migration twice ("duplicate column"). SQLite is one host's
    database, so an OS file lock serialises every process that can open it.
    """
    database = conn.engine.url.database
    if conn.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    import fcntl

    with open(f"{database}.migrate-lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
