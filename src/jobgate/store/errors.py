"""Which database errors are passing: worth the same write again after a pause.

A restarted server, a dropped or killed session, a deadlock or serialization failure, a locked
SQLite file or a full disk say nothing about the data: the same transaction may succeed in a
moment.
Anything else (a constraint, a bad value) will fail the same way every time and must not be
retried blindly.
"""

from __future__ import annotations

import sqlite3

import psycopg
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from jobgate.core.errors import UnavailableError

# SQLSTATE classes and codes (PostgreSQL appendix A).
_TRANSIENT_CLASSES = ("08", "53", "57")  # connection exception, insufficient resources, operator intervention
_TRANSIENT_CODES = {"40001", "40P01"}  # serialization failure, deadlock detected


def is_transient(exc: BaseException) -> bool:
    """True for a passing error, whether SQLAlchemy wrapped it or it came straight from the
    driver: the hot path executes through the driver's own cursor (``sql.fast``), so a
    deadlock at a worker's settlement arrives as psycopg's own ``DeadlockDetected``."""
    if isinstance(exc, DBAPIError):
        if isinstance(exc.orig, sqlite3.Error):  # SQLite's own error says what it is, wrapped or not
            return exc.connection_invalidated or _transient_driver_error(exc.orig)
        if isinstance(exc, OperationalError | InterfaceError) or exc.connection_invalidated:
            return True
        return _transient_driver_error(exc.orig)
    return _transient_driver_error(exc)


def driver_says(exc: BaseException) -> str:
    """The first line of what the driver said (SQLAlchemy's wrapper adds the statement and its
    parameters below it: never shown or logged), or the error's class when it said nothing."""
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def _transient_driver_error(err: BaseException | None) -> bool:
    code = getattr(err, "sqlstate", None)
    if code:
        return code in _TRANSIENT_CODES or code[:2] in _TRANSIENT_CLASSES
    if isinstance(err, psycopg.OperationalError | psycopg.InterfaceError):
        return True  # no SQLSTATE: the connection itself failed
    if isinstance(err, sqlite3.Error):
        code = getattr(err, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in _SQLITE_PASSING
        # An error made without SQLite's code (a test's, a wrapper's): read its words.
        return isinstance(err, sqlite3.OperationalError) and any(w in str(err) for w in _SQLITE_PASSING_WORDS)
    return False


# SQLite's primary result codes that say nothing about the data: the file is busy or locked,
# memory ran out, the file or its disk cannot take the write now (full, read-only, an I/O error,
# cannot be opened), the WAL's locks raced. A full disk freed a moment later must not cost a run
# its outcome (a worker kept the settlement of a success and wrote it when space came back, where
# a lasting error made it give the run up to the rescuer, which ran it again). Everything else
# (no such table, a constraint, a corrupt file) fails the same way every time.
_SQLITE_PASSING = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_NOMEM,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL,
}
_SQLITE_PASSING_WORDS = ("locked", "busy", "disk is full", "disk I/O error", "readonly database", "unable to open")


class SealWritersBusy(UnavailableError):
    """A seal batch could not fix its horizon: a transaction writing seals has been open longer
    than the batch waits (``store.sql.seals.HORIZON_WAIT_MS``). The batch is put off rather than
    queued behind it, because every other writer would queue behind the batch."""

    code = "seal_writers_busy"


class GatesBusy(UnavailableError):
    """A gate-closing write (a revocation, safe mode on, a suspension) could not take the
    admission gates exclusively in time: a worker's transaction held them (``claims.gates_closing``)."""

    code = "gates_busy"


class DatabaseFileReplaced(UnavailableError):
    """The SQLite file this process opened is no longer at its path (deleted, or another file
    moved there): what the process wrote now would be written to a file nobody else sees and
    lost when it ends. Every transaction is refused until the process is restarted."""

    code = "database_file_replaced"
    passes = False
