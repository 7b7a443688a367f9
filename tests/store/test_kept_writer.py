"""SQLite: a process's write transactions take turns on one kept connection (no pool checkout,
reset and check-in per write). A transaction that fails leaves nothing behind and the next one
writes as before; a connection left unusable is replaced; disposing the store closes it."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from jobgate.store.errors import DatabaseFileReplaced
from jobgate.store.sqlstore import Store
from jobgate.testing import connection


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path}/kept.db")
    with opened.write() as tx:
        connection(tx).exec_driver_sql("CREATE TABLE scratch (n INTEGER NOT NULL)")
    yield opened
    opened.dispose()


def _driver_connection(tx: Any) -> Any:
    return connection(tx).connection.dbapi_connection


def _count(store: Store) -> int:
    with store.read() as tx:
        return int(connection(tx).exec_driver_sql("SELECT count(*) FROM scratch").scalar_one())


def test_write_turns_share_one_connection(store: Store) -> None:
    checkouts: list[object] = []
    event.listen(store._writer, "checkout", lambda *_: checkouts.append(1))
    seen = set()
    for n in range(5):
        with store.write() as tx:
            connection(tx).exec_driver_sql(f"INSERT INTO scratch VALUES ({n})")
            seen.add(id(_driver_connection(tx)))
    assert len(seen) == 1 and checkouts == []  # kept since the fixture's write: never checked out again
    assert _count(store) == 5


def test_a_failed_write_keeps_nothing_and_the_next_write_commits(store: Store) -> None:
    with pytest.raises(RuntimeError), store.write() as tx:
        connection(tx).exec_driver_sql("INSERT INTO scratch VALUES (1)")
        first = _driver_connection(tx)
        raise RuntimeError("refused")
    assert _count(store) == 0
    with store.write() as tx:
        connection(tx).exec_driver_sql("INSERT INTO scratch VALUES (2)")
        assert _driver_connection(tx) is first  # still good: kept
    assert _count(store) == 1


def test_a_connection_left_unusable_is_replaced(store: Store) -> None:
    with pytest.raises(RuntimeError), store.write() as tx:
        broken = _driver_connection(tx)
        connection(tx).exec_driver_sql("INSERT INTO scratch VALUES (1)")
        connection(tx).invalidate()  # what a lost or failed driver connection comes to
        raise RuntimeError("lost")
    with store.write() as tx:
        assert _driver_connection(tx) is not broken
        connection(tx).exec_driver_sql("INSERT INTO scratch VALUES (2)")
    assert _count(store) == 1


def test_concurrent_writers_lose_no_write(store: Store) -> None:
    threads, writes = 8, 40
    with store.write() as tx:
        connection(tx).exec_driver_sql("CREATE TABLE counter (n INTEGER NOT NULL)")
        connection(tx).exec_driver_sql("INSERT INTO counter VALUES (0)")

    def add() -> None:
        for _ in range(writes):
            with store.write() as tx:
                n = connection(tx).exec_driver_sql("SELECT n FROM counter").scalar_one()
                connection(tx).exec_driver_sql(f"UPDATE counter SET n = {n + 1}")

    workers = [threading.Thread(target=add) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with store.read() as tx:
        assert connection(tx).exec_driver_sql("SELECT n FROM counter").scalar_one() == threads * writes


def test_dispose_closes_the_kept_connection(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/kept.db")
    with store.write() as tx:
        kept = _driver_connection(tx)
    store.dispose()
    with pytest.raises(sqlite3.ProgrammingError):
        kept.execute("SELECT 1")


def test_a_write_is_not_committed_to_a_file_removed_meanwhile(store: Store, tmp_path: Path) -> None:
    """A review: a write that waited for its turn while the file was removed was acknowledged
    (to the deleted file). The file is looked at again before the commit: rolled back, refused."""
    path = tmp_path / "kept.db"
    with pytest.raises(DatabaseFileReplaced), store.write() as tx:
        connection(tx).exec_driver_sql("INSERT INTO scratch VALUES (1)")
        path.rename(tmp_path / "aside.db")  # removed while the write is under way
    (tmp_path / "aside.db").rename(path)
    assert _count(store) == 0
    with store.write() as tx:  # the same file back: writes go on
        connection(tx).exec_driver_sql("INSERT INTO scratch VALUES (2)")
    assert _count(store) == 1
