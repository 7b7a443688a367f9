"""The cluster's rescuer: one leader sweeps; runs older than the maximum run age are closed."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from runtime_support import dead_letters, get_run, running_worker, transitions, wait_status, wait_until

from helpers import define, make_config
from jobgate.core.errors import ConfigurationError
from jobgate.core.models import DeadLetterReason
from jobgate.core.states import RunStatus
from jobgate.runtime import rescuer
from jobgate.runtime.rescuer import RESCUER_LOCK
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

DAY = timedelta(hours=24)
SECONDS = [{"name": "seconds", "pattern": "[0-9.]+"}]


def test_waiting_runs_older_than_the_maximum_age_are_closed_and_fresh_ones_stay(engine: Engine) -> None:
    job = define(engine)
    old = engine.submit(SubmitRequest(job, request_id="old")).run
    fresh = engine.submit(SubmitRequest(job, request_id="fresh")).run
    assert old.created_at < fresh.created_at
    now = fresh.created_at + DAY  # old is past the age; fresh is exactly at it, not past
    assert rescuer.close_overdue(engine, now, DAY) == 1
    run = get_run(engine, old.job_run_id)
    assert run.status is RunStatus.DEAD_LETTERED and run.error_code == "run_maximum_age_exceeded"
    assert transitions(engine, old.job_run_id)[-1] == ("SCHEDULED", "DEAD_LETTERED", "maximum_age_exceeded", 0)
    (letter,) = dead_letters(engine, old.job_run_id)
    assert letter.reason is DeadLetterReason.RUN_MAXIMUM_AGE_EXCEEDED and letter.requires_manual_review
    assert get_run(engine, fresh.job_run_id) == fresh
    assert rescuer.close_overdue(engine, now, DAY) == 0  # idempotent


def test_a_running_run_past_the_maximum_age_is_closed_and_its_worker_cannot_complete_it(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    run = engine.submit(SubmitRequest(job, params={"seconds": "30"})).run
    with running_worker(
        engine,
        lease=timedelta(seconds=1),
        maximum_run_age=timedelta(seconds=2),
        maximum_age_interval=timedelta(milliseconds=100),
    ) as worker:
        wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED, timeout=15)
        wait_until(lambda: not worker._running, timeout=15, what="the worker let go of the closed run")
    done = get_run(engine, run.job_run_id)
    assert done.status is RunStatus.DEAD_LETTERED and done.error_code == "run_maximum_age_exceeded"
    assert [t[1] for t in transitions(engine, run.job_run_id)][-1] == "DEAD_LETTERED"
    assert done.result is None  # nothing overwrote the closing


def test_one_worker_leads_the_rescuer_and_hands_over_when_it_stops(engine: Engine) -> None:
    with running_worker(engine) as first:
        wait_until(lambda: _holder(engine) == first.worker_id, what="the first worker leads")
        with running_worker(engine) as second:
            assert second.idle.wait(10), "the second worker never idled"
            assert _holder(engine) == first.worker_id  # a standby does not take it
        assert _holder(engine) == first.worker_id
    with running_worker(engine) as third:
        wait_until(lambda: _holder(engine) == third.worker_id, timeout=5, what="released at stop, taken at once")


def _holder(engine: Engine) -> str | None:
    with engine.store.read() as tx:
        lock = tx.lock_get(RESCUER_LOCK)
    return None if lock is None or lock.expires_at <= engine.clock.now() else lock.owner


@pytest.mark.parametrize("age", [5, 31 * 86400])
def test_a_maximum_run_age_outside_the_lease_and_30_days_is_refused(tmp_path: Path, age: int) -> None:
    with pytest.raises(ConfigurationError, match="maximum_run_age_seconds"):
        make_config(tmp_path, worker={"lease_seconds": 30, "maximum_run_age_seconds": age})
