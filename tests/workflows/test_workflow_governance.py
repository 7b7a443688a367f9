"""What the review of the workflow engine asked for: governance holds through steps, a changed
configuration never wedges a running workflow, and races and repeats stay exactly-once."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from runtime_support import wait_until
from sqlalchemy import text
from support import coordinating, jobs, lines, start, view, wait_workflow, workflow

from helpers import count, define, make_config
from jobgate.core.errors import ConflictError, GovernanceRefusal
from jobgate.core.models import Scope
from jobgate.core.states import RunStatus
from jobgate.runtime.coordinator import WorkflowCoordinator
from jobgate.service import approvals, control, safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.service.workflow_replay import replay_workflow
from jobgate.service.workflows import (
    StartWorkflow,
    advance,
    cancel_workflow,
    start_workflow,
)
from jobgate.store.sqlstore import Store, StoreTx
from jobgate.testing import FakeClock, connection


def ran(marker: Path, what: str = "ran") -> list[str]:
    return [parts[1] for parts in lines(marker) if parts[0] == what]


def test_a_removed_retry_policy_fails_the_next_step_instead_of_wedging_the_workflow(
    engine: Engine, database_url: str, tmp_path: Path, marker: Path
) -> None:
    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": j["record"], "params": {"name": "b"}, "retry_policy": "test_patient_v1"},
        ],
    )
    wid = start(engine, wf)
    # The configuration loses the policy step b names (an operator's edit), then the workflow runs.
    doc_config = make_config(tmp_path / "edited")
    edited = Engine(
        engine.store,
        doc_config.__class__(
            **{
                **doc_config.__dict__,
                "retry_policies": {k: v for k, v in engine.config.retry_policies.items() if k != "test_patient_v1"},
            }
        ),
    )
    with coordinating(edited):
        done = wait_workflow(edited, wid)
    assert done.record.status is RunStatus.FAILED
    assert [s.status for s in done.steps] == ["COMPLETED", "FAILED"]
    assert ran(marker) == ["a"]
    assert replay_workflow(edited, wid).match  # the honest record still replays


def test_cancel_works_whatever_the_configuration_became(engine: Engine, tmp_path: Path, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "retry_policy": "test_patient_v1"}])
    wid = start(engine, wf)
    doc_config = make_config(tmp_path / "edited")
    edited = Engine(engine.store, doc_config.__class__(**{**doc_config.__dict__, "retry_policies": {}}))
    assert cancel_workflow(edited, wid, actor="op").status is RunStatus.CANCELLED


def test_a_dead_lettered_step_run_cannot_be_requeued_after_the_workflow_failed(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    dlq = define(engine, handler="workflow_handlers:fail", params=[{"name": "name"}], retry_policy="test_fixed_v1")
    wf = workflow(engine, [{"id": "a", "job": dlq, "params": {"name": "a"}}])
    wid = start(engine, wf)
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    run_id = str(done.steps[0].job_run_id)
    with engine.store.read() as tx:
        run = tx.run_get(run_id)
    assert run is not None and run.status is RunStatus.DEAD_LETTERED, run
    with pytest.raises(ConflictError) as info:
        control.requeue_run(engine, run_id, actor="op")
    assert info.value.field == "workflow_run_id"
    with engine.store.read() as tx:
        again = tx.run_get(run_id)
    assert again is not None and again.status is RunStatus.DEAD_LETTERED and j  # nothing changed


def test_no_step_run_is_retried_outside_its_workflow(engine: Engine, marker: Path) -> None:
    """A retry is a new run of no workflow: a step's effects (and their undoing) are its
    workflow's, so a step's run, completed or failed, is never retried; nothing is stored and
    nothing runs again."""
    from jobgate.service import retries

    j = jobs(engine)
    dlq = define(engine, handler="workflow_handlers:fail", params=[{"name": "name"}], retry_policy="test_fixed_v1")
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}, {"id": "b", "job": dlq}])
    wid = start(engine, wf)
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    assert [s.status for s in done.steps] == ["COMPLETED", "FAILED"]
    before = count(engine, "job_runs")
    for step in done.steps:
        with pytest.raises(ConflictError) as info:
            retries.retry(engine, str(step.job_run_id), actor="op", tenant_id="default")
        assert info.value.field == "workflow_run_id" and wid in info.value.message
    assert count(engine, "job_runs") == before and ran(marker) == ["a"]  # nothing stored, nothing ran again


def test_no_idempotency_key_a_caller_can_choose_claims_a_steps_run(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(
        engine, [{"id": "a", "job": j["record"], "params": {"name": "a", "value": "real"}, "outputs": ["value"]}]
    )
    wid = start(engine, wf)
    for key in (f"workflow:{wid}:a", f"{wid}:a", "a"):
        engine.submit(SubmitRequest(j["record"], params={"name": "forged", "value": "forged"}, client_key=key))
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    assert done.steps[0].outputs == {"value": "real"}


def test_cancel_is_refused_while_the_workflow_compensates(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {
                "id": "a",
                "job": j["record"],
                "params": {"name": "a"},
                "compensate": {"job": j["wait"], "params": {"name": "undo-a"}},
            },
            {"id": "b", "job": j["fail"], "params": {"name": "b"}},
        ],
        on_failure="compensate",
    )
    wid = start(engine, wf)
    with coordinating(engine):
        wait_until(lambda: ran(marker, "started") == ["undo-a"], what="the compensation to start")
        with pytest.raises(ConflictError, match="compensating"):
            cancel_workflow(engine, wid, actor="op")
        # Nor through the compensation's own run (found by a review: a stop of it ended the
        # compensation failed and the workflow escalated).
        (undo,) = [s.compensation_run_id for s in view(engine, wid).steps if s.compensation_run_id]
        assert undo is not None
        audited = count(engine, "audit_log")
        for act in (control.stop_run, control.cancel_run):
            with pytest.raises(ConflictError, match="compensation of step a") as refused:
                act(engine, undo, actor="op", reason="enough")
            assert refused.value.field == "job_run_id"
        assert count(engine, "audit_log") == audited  # nothing recorded
        Path(str(marker) + ".gate").touch()
        done = wait_workflow(engine, wid)
    assert done.record.status is RunStatus.FAILED
    assert done.completed_steps == []  # a was compensated: it no longer counts as completed
    assert [s.status for s in done.steps] == ["COMPENSATED", "FAILED"]


def test_a_cancel_moves_the_version_so_a_stale_decision_cannot_land(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wid = start(engine, workflow(engine, [{"id": "a", "job": j["record"]}]))
    before = view(engine, wid).record.version
    with engine.store.write() as tx:
        assert tx.workflow_request_cancel(wid)
    assert view(engine, wid).record.version == before + 1
    advance(engine, wid)
    assert view(engine, wid).record.status is RunStatus.CANCELLED and count(engine, "job_runs") == 0


def test_a_workflow_fired_as_a_job_runs_the_version_its_trigger_run_was_admitted_for(
    engine: Engine, marker: Path
) -> None:
    j = jobs(engine)
    steps = [{"id": "a", "job": j["record"], "params": {"name": "v1"}}]
    wf = workflow(engine, steps)
    trigger = engine.submit(SubmitRequest(wf, request_id="once")).run
    define(
        engine,
        approve=False,
        job_definition_id=wf,
        job_class="AUDIT_INTEGRITY_JOB",
        handler=None,
        workflow={"steps": [{"id": "a", "job": j["record"], "params": {"name": "v2"}}]},
    )
    with coordinating(engine):
        wait_until(lambda: count(engine, "workflow_runs", "status = 'COMPLETED'") == 1, what="the workflow")
    assert ran(marker) == ["v1"]
    with engine.store.read() as tx:
        run = tx.run_get(trigger.job_run_id)
    assert run is not None and run.result is not None
    assert view(engine, run.result["workflow_run_id"]).record.definition_version == 1


def test_steps_run_the_definition_versions_pinned_at_the_start(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}])
    wid = start(engine, wf)
    define(engine, job_definition_id=j["record"], handler="workflow_handlers:fail", params=[{"name": "name"}])
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    assert done.record.status is RunStatus.COMPLETED and ran(marker) == ["a"]  # v1 ran, not the edit
    pinned = done.record.trigger["step_definitions"][j["record"]]
    with engine.store.read() as tx:
        step_run = tx.run_get(str(done.steps[0].job_run_id))
    assert step_run is not None and step_run.definition_version == pinned["version"] == 1


def test_replay_groups_advances_by_their_number_even_on_a_frozen_clock(
    database_url: str, tmp_path: Path, marker: Path
) -> None:
    store = Store(database_url)
    try:
        engine = Engine(store, make_config(tmp_path), clock=FakeClock(datetime(2026, 11, 30, 12, 0, tzinfo=UTC)))
        j = jobs(engine)
        wf = workflow(
            engine,
            [
                {"id": "a", "job": j["record"], "params": {"name": "a"}},
                {"id": "b", "job": j["record"], "params": {"name": "b"}, "depends_on": []},
                {"id": "c", "job": j["record"], "params": {"name": "c"}},
            ],
        )
        wid = start(engine, wf)
        with coordinating(engine):
            done = wait_workflow(engine, wid)
        assert done.record.status is RunStatus.COMPLETED
        assert len({t.at for t in done.transitions}) == 1  # every change at one instant
        assert replay_workflow(engine, wid).match
    finally:
        store.dispose()


def test_racing_coordinators_audit_a_refused_step_once(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    unapproved = define(engine, approve=False, handler="workflow_handlers:record", params=[{"name": "name"}])
    wf = workflow(
        engine,
        [{"id": "a", "job": j["record"], "params": {"name": "a"}}, {"id": "b", "job": unapproved}],
        approve=False,
    )
    # Approve the workflow but not b's definition; b is checked at the start, so approve it
    # there and revoke it before b starts.
    from jobgate.service import approvals

    approvals.approve(engine, "default", unapproved, actor="admin")
    approvals.approve(engine, "default", wf, actor="admin")
    wid = start(engine, wf)
    approvals.revoke(engine, "default", unapproved, actor="admin")
    stop = threading.Event()

    def race() -> None:
        while not stop.is_set():
            WorkflowCoordinator(engine).pass_once()

    racers = [threading.Thread(target=race, daemon=True) for _ in range(3)]
    for t in racers:
        t.start()
    try:
        with coordinating(engine):
            done = wait_workflow(engine, wid)
    finally:
        stop.set()
        for t in racers:
            t.join(10)
    assert done.record.status is RunStatus.FAILED and done.record.error_code == "definition_not_approved"
    refused = count(engine, "audit_log", f"action = 'run.refused' AND target_id = '{unapproved}'")
    assert refused == 1


def _high_priority_workflow_capped_for_consumers(engine: Engine, tmp_path: Path) -> tuple[Engine, str]:
    """An engine whose scheduler policy caps a consumer at normal priority, and a workflow of
    one high-priority step."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        json.dumps(
            {"policy_id": "P", "version": 1, "priority": {"id": "SP-PRIORITY", "by_role": {"consumer": "normal"}}}
        )
    )
    edited = Engine(engine.store, make_config(tmp_path / "p", policy=str(policy)))
    high = define(edited, handler="workflow_handlers:record", params=[{"name": "name"}], priority="high")
    return edited, workflow(edited, [{"id": "a", "job": high, "params": {"name": "a"}}])


def test_the_starters_role_bounds_the_steps_priority(engine: Engine, tmp_path: Path, marker: Path) -> None:
    edited, wf = _high_priority_workflow_capped_for_consumers(engine, tmp_path)
    record, _ = start_workflow(edited, StartWorkflow(wf, scope=Scope(), requested_by="c1", role="consumer"), actor="c1")
    with coordinating(edited):
        done = wait_workflow(edited, record.workflow_run_id)
    assert done.record.status is RunStatus.FAILED and ran(marker) == []
    refused = next(t for t in done.transitions if t.reason == "step_refused")
    assert "SP-PRIORITY" in refused.detail["why"], refused.detail


def test_the_role_of_a_workflow_fired_as_a_run_bounds_its_steps_priority(
    engine: Engine, tmp_path: Path, marker: Path
) -> None:
    """A workflow definition submitted as a run (``POST /runs``) starts its workflow from that
    run: its requester's role is recorded with the trigger and judges the steps, as for a
    workflow started directly."""
    edited, wf = _high_priority_workflow_capped_for_consumers(engine, tmp_path)
    run = edited.submit(SubmitRequest(wf, requested_by="c1", role="consumer", reason="t"), actor="c1").run
    with edited.store.read() as tx:  # on the record, with the trigger
        assert (tx.run_trigger(run.job_run_id) or {})["role"] == "consumer"
    with coordinating(edited):
        wait_until(lambda: count(edited, "workflow_runs", f"job_definition_id = '{wf}'") == 1, what="its workflow")
        with edited.store.read() as tx:
            wid = str(connection(tx).execute(text("SELECT workflow_run_id FROM workflow_runs")).scalar_one())
        done = wait_workflow(edited, wid)
    assert done.record.status is RunStatus.FAILED and ran(marker) == []
    refused = next(t for t in done.transitions if t.reason == "step_refused")
    assert "SP-PRIORITY" in refused.detail["why"], refused.detail


def test_retention_keeps_the_step_runs_of_a_workflow_still_running(engine: Engine, marker: Path) -> None:
    from datetime import timedelta

    from jobgate.runtime.outbox import RecordingSink, publish_once

    def deliver_all() -> None:  # retention keeps runs whose events are undelivered: deliver them
        while publish_once(engine.store, [RecordingSink()], engine.clock):
            pass

    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": j["wait"], "params": {"name": "b"}},
        ],
    )
    wid = start(engine, wf)
    other = engine.submit(SubmitRequest(j["record"], params={"name": "lone"})).run.job_run_id
    later = engine.clock.now() + timedelta(days=1)
    with coordinating(engine):
        wait_until(lambda: ran(marker, "started") == ["b"] and "lone" in ran(marker), what="step b and the lone run")
        wait_until(lambda: count(engine, "job_runs", f"job_run_id = '{other}' AND status = 'COMPLETED'") == 1)
        deliver_all()
        a_run = str(view(engine, wid).steps[0].job_run_id)
        with engine.store.write() as tx:  # a finished step run of a running workflow is kept
            gone = tx.runs_retire("default", later, 100, now=later)
        assert other in gone and a_run not in gone
        Path(str(marker) + ".gate").touch()
        wait_workflow(engine, wid)
    deliver_all()
    with engine.store.write() as tx:  # the workflow ended: its step runs may go like any run
        gone = tx.runs_retire("default", later, 100, now=later)
    assert a_run in gone


def test_a_cancel_request_never_lands_on_a_compensating_workflow(engine: Engine, marker: Path) -> None:
    from sqlalchemy import text

    j = jobs(engine)
    wid = start(engine, workflow(engine, [{"id": "a", "job": j["record"]}]))
    with engine.store.write() as tx:  # the coordinator committed its switch to compensating first
        connection(tx).execute(
            text("UPDATE workflow_runs SET phase = 'compensating' WHERE workflow_run_id = :w"), {"w": wid}
        )
        assert not tx.workflow_request_cancel(wid)
    assert not view(engine, wid).record.cancel_requested


@pytest.mark.parametrize("step_status", ["FAILED", "STOPPING"])
def test_a_cancel_of_a_failing_workflow_is_refused_and_nothing_recorded(
    engine: Engine, marker: Path, step_status: str
) -> None:
    """Once a step failed the workflow follows its failure policy (the plan ignores a cancel):
    a cancel accepted and audited then would never land (found by a review)."""
    from sqlalchemy import text

    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}, {"id": "b", "job": j["record"], "depends_on": []}])
    wid = start(engine, wf)
    advance(engine, wid)
    with engine.store.write() as tx:  # as the coordinator records a failing step
        connection(tx).execute(
            text("UPDATE workflow_steps SET status = :s WHERE workflow_run_id = :w AND step_id = 'b'"),
            {"s": step_status, "w": wid},
        )
    with pytest.raises(ConflictError) as refused:
        cancel_workflow(engine, wid, actor="op")
    assert refused.value.field == "status" and "failing" in refused.value.message
    assert not view(engine, wid).record.cancel_requested
    assert count(engine, "audit_log", "action = 'workflow.cancel_requested'") == 0


def test_the_run_of_a_step_being_stopped_cannot_be_requeued(engine: Engine, marker: Path) -> None:
    from sqlalchemy import text

    dlq = define(engine, handler="workflow_handlers:fail", params=[{"name": "name"}], retry_policy="test_fixed_v1")
    wid = start(engine, workflow(engine, [{"id": "a", "job": dlq, "params": {"name": "a"}}]))
    advance(engine, wid)
    run_id = str(view(engine, wid).steps[0].job_run_id)
    with engine.store.write() as tx:  # as if a sibling's failure had asked this step to stop
        connection(tx).execute(
            text("UPDATE workflow_steps SET status = 'STOPPING' WHERE workflow_run_id = :w"), {"w": wid}
        )
        connection(tx).execute(
            text("UPDATE job_runs SET status = 'DEAD_LETTERED', ended_at = 1 WHERE job_run_id = :r"), {"r": run_id}
        )
    with pytest.raises(ConflictError) as info:
        control.requeue_run(engine, run_id, actor="op")
    assert info.value.field == "workflow_run_id"


def _committed_just_before_the_start_is_stored(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, change: Callable[[], object]
) -> None:
    """``change`` commits between a start's (read-only) checks and the write that stores it:
    the next write transaction of the engine runs it first, once."""
    real_write = engine.store.write
    pending = [change]

    @contextlib.contextmanager
    def write(tenant_id: str | None = None) -> Iterator[StoreTx]:
        if pending:
            monkeypatch.setattr(engine.store, "write", real_write)
            pending.pop()()
        with real_write(tenant_id) as tx:
            yield tx

    monkeypatch.setattr(engine.store, "write", write)


def test_a_revocation_committed_while_a_workflow_starts_refuses_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}])
    revoke = lambda: approvals.revoke(engine, "default", wf, actor="root")  # noqa: E731
    _committed_just_before_the_start_is_stored(engine, monkeypatch, revoke)
    with pytest.raises(GovernanceRefusal) as refused:
        start(engine, wf)
    assert refused.value.code == "definition_not_approved"
    assert count(engine, "workflow_runs") == 0
    with engine.store.read() as tx:
        reasons = [
            r[0] for r in connection(tx).execute(text("SELECT reason FROM audit_log WHERE action = 'run.refused'"))
        ]
    assert reasons == ["definition_not_approved"]


def test_safe_mode_switched_while_a_workflow_starts_binds_the_period_in_force(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(
        tmp_path,
        profiles={"default": {"replay_sample_size": 5}},
        safe_mode={"profile_overrides": {"replay_sample_size": 50}},
    )
    engine = Engine(Store(database_url), config)
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}])
    before = start(engine, wf)
    switch_on = lambda: safemode.activate(engine, "default", actor="ops", reason="incident")  # noqa: E731
    _committed_just_before_the_start_is_stored(engine, monkeypatch, switch_on)
    during = start(engine, wf)
    with engine.store.read() as tx:
        snapshots = {
            r[0]: r[1]
            for r in connection(tx).execute(text("SELECT workflow_run_id, config_snapshot_id FROM workflow_runs"))
        }
    assert snapshots[during] != snapshots[before]  # safe mode's overrides bound
    engine.store.dispose()
