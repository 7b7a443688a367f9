"""The run predicates the claim and lease scans share, written as literal SQL.

Literal predicates, identical to the partial indexes' WHERE clauses: with bound parameters
SQLite cannot prove a query implies the index condition and scans the whole table instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, func, text

from jobgate.core.states import LEASED
from jobgate.store.tables import CLAIMABLE_SQL, HELD_SQL, LEASED_SQL, QUEUE_DEADLINE_SQL

CHUNK = 400
LEASED_STATUSES = [s.value for s in LEASED]
IS_CLAIMABLE = text(CLAIMABLE_SQL)
IS_LEASED = text(LEASED_SQL)
IS_HELD = text(HELD_SQL)
WAITS_WITH_QUEUE_DEADLINE = text(QUEUE_DEADLINE_SQL)


def chunks(items: Sequence[Any], size: int = CHUNK) -> list[Sequence[Any]]:
    """``items`` in slices of at most ``size`` (bound parameters per statement are limited)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def starts_with(column: Any, prefix: str) -> ColumnElement[bool]:
    """``column`` begins with ``prefix``, exactly: ``LIKE`` narrows (an index can serve it) and a
    comparison of the leading characters decides, since SQLite's ``LIKE`` ignores case and a
    schedule ``Nightly`` is not the schedule ``nightly``."""
    return and_(column.startswith(prefix, autoescape=True), func.substr(column, 1, len(prefix)) == prefix)
