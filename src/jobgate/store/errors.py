"""Which database errors are passing: worth the same write again after a pause.

A restarted server, a dropped or killed session, a deadlock or serialization failure, or a
locked SQLite file say nothing about the data: the same transaction may succeed in a moment.
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
    if isinstance(err, sqlite3.OperationalError):
        # SQLite's OperationalError also says "no such table"; only a busy file is passing.
        return "locked" in str(err) or "busy" in str(err)
    return False


class SealWritersBusy(UnavailableError):
    """A seal batch could not fix its horizon: a transaction writing seals has been open longer
    than the batch waits (``store.sql.seals.HORIZON_WAIT_MS``). The batch is put off rather than
    queued behind it, because every other writer would queue behind the batch."""

    code = "seal_writers_busy"


class GatesBusy(UnavailableError):
    """A gate-closing write (a revocation, safe mode on, a suspension) could not take the
    admission gates exclusively in time: a worker's transaction held them (``claims.gates_closing``)."""

    code = "gates_busy"
