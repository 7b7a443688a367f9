"""Opening a database the way a command line or a server must: never creating or migrating
one by accident.

Only ``jobgate init``, ``demo`` and ``migrate`` (and a server or worker started with
``--migrate``) create a database or bring its schema up to date. Every other command opens an
existing database at this version's schema, or refuses naming what to run; a database that
cannot be reached is named with its host and the cause (``UnavailableError``), not reported
as an internal error.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from jobgate.core.errors import ConfigurationError, JobgateError, NotReadyError, UnavailableError
from jobgate.store.errors import driver_says
from jobgate.store.keepalive import PG_KEEPALIVES
from jobgate.store.migrate import HEAD
from jobgate.store.sqlstore import Store


def database_url(value: str) -> str:
    """A database URL from what a person typed: a URL as given, or a file path (relative to
    the working directory) as that SQLite file."""
    if "://" not in value:
        if not value.strip():
            raise ConfigurationError("give a database URL or a SQLite file path", field="--db")
        return f"sqlite:///{Path(value).expanduser().resolve().as_posix()}"
    _refuse_host_list(value)
    try:
        backend = make_url(value).get_backend_name()
    except ArgumentError:
        raise ConfigurationError(
            "not a database URL (sqlite:///PATH, postgresql://…) or a file path", field="--db"
        ) from None
    except ValueError:  # SQLAlchemy reads the port as a number as it parses
        raise ConfigurationError(
            "the URL's host and port cannot be read (a port must be a number)", field="--db"
        ) from None
    if backend not in {"sqlite", "postgresql"}:
        raise ConfigurationError(
            f"unsupported database {backend!r}: use sqlite:///PATH or postgresql://…", field="--db"
        )
    if backend == "postgresql":
        _check_postgresql(value)
    else:
        _check_sqlite(value)
    return value


# A SQLite URL names its file and nothing else: the driver's options were passed on unchecked
# (a review's ``?timeout=abc`` and ``?uri=true`` with an in-memory ``file:`` name were internal
# errors), and a ``timeout`` was overridden anyway: jobgate sets the file's pragmas and waits up
# to 30 s for a locked file itself.
_SQLITE_QUERY: frozenset[str] = frozenset()


def _check_sqlite(value: str) -> None:
    """A SQLite URL names a file: ``sqlite:///relative.db`` or ``sqlite:////absolute.db``. A
    review's ``sqlite:///`` (no file: a database in memory, gone with the process) and
    ``sqlite://relative.db`` (the file read as a host) failed as internal errors."""
    url = make_url(value)
    form = "sqlite:///PATH (three slashes, four for an absolute path) or the file's path"
    if url.host or url.port or url.username or url.password:
        raise ConfigurationError(f"a SQLite URL names a file, not a host: {form}", field="--db")
    if not url.database or url.database == ":memory:":
        raise ConfigurationError(
            f"a SQLite URL names a file (a database in memory would be gone when the command ends): {form}",
            field="--db",
        )
    unknown = sorted(set(url.query) - _SQLITE_QUERY)
    if unknown:
        raise ConfigurationError(
            f"unknown SQLite option {unknown[0]!r} in the URL: a SQLite URL names its file only (jobgate sets"
            " the file's settings, and waits up to 30 s for a locked file)",
            field="--db",
        )
    if ":memory:" in url.database:
        raise ConfigurationError(
            f"a SQLite URL names a file (a database in memory would be gone when the command ends): {form}",
            field="--db",
        )


def _refuse_host_list(value: str) -> None:
    """libpq's list of hosts in the address (``postgresql://u@h1:5432,h2:5432/db``) is not a
    form SQLAlchemy reads: it was refused as "a port must be a number". Say the form that
    works, which jobgate passes on to PostgreSQL's client as it is."""
    authority = value.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    if "," in authority.rsplit("@", 1)[-1]:
        raise ConfigurationError(
            "several hosts are given as query parameters: postgresql://USER@/DATABASE"
            "?host=HOST1:PORT1&host=HOST2:PORT2 (PostgreSQL's client tries them in order)",
            field="--db",
        )


_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _check_postgresql(value: str) -> None:
    """A PostgreSQL URL whose port, options and option values PostgreSQL's client can use: a
    mistyped one was an internal error (a port that is not a number) or, worse, "cannot reach
    the database" (exit 69, which tells a script to try again later). The message never
    repeats the URL: it may hold a password."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        port = make_url(value).port
    except ValueError:
        raise ConfigurationError(
            "the URL's host and port cannot be read (a port must be a number)", field="--db"
        ) from None
    if port is not None and not 1 <= port <= 65535:
        raise ConfigurationError(f"port {port} is not a port (1 to 65535)", field="--db")
    try:
        options = conninfo_to_dict("postgresql://" + value.split("://", 1)[1])
    except ProgrammingError as exc:
        named = re.search(r'invalid URI query parameter: "([^"]{1,64})"', str(exc))
        what = f"an option PostgreSQL's client does not know: {named.group(1)}" if named else "it cannot be read"
        raise ConfigurationError(f"not a PostgreSQL URL its client can use ({what})", field="--db") from None
    sslmode = options.get("sslmode")
    if sslmode is not None and sslmode not in _SSLMODES:
        raise ConfigurationError(f"sslmode must be one of {', '.join(_SSLMODES)}", field="--db")
    for name in ("connect_timeout", *PG_KEEPALIVES):
        given = options.get(name)
        if given is not None and not str(given).isdigit():
            raise ConfigurationError(f"{name} must be a whole number", field="--db")


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for PostgreSQL and in-memory databases)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


# SQLite's words for a file that is not a SQLite database, or a damaged one.
_NOT_SQLITE = frozenset({"file is not a database", "database disk image is malformed"})


def _unreachable(store_url: str, exc: DBAPIError) -> JobgateError:
    parsed = make_url(store_url)
    where = (
        parsed.database
        if parsed.get_backend_name() == "sqlite"
        else f"{parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database}"
    )
    cause = driver_says(exc)
    if parsed.get_backend_name() == "sqlite" and parsed.database and Path(parsed.database).is_dir():
        return ConfigurationError(f"{where} is a folder, not a database file", field="--db")
    if parsed.get_backend_name() == "sqlite" and cause in _NOT_SQLITE:
        # Trying again later cannot help (exit 69 tells a script to): the path names the
        # wrong file, or a damaged one.
        return ConfigurationError(f"{where} is not a jobgate database: {cause}", field="--db")
    return UnavailableError(f"cannot reach the database at {where}: {cause}", field="database")


def open_store(url: str, *, synchronous: str = "FULL", create: bool = False, hint: str = "") -> Store:
    """The store at ``url``, at this version's schema. ``create``: make the database (SQLite)
    and migrate it if it is behind; otherwise a missing or older database is refused
    (``NotReadyError``, nothing created), ``hint`` saying how to make one."""
    file = sqlite_file(url)
    if file is not None and not create and not file.exists():
        raise NotReadyError(hint or f"no database at {file}: `jobgate migrate` creates it", field="database")
    try:
        store = Store(url, synchronous=synchronous, migrate=False)
    except OSError as exc:  # its folder cannot be made (a file is in the way, no permission)
        where = file.parent if file is not None else "the database"
        raise ConfigurationError(
            f"cannot make the database's folder {where}: {exc.strerror or type(exc).__name__}", field="database"
        ) from None
    try:
        if create:
            store.migrate()
            return store
        found = revision_of(store)
    except DBAPIError as exc:
        store.dispose()
        raise _unreachable(url, exc) from None
    if found != HEAD:
        store.dispose()
        at = "has no jobgate schema" if found is None else f"is at schema {found}"
        raise NotReadyError(
            f"the database {store.safe_url} {at}; this jobgate needs {HEAD}: run `jobgate migrate` "
            "(servers and workers: or start them with --migrate)",
            field="database",
        )
    return store


def revision_of(store: Store) -> str | None:
    """The database's schema revision (None: no jobgate schema)."""
    with store.read() as tx:
        return tx.schema_revision()
