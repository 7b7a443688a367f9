"""Tools for testing code that uses jobgate, and jobgate's own tests and benchmarks.

``connection(tx)`` hands a test the connection of a store transaction, to load, inspect or
tamper with rows directly; jobgate's own code never reaches past ``StoreTx``
(``tests/test_layers.py`` holds it to that).
"""

from __future__ import annotations

from sqlalchemy import Connection

from jobgate.store.sqlstore import StoreTx


def connection(tx: StoreTx) -> Connection:
    """The open transaction's connection: statements on it commit or roll back with ``tx``."""
    return tx._conn
