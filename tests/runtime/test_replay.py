"""Deterministic replay: untouched runs — completed, retried, dead-lettered, escalated,
cancelled, requeued — replay to the same hash; a stored transition or snapshot altered after
the fact does not, and the report names the difference."""

from __future__ import annotations

import json

from runtime_support import running_worker, wait_status
from sqlalchemy import text

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.replay import replay
from jobgate.service import control
from jobgate.service.engine import Engine, SubmitRequest

OK_ON = [{"name": "ok_on", "pattern": "[0-9]+"}]


def submit(engine: Engine, job: str, **params: str) -> str:
    return engine.submit(SubmitRequest(job, params=params, requested_by="ada", reason="r"), actor="ada").run.job_run_id


def test_untouched_runs_of_every_ending_replay_to_the_same_hash(engine: Engine) -> None:
    ok = define(engine, handler="engine_handlers:succeed")
    flaky = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    dead = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_fixed_v1")
    review = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_review_v1")
    runs = {
        "completed": submit(engine, ok),
        "retried": submit(engine, flaky, ok_on="2"),
        "dead": submit(engine, dead),
        "escalated": submit(engine, review),
    }
    cancelled = submit(engine, ok)
    control.cancel_run(engine, cancelled, actor="ops", reason="not needed")
    with running_worker(engine):
        wait_status(engine, runs["completed"], RunStatus.COMPLETED)
        wait_status(engine, runs["retried"], RunStatus.COMPLETED)
        wait_status(engine, runs["dead"], RunStatus.DEAD_LETTERED)
        wait_status(engine, runs["escalated"], RunStatus.ESCALATED)
        control.requeue_run(engine, runs["dead"], actor="ops")
        wait_status(engine, runs["dead"], RunStatus.DEAD_LETTERED)
    for name, run_id in [*runs.items(), ("cancelled", cancelled)]:
        report = replay(engine, run_id)
        assert report.match, (name, report.first_difference)


def test_an_altered_transition_or_snapshot_is_named(engine: Engine) -> None:
    flaky = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    run_id = submit(engine, flaky, ok_on="2")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    with engine.store.write() as tx:  # someone makes the first attempt look like a success
        tx.conn.execute(
            text(
                "UPDATE run_transitions SET to_status = 'FAILED', reason = 'failed_non_retryable' "
                "WHERE job_run_id = :r AND reason = 'retry_scheduled'"
            ),
            {"r": run_id},
        )
    report = replay(engine, run_id)
    assert not report.match and report.first_difference is not None
    assert report.first_difference.startswith("transitions[4]"), report.first_difference
    other = submit(engine, flaky, ok_on="1")
    with engine.store.read() as tx:
        run = tx.run_get(other)
        assert run is not None
        snapshot = tx.snapshot_get(run.config_snapshot_id)
    assert snapshot is not None
    altered = {**snapshot.content, "values": {"tampered": True}}
    with engine.store.write() as tx:
        tx.conn.execute(
            text("UPDATE config_snapshots SET content = :c WHERE config_snapshot_id = :s"),
            {"c": json.dumps(altered), "s": run.config_snapshot_id},
        )
    report = replay(engine, other)
    assert not report.match and str(report.first_difference).startswith("config_snapshot")
