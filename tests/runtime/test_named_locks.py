"""Named locks for handlers: one holder at a time, busy means retry later, recovered at expiry."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from runtime_support import running_worker, wait_status

from helpers import define
from jobgate.core.errors import ValidationError
from jobgate.core.states import RunStatus
from jobgate.runtime.named_locks import LockBusy, NamedLocks, lock_name
from jobgate.runtime.worker import Worker, WorkerSettings
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

PARAMS = [
    {"name": "key", "pattern": "[A-Za-z0-9%]{1,20}"},
    {"name": "kind", "pattern": "[a-z-]{1,20}"},
    {"name": "seconds", "pattern": "[0-9.]+"},
]


def test_two_runs_taking_one_lock_never_overlap(engine: Engine, marker: Path) -> None:
    job = define(engine, handler="engine_handlers:locked", params=PARAMS, retry_policy="test_patient_v1")
    ids = [engine.submit(SubmitRequest(job, params={"key": "W1"}, request_id=f"r{i}")).run.job_run_id for i in range(2)]
    with running_worker(engine):
        done = [wait_status(engine, i, RunStatus.COMPLETED, timeout=20) for i in ids]
    lines = marker.read_text().split()
    events = [w for w in lines if w in ("start", "end")]
    assert events == ["start", "end", "start", "end"]  # the second waited for the first to finish
    assert sorted(r.result["token"] for r in done if r.result) == [1, 2]  # a new holder, a larger token
    busy = [r for r in done if r.attempt > 1]
    assert busy, "one of them found the lock busy and was retried"


def test_a_bad_lock_kind_is_a_non_retryable_failure(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:locked", params=PARAMS, retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job, params={"kind": "scheduler-leader"})).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED)
    assert done.error_code == "BAD_LOCK_NAME" and done.attempt == 1


def test_a_dead_holders_lock_is_taken_once_it_expires(engine: Engine) -> None:
    now = [engine.clock.now()]
    locks = NamedLocks(engine.store, lambda: now[0])
    name = lock_name("quarantine", "Q-7")
    first = locks.acquire(name, "worker-a/run-1", timedelta(seconds=5))
    with pytest.raises(LockBusy) as busy:
        locks.acquire(name, "worker-b/run-2", timedelta(seconds=5))
    assert "worker-a/run-1" in str(busy.value) and busy.value.error_code == "LOCK_BUSY"
    now[0] += timedelta(seconds=6)  # worker-a died: nobody renewed
    second = locks.acquire(name, "worker-b/run-2", timedelta(seconds=5))
    assert second.token == first.token + 1
    assert not first.renew()  # the old holder learns it lost the lock
    assert second.renew()
    locks.release(second)
    assert locks.acquire(name, "worker-c/run-3", timedelta(seconds=5)).token == second.token + 1


@pytest.mark.parametrize(
    ("kind", "key", "field"), [("outbox", "x", "kind"), ("batch", "", "key"), ("batch", "a b", "key")]
)
def test_lock_names_are_checked(kind: str, key: str, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        lock_name(kind, key)
    assert err.value.field == field


def test_a_second_attempt_of_a_run_on_the_same_worker_is_another_holder(engine: Engine) -> None:
    """Found by a review of the cluster: a worker that lost a run's lease and claimed it again
    while the first attempt's thread still ran gave the second attempt the lock the first held
    (the same token, the owner being the run), and the first attempt's release then freed it
    under the second. A holder is an attempt: the second finds it busy until the first lets go,
    and the first's release leaves a later holder's lock alone."""
    worker = Worker(engine, WorkerSettings(concurrency=1))
    try:
        first = worker._lock("TGJOBRUN-1", 1, "job", "critical-A", timedelta(seconds=120))
        with pytest.raises(LockBusy):
            worker._lock("TGJOBRUN-1", 2, "job", "critical-A", timedelta(seconds=120))
        worker._named_locks.release(first)
        second = worker._lock("TGJOBRUN-1", 2, "job", "critical-A", timedelta(seconds=120))
        assert second.token == first.token + 1
        worker._named_locks.release(first)  # a stale release: the second still holds it
        with pytest.raises(LockBusy):
            worker._lock("TGJOBRUN-2", 1, "job", "critical-A", timedelta(seconds=120))
    finally:
        worker._watcher.close()
        worker.dependencies.stop()
        worker._rescuer.close()


def test_a_lock_taken_again_inside_its_own_block_is_busy_and_a_late_renew_takes_nothing(engine: Engine) -> None:
    """Found by a regression review: a handler taking a lock it already held (nested) got the
    same token, and leaving the inner block freed the outer hold while it still ran; and a
    renew after the expiry took the unclaimed lock again under a new token while saying False,
    leaving it held by nobody's release."""
    now = [engine.clock.now()]
    worker = Worker(engine, WorkerSettings(concurrency=1))
    worker._named_locks = NamedLocks(engine.store, lambda: now[0])
    try:
        outer = worker._lock("TGJOBRUN-1", 1, "batch", "k1", timedelta(seconds=5))
        with pytest.raises(LockBusy):
            worker._lock("TGJOBRUN-1", 1, "batch", "k1", timedelta(seconds=5))
        assert outer.renew()  # still its holder
        now[0] += timedelta(seconds=6)  # expired, nobody took it
        assert not outer.renew()
        with engine.store.read() as tx:
            held = tx.lock_get("batch:k1")
        assert held is not None and held.token == outer.token and held.expires_at <= now[0]
        other = worker._lock("TGJOBRUN-2", 1, "batch", "k1", timedelta(seconds=5))
        assert other.token == outer.token + 1
    finally:
        worker._watcher.close()
        worker.dependencies.stop()
        worker._rescuer.close()
