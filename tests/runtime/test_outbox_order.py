"""Outbox delivery: events of transactions that commit out of id order are all delivered, each
once; a rolled-back event leaves no gap; a partial delivery resumes where it stopped."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from jobgate.core.events import Event, EventType
from jobgate.runtime.outbox import RecordingSink, publish_once
from jobgate.service.engine import Engine
from jobgate.testing import connection


def _event(name: str) -> Event:
    return (EventType.JOB_STARTED, {"event_type": "job_started", "name": name})


def _names(sink: RecordingSink) -> list[str]:
    return [str(e.payload["name"]) for e in sink.events]


def test_an_event_committed_after_a_later_one_is_delivered_not_skipped(engine: Engine) -> None:
    """Transaction A writes an event (the lower id) and stays open; B writes one and commits.
    B's is delivered; A's once A commits. A cursor over ids alone would pass A's event while it
    was invisible and never come back for it."""
    if engine.store.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: ids become visible in order")
    now = datetime.now(UTC)
    a_wrote, b_done = threading.Event(), threading.Event()

    def writer_a() -> None:
        with engine.store.write() as tx:
            tx.outbox_append([("run-a", "default", _event("a"))], now)
            a_wrote.set()
            assert b_done.wait(30)

    thread = threading.Thread(target=writer_a)
    thread.start()
    assert a_wrote.wait(30)
    with engine.store.write() as tx:
        tx.outbox_append([("run-b", "default", _event("b"))], now)
    sink = RecordingSink()
    assert publish_once(engine.store, [sink], engine.clock) == 1
    b_done.set()
    thread.join(30)
    assert publish_once(engine.store, [sink], engine.clock) == 1
    assert _names(sink) == ["b", "a"]
    assert publish_once(engine.store, [sink], engine.clock) == 0
    with engine.store.read() as tx:
        assert tx.outbox_backlog() == 0


def test_a_rolled_back_event_leaves_no_gap_that_stops_delivery(engine: Engine) -> None:
    if engine.store.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: ids become visible in order")
    now = datetime.now(UTC)
    with pytest.raises(RuntimeError), engine.store.write() as tx:
        tx.outbox_append([("run-x", "default", _event("rolled back"))], now)
        raise RuntimeError("abandon the transaction")
    with engine.store.write() as tx:
        tx.outbox_append([("run-y", "default", _event("kept"))], now)
    sink = RecordingSink()
    assert publish_once(engine.store, [sink], engine.clock) == 1
    assert _names(sink) == ["kept"]


def test_a_publisher_that_delivers_part_of_a_batch_resumes_after_that_part(engine: Engine) -> None:
    now = datetime.now(UTC)
    with engine.store.write() as tx:
        tx.outbox_append([(f"run-{i}", "default", _event(str(i))) for i in range(5)], now)
    sink = RecordingSink()
    assert publish_once(engine.store, [sink], engine.clock, batch=2) == 2
    assert publish_once(engine.store, [sink], engine.clock, batch=2) == 2
    with engine.store.read() as tx:
        assert tx.outbox_backlog() == 1
    assert publish_once(engine.store, [sink], engine.clock, batch=2) == 1
    assert _names(sink) == ["0", "1", "2", "3", "4"]
    with engine.store.read() as tx:
        assert tx.outbox_backlog() == 0
        assert connection(tx).execute(text("SELECT count(*) FROM outbox")).scalar_one() == 5  # kept, not deleted
