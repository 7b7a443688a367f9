"""Deterministic replay: untouched runs — completed, retried, dead-lettered, escalated,
cancelled, requeued, retries of a run — replay to the same hash; a stored transition or snapshot altered after
the fact does not, and the report names the difference."""

from __future__ import annotations

import json

from runtime_support import running_worker, wait_status
from sqlalchemy import text

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.service import control, retries
from jobgate.service.engine import Engine
from jobgate.service.replay import replay
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection

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
        # A retry's id derives from its source run (seed 001), not from its key and time.
        for source in ("completed", "dead"):
            made, _ = retries.retry(engine, runs[source], actor="ops", tenant_id=None)
            wait_status(
                engine, made.job_run_id, RunStatus.COMPLETED if source == "completed" else RunStatus.DEAD_LETTERED
            )
            runs[f"retry of {source}"] = made.job_run_id
    for name, run_id in [*runs.items(), ("cancelled", cancelled)]:
        report = replay(engine, run_id)
        assert report.match, (name, report.first_difference)


def test_an_altered_transition_or_snapshot_is_named(engine: Engine) -> None:
    flaky = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    run_id = submit(engine, flaky, ok_on="2")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    with engine.store.write() as tx:  # someone makes the first attempt look like a success
        connection(tx).execute(
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
        connection(tx).execute(
            text("UPDATE config_snapshots SET content = :c WHERE config_snapshot_id = :s"),
            {"c": json.dumps(altered), "s": run.config_snapshot_id},
        )
    report = replay(engine, other)
    assert not report.match and str(report.first_difference).startswith("config_snapshot")


def test_a_replay_job_samples_reproducibly_and_raises_a_critical_event_on_mismatch(engine: Engine) -> None:
    from jobgate.service import audit
    from jobgate.service.replay import sample
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
            connection(tx).execute(
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
        kinds = (
            connection(tx)
            .execute(text("SELECT event_type FROM outbox WHERE job_run_id = :r"), {"r": runs[1]})
            .scalars()
        )
        assert "replay_mismatch" in list(kinds)


def test_parameters_edited_after_the_fact_do_not_replay(engine: Engine) -> None:
    ok = define(engine, handler="engine_handlers:succeed", params=OK_ON)
    run_id = submit(engine, ok, ok_on="1")
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE job_runs SET params = :p WHERE job_run_id = :r"), {"p": '{"ok_on":"9"}', "r": run_id}
        )
    report = replay(engine, run_id)
    assert not report.match and str(report.first_difference).startswith(("params", "transitions[0].params_digest"))


def test_a_replay_reads_the_record_alone_not_todays_file(engine: Engine) -> None:
    # Found 4 (issue 20): a retry and a timeout policy removed from jobgate.yaml since the run
    # made an untouched run replay MISMATCH, claiming a tampering that never happened. The rule:
    # an audit replay reads nothing of today's configuration, so the run replays the same against
    # a configuration that has none of what the definition named (policies, profile, handlers'
    # registries, signing now required with no trusted root).
    from dataclasses import replace

    flaky = define(
        engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON,
        timeout_policy="test_exec_timeout_v1",
    )  # fmt: skip
    run_id = submit(engine, flaky, ok_on="2")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    original = engine.config
    bare = replace(
        original, runners={}, targets={}, profiles={}, retry_policies={}, timeout_policies={}, sla_policies={},
        signing=replace(original.signing, require_signed_definitions=True), dependencies={},
    )  # fmt: skip
    assert "test_fixed_v1" not in bare.retry_policies and "test_exec_timeout_v1" not in bare.timeout_policies
    engine.config = bare
    try:
        report = replay(engine, run_id)
        assert report.match, report.first_difference
        assert report.notes == () and report.binding is not None
        assert report.binding["target"] == {"kind": "python", "handler": "engine_handlers:fail_until"}
        assert report.binding["timeout_policy"]["timeout_policy_id"] == "test_exec_timeout_v1"
        with engine.store.read() as tx:
            run = tx.run_get(run_id)
            assert run is not None
            key = (run.tenant_id, run.job_definition_id, run.definition_digest)
            assert report.binding["code_digest"] == tx.approvals_active([key])[key] is not None  # its approval's
        simulated = replay(engine, run_id, simulation=True)  # today's file refuses it, and it says so
        assert not simulated.match and simulated.simulation
    finally:
        engine.config = original


def test_the_binding_is_sealed_and_a_run_without_one_still_replays(engine: Engine) -> None:
    # Runs created before bindings were recorded replay from their content and columns; a binding
    # edited or stripped afterwards is a change to a sealed record, which the seal names.
    from jobgate.service import audit

    ok = define(engine, handler="engine_handlers:succeed")
    run_id = submit(engine, ok)
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))
    with engine.store.write() as tx:
        row = (
            connection(tx)
            .execute(
                text("SELECT id, detail FROM run_transitions WHERE job_run_id = :r AND reason = 'created'"),
                {"r": run_id},
            )
            .one()
        )
        detail = json.loads(row.detail)
        assert detail["bound"]["target"] == {"kind": "python", "handler": "engine_handlers:succeed"}
        del detail["bound"]
        connection(tx).execute(
            text("UPDATE run_transitions SET detail = :d WHERE id = :i"), {"d": json.dumps(detail), "i": row.id}
        )
    report = replay(engine, run_id)
    assert report.match and report.binding is None, report.first_difference
    found = [f for r in audit.verify_records(engine, ["default"]) for f in r.findings]
    assert found and found[0].record_id == run_id, found
    assert found[0].part == "history" and "transitions was changed" in found[0].message()


def test_a_simulation_that_differs_says_it_is_one_and_names_both_values(engine: Engine) -> None:
    """Found by a review: ``replay --simulate`` against a policy cut to one attempt printed
    "MISMATCH at transitions[5]: RETRY_WAIT -> DISPATCHED is not a legal move" with no
    simulation note (a match had one) and without what the replayed run was at that point."""
    from dataclasses import replace

    flaky = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    run_id = submit(engine, flaky, ok_on="2")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    original = engine.config
    once = replace(original.retry_policies["test_fixed_v1"], max_attempts=1)
    engine.config = replace(original, retry_policies={**original.retry_policies, "test_fixed_v1": once})
    try:
        simulated = replay(engine, run_id, simulation=True)
    finally:
        engine.config = original
    assert not simulated.match and simulated.simulation
    assert any(n.startswith("simulation:") for n in simulated.notes)
    where = str(simulated.first_difference)
    assert "recorded " in where and "replayed, the run is " in where, where
