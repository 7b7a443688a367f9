"""A seal batch never holds the cluster up (PostgreSQL). The batch takes the seal writers' lock
exclusively for an instant to fix its horizon; PostgreSQL queues every later writer behind that
request, so a review's completion held open for 30 s (a slow effect, a paused worker) stopped
every completion and heartbeat of the cluster until it ended. The batch now waits at most
``HORIZON_WAIT_MS`` and is put off (``SealWritersBusy``); the seals are chained later."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from runtime_support import running_worker, wait_all
from sqlalchemy import text

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.errors import SealWritersBusy
from jobgate.store.sql.seals import SEAL_WRITERS
from jobgate.testing import connection

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def test_an_open_seal_writer_puts_the_batch_off_and_holds_no_other_writer_up(engine: Engine) -> None:
    job = define(engine)
    stop = threading.Event()
    outcomes: list[str] = []

    def batches() -> None:  # the leader's batch, tried again and again while the writer stays open
        while not stop.is_set():
            try:
                audit.seal_pending(engine, engine.clock.now())
                outcomes.append("chained")
            except SealWritersBusy:
                outcomes.append("put off")
            stop.wait(0.05)

    with engine.store.write() as open_writer:  # a completion that does not end: it holds the lock shared
        connection(open_writer).execute(text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": SEAL_WRITERS})
        leader = threading.Thread(target=batches, daemon=True)
        leader.start()
        try:
            runs = [engine.submit(SubmitRequest(job, request_id=f"r{i}")).run.job_run_id for i in range(20)]
            with running_worker(engine):
                wait_all(engine, runs, RunStatus.COMPLETED, timeout=30)  # settled: each writes its seal
            started = time.monotonic()
            with pytest.raises(SealWritersBusy) as busy:
                audit.seal_pending(engine, engine.clock.now(), patience=timedelta(seconds=0.5))
            assert 0.4 < time.monotonic() - started < 10 and "open longer than" in busy.value.message
        finally:
            stop.set()
            leader.join(30)
    assert not leader.is_alive() and outcomes and set(outcomes) == {"put off"}
    chained = audit.seal_pending(engine, engine.clock.now())  # the writer ended: the seals are chained now
    assert sum(b.count for b in chained) >= 20
    assert [f.message() for r in audit.verify_records(engine, ["default"]) for f in r.findings] == []
