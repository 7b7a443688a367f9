"""A long transaction never holds the cluster up behind a lock request (PostgreSQL). The seal
batch takes the seal writers' lock
exclusively for an instant to fix its horizon; PostgreSQL queues every later writer behind that
request, so a review's completion held open for 30 s (a slow effect, a paused worker) stopped
every completion and heartbeat of the cluster until it ended. The batch now waits at most
``HORIZON_WAIT_MS`` and is put off (``SealWritersBusy``); the seals are chained later. A
gate-closing write (a revocation) asks for the admission gates the same way, a try at a time."""

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


def test_a_gate_closing_write_waits_without_holding_the_claims_up(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a revocation (safe mode, a suspension): it takes the admission gates
    exclusively, which claims hold shared; a worker's transaction holding them for long (a slow
    completion effect) made every claim of the cluster queue behind the waiting revocation."""
    from jobgate.service import approvals
    from jobgate.store.errors import GatesBusy
    from jobgate.store.sql import claims

    job, other = define(engine), define(engine)
    revoked: list[object] = []
    with engine.store.write() as slow_worker:  # a cycle holding the gates shared, its effect still running
        connection(slow_worker).execute(text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": claims._GATES_LOCK})
        revoker = threading.Thread(
            target=lambda: revoked.append(approvals.revoke(engine, "default", other, actor="admin")), daemon=True
        )
        revoker.start()
        runs = [engine.submit(SubmitRequest(job, request_id=f"g{i}")).run.job_run_id for i in range(10)]
        with running_worker(engine):
            wait_all(engine, runs, RunStatus.COMPLETED, timeout=30)  # claims went on meanwhile
        assert revoker.is_alive() and not revoked  # the revocation still waits for the slow transaction
        monkeypatch.setattr(claims, "GATES_PATIENCE_S", 0.3)
        with pytest.raises(GatesBusy):  # one that runs out of patience is refused, nothing stored
            approvals.revoke(engine, "default", job, actor="admin")
    revoker.join(30)
    assert revoked  # the slow transaction ended: the revocation went through
    with engine.store.read() as tx:
        assert all(a.active for a in tx.approvals_list("default", job))
        assert not any(a.active for a in tx.approvals_list("default", other))


def test_an_automatic_safe_mode_switch_waits_for_the_gates_however_long(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a regression review: a run's safe_mode_on_failure switch, refused after the
    gates' patience while a worker held them, was lost (logged, never tried again)."""
    from jobgate.service import safemode
    from jobgate.store.sql import claims

    monkeypatch.setattr(claims, "GATES_PATIENCE_S", 0.2)
    switched: list[object] = []
    with engine.store.write() as slow_worker:
        connection(slow_worker).execute(text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": claims._GATES_LOCK})
        automatic = threading.Thread(
            target=lambda: switched.append(
                safemode.activate(engine, "default", actor="worker-x", reason="run failed", patient=True)
            ),
            daemon=True,
        )
        automatic.start()
        automatic.join(1.0)  # five times the patience a person's switch gets
        assert automatic.is_alive() and not switched
    automatic.join(30)
    assert switched
    with engine.store.read() as tx:
        current = tx.safe_mode_current("default")
    assert current is not None and current.active


def test_anchoring_goes_on_while_a_seal_writer_is_open(engine: Engine) -> None:
    """Found by a regression review: the anchoring job's attempt failed (SealWritersBusy)
    whenever a transaction writing seals stayed open; it anchors what is chained instead."""
    from jobgate.evidence import anchors

    job = define(engine)
    run = engine.submit(SubmitRequest(job, request_id="a1")).run.job_run_id
    with running_worker(engine):
        wait_all(engine, [run], RunStatus.COMPLETED, timeout=30)
    later = engine.clock.now() + timedelta(hours=2)  # past the anchoring window
    with engine.store.write() as open_writer:
        connection(open_writer).execute(text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": SEAL_WRITERS})
        with engine.store.write() as tx:
            made = anchors.anchor_configured(tx, engine.config, "default", later)
    assert made  # the window's entries anchored; the run's seal waits for a later batch and window
