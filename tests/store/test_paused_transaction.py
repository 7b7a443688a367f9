"""A process paused inside a transaction holds its row locks for a bounded time (PostgreSQL).

Found by a review: a worker SIGSTOPped while it held its tenant's audit chain head stopped every
other worker and submission of the cluster for as long as it stayed stopped. Every jobgate
connection asks the server to end a session whose transaction has sent nothing for
``IDLE_IN_TRANSACTION_MS``; the URL's ``options`` may set another.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.engine import make_url

from jobgate.store.sqlstore import IDLE_IN_TRANSACTION_MS, Store
from jobgate.testing import connection


def _pg_only(url: str) -> None:
    if not url.startswith("postgresql"):
        pytest.skip("SQLite has no server to end a session; its writers share one file lock")


def test_every_connection_asks_for_the_bound(database_url: str) -> None:
    _pg_only(database_url)
    store = Store(database_url)
    try:
        with store.read() as tx:
            shown = connection(tx).exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar_one()
        assert shown == f"{IDLE_IN_TRANSACTION_MS // 1000}s"
    finally:
        store.dispose()


LOCK_A_ROW = "SELECT version_num FROM alembic_version FOR UPDATE"  # a row every schema has


def test_a_paused_transactions_locks_are_released_after_the_bound(database_url: str) -> None:
    _pg_only(database_url)
    url = make_url(database_url)
    options = f"{url.query.get('options', '')} -c idle_in_transaction_session_timeout=500".strip()
    short = url.update_query_dict({"options": options}).render_as_string(hide_password=False)
    paused_store, other = Store(short), Store(database_url)
    locked, resume = threading.Event(), threading.Event()
    ended: list[BaseException] = []

    def paused() -> None:  # takes the row, then sends nothing: a process stopped mid-transaction
        try:
            with paused_store.write() as tx:
                connection(tx).exec_driver_sql(LOCK_A_ROW).all()
                locked.set()
                resume.wait(60)
        except Exception as exc:  # its session was ended: the commit fails, nothing of it kept
            ended.append(exc)

    holder = threading.Thread(target=paused)
    holder.start()
    try:
        assert locked.wait(30)
        with other.write() as tx:  # waits for the row until the server ends the paused session
            assert connection(tx).exec_driver_sql(LOCK_A_ROW).all()
    finally:
        resume.set()
        holder.join(30)
        for store in (paused_store, other):
            store.dispose()
    assert ended, "the paused transaction committed after its session should have been ended"
