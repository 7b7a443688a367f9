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


def test_a_replay_job_samples_reproducibly_and_raises_a_critical_event_on_mismatch(engine: Engine) -> None:
    from jobgate.replay import sample
    from jobgate.service import audit
    from jobgate.store.sql.governance import AuditFilter

    assert sample([f"r{i}" for i in range(50)], 5, "2026-11-30") == sample(
        [f"r{i}" for i in range(50)], 5, "2026-11-30"
    )
    assert sample([f"r{i}" for i in range(50)], 5, "a") != sample([f"r{i}" for i in range(50)], 5, "b")
    ok = define(engine, handler="engine_handlers:succeed")
    job = define(
        engine,
        job_class="REPLAY_JOB",
        handler="jobgate.replay:replay_job",
        params=[{"name": "sample_size", "default": "10"}, {"name": "seed", "default": ""}],
    )
    runs = [submit(engine, ok) for _ in range(3)]
    with running_worker(engine):
        for r in runs:
            wait_status(engine, r, RunStatus.COMPLETED)
        with engine.store.write() as tx:  # one run's record is altered after the fact
            tx.conn.execute(
                text(
                    "UPDATE run_transitions SET reason = 'retry_scheduled' "
                    "WHERE job_run_id = :r AND to_status = 'COMPLETED'"
                ),
                {"r": runs[1]},
            )
        replayer = submit(engine, job, seed="s1")
        done = wait_status(engine, replayer, RunStatus.COMPLETED, timeout=20)
    assert done.result is not None and done.result["replayed"] == 3 and done.result["matched"] == 2
    assert done.result["seed"] == "s1"
    (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="replay.mismatch"))
    assert entry.event.target_id == runs[1] and entry.event.reason == "critical"
    with engine.store.read() as tx:
        kinds = tx.conn.execute(text("SELECT event_type FROM outbox WHERE job_run_id = :r"), {"r": runs[1]}).scalars()
        assert "replay_mismatch" in list(kinds)


def test_parameters_edited_after_the_fact_do_not_replay(engine: Engine) -> None:
    ok = define(engine, handler="engine_handlers:succeed", params=OK_ON)
    run_id = submit(engine, ok, ok_on="1")
    with engine.store.write() as tx:
        tx.conn.execute(
            text("UPDATE job_runs SET params = :p WHERE job_run_id = :r"), {"p": '{"ok_on":"9"}', "r": run_id}
        )
    report = replay(engine, run_id)
    assert not report.match and str(report.first_difference).startswith(("params", "transitions[0].params_digest"))


def test_a_replay_takes_the_policies_the_run_recorded_not_todays_file(engine: Engine, tmp_path: object) -> None:
    # Found 4 (issue 20): a retry and a timeout policy removed from jobgate.yaml since the run
    # made an untouched run replay MISMATCH, claiming a tampering that never happened.
    from dataclasses import replace

    flaky = define(
        engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON,
        timeout_policy="test_exec_timeout_v1",
    )  # fmt: skip
    run_id = submit(engine, flaky, ok_on="2")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    original = engine.config
    retry = {k: v for k, v in original.retry_policies.items() if k != "test_fixed_v1"}
    timeouts = {k: v for k, v in original.timeout_policies.items() if k != "test_exec_timeout_v1"}
    engine.config = replace(original, retry_policies=retry, timeout_policies=timeouts)
    try:
        report = replay(engine, run_id)
        assert report.match, report.first_difference
        simulated = replay(engine, run_id, simulation=True)  # today's file: the policy is gone, and it says so
        assert not simulated.match and simulated.simulation
    finally:
        engine.config = original
