"""Which database errors are passing: worth the same write again after a pause.

A restarted server, a dropped or killed session, a deadlock or serialization failure, or a
locked SQLite file say nothing about the data: the same transaction may succeed in a moment.
Anything else (a constraint, a bad value) will fail the same way every time and must not be
retried blindly.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

# SQLSTATE classes and codes (PostgreSQL appendix A).
_TRANSIENT_CLASSES = ("08", "53", "57")  # connection exception, insufficient resources, operator intervention
_TRANSIENT_CODES = {"40001", "40P01"}  # serialization failure, deadlock detected


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        code = getattr(exc.orig, "sqlstate", None) or ""
        return code in _TRANSIENT_CODES or code[:2] in _TRANSIENT_CLASSES
    return False
