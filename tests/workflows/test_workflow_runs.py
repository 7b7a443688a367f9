"""Workflow runs end to end on both backends: a real worker runs the steps, a coordinator
advances the workflow, and the marker file says which steps really executed and in what order."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from runtime_support import running_worker, wait_until
from support import coordinating, jobs, lines, start, view, wait_workflow, workflow

from helpers import count, define
from jobgate.core.errors import ConflictError, GovernanceRefusal, ValidationError
from jobgate.core.models import Scope
from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus
from jobgate.runtime.coordinator import WorkflowCoordinator
from jobgate.service import workflows as workflow_service
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.service.workflows import StartWorkflow, advance, cancel_workflow, start_workflow


def ran(marker: Path, what: str = "ran") -> list[str]:
    return [parts[1] for parts in lines(marker) if parts[0] == what]


def test_ordered_steps_pass_outputs_and_report_the_seed_status_shape(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {
                "id": "collect",
                "job": j["record"],
                "params": {"name": "collect", "value": "${params.v}"},
                "outputs": ["value", "count"],
            },
            {
                "id": "build",
                "job": j["record"],
                "params": {"name": "build", "value": "${steps.collect.outputs.value}-${steps.collect.outputs.count}"},
                "outputs": ["value"],
            },
            {
                "id": "publish",
                "job": j["record"],
                "params": {"name": "publish", "value": "${steps.build.outputs.value}"},
            },
        ],
        params=[{"name": "v"}],
    )
    wid = start(engine, wf, v="abc")
    seen = view(engine, wid)
    assert seen.record.status is RunStatus.SCHEDULED
    assert (
        seen.current_step is None
        and seen.completed_steps == []
        and seen.remaining_steps == ["collect", "build", "publish"]
    )
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    assert done.record.status is RunStatus.COMPLETED
    assert ran(marker) == ["collect", "build", "publish"]
    assert (
        done.completed_steps == ["collect", "build", "publish"]
        and done.remaining_steps == []
        and done.current_step is None
    )
    assert {s.step_id: s.outputs for s in done.steps}["build"] == {"value": "abc-3"}
    with engine.store.read() as tx:
        runs = tx.runs_get([s.job_run_id for s in done.steps if s.job_run_id])
    assert {r.params["value"] for r in runs} == {"abc", "abc-3"}
    assert all(r.workflow_run_id == wid and r.trigger_type.value == "workflow" for r in runs)
    # Every change is persisted in order: the workflow's and each step's.
    reasons = [(t.step_id, t.to_status, t.reason) for t in done.transitions]
    assert reasons[:3] == [(None, "CREATED", "created"), (None, "SCHEDULED", "admitted"), (None, "RUNNING", "started")]
    assert reasons[-1] == (None, "COMPLETED", "all_steps_done")
    assert [t.seq for t in done.transitions] == list(range(1, len(done.transitions) + 1))


def test_independent_branches_run_in_parallel(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {"id": "left", "job": j["wait"], "params": {"name": "left"}},
            {"id": "right", "job": j["wait"], "params": {"name": "right"}, "depends_on": []},
            {"id": "join", "job": j["record"], "params": {"name": "join"}, "depends_on": ["left", "right"]},
        ],
    )
    wid = start(engine, wf)
    with coordinating(engine):
        # Both branches are running at once before either may finish (the gate is closed).
        wait_until(lambda: sorted(ran(marker, "started")) == ["left", "right"], what="both branches to start")
        assert view(engine, wid).running_steps == ["left", "right"]
        assert ran(marker) == []
        Path(str(marker) + ".gate").touch()
        done = wait_workflow(engine, wid)
    assert done.record.status is RunStatus.COMPLETED
    assert ran(marker)[-1] == "join"


@pytest.mark.parametrize(("policy", "status"), [("fail", RunStatus.FAILED), ("escalate", RunStatus.ESCALATED)])
def test_a_failed_step_ends_the_workflow_by_its_policy(
    engine: Engine, marker: Path, policy: str, status: RunStatus
) -> None:
    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": j["fail"], "params": {"name": "b"}, "on_failure": policy},
            {"id": "c", "job": j["record"], "params": {"name": "c"}},
        ],
    )
    wid = start(engine, wf)
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    assert done.record.status is status
    assert done.record.error_code == "STEP_BROKEN"
    assert ran(marker) == ["a"] and ran(marker, "failed") == ["b"]
    assert {s.step_id: s.status for s in done.steps} == {"a": "COMPLETED", "b": "FAILED", "c": "CANCELLED"}


def test_compensation_undoes_completed_steps_in_reverse_order(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    undo = {"job": j["undo"]}
    wf = workflow(
        engine,
        [
            {
                "id": "reserve",
                "job": j["record"],
                "params": {"name": "reserve"},
                "compensate": {**undo, "params": {"name": "reserve"}},
            },
            {
                "id": "charge",
                "job": j["record"],
                "params": {"name": "charge"},
                "compensate": {**undo, "params": {"name": "charge"}},
            },
            {"id": "notify", "job": j["record"], "params": {"name": "notify"}},
            {"id": "ship", "job": j["fail"], "params": {"name": "ship"}},
        ],
        on_failure="compensate",
    )
    wid = start(engine, wf)
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    assert done.record.status is RunStatus.FAILED
    assert ran(marker, "undo") == ["charge", "reserve"]
    assert [s.status for s in done.steps] == ["COMPENSATED", "COMPENSATED", "COMPLETED", "FAILED"]
    assert done.transitions[-1].reason == "compensated"


def test_cancel_mid_workflow_stops_the_running_step_and_runs_nothing_more(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": j["wait"], "params": {"name": "b"}},
            {"id": "c", "job": j["record"], "params": {"name": "c"}},
        ],
    )
    wid = start(engine, wf)
    with coordinating(engine):
        wait_until(lambda: ran(marker, "started") == ["b"], what="step b to start")
        cancel_workflow(engine, wid, actor="operator")
        done = wait_workflow(engine, wid)
        b_run = next(s.job_run_id for s in done.steps if s.step_id == "b")
        assert b_run is not None
        wait_until(lambda: ran(marker, "stopped") == ["b"], what="step b's run to be stopped")
    assert done.record.status is RunStatus.CANCELLED
    assert ran(marker) == ["a"]
    assert {s.step_id: s.status for s in done.steps} == {"a": "COMPLETED", "b": "CANCELLED", "c": "CANCELLED"}
    with engine.store.read() as tx:
        run = tx.run_get(b_run)
    assert run is not None and run.status is RunStatus.CANCELLED
    # the stop is announced and audited as a person's stop of the run would be
    from runtime_support import event_types

    assert event_types(engine, b_run).count("job_stop_requested") == 1
    assert count(engine, "audit_log", f"action = 'run.stop_requested' AND target_id = '{b_run}'") == 1
    with pytest.raises(Exception, match="only an active one"):
        cancel_workflow(engine, wid, actor="operator")


def test_an_unapproved_workflow_is_refused_and_nothing_is_stored(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}], approve=False)
    with pytest.raises(GovernanceRefusal) as info:
        start(engine, wf)
    assert info.value.code == "definition_not_approved"
    assert count(engine, "workflow_runs") == 0 and count(engine, "workflow_steps") == 0
    assert count(engine, "audit_log", "action = 'run.refused'") == 1


def test_a_step_definition_that_is_not_approved_refuses_the_whole_start(engine: Engine, marker: Path) -> None:
    unapproved = define(engine, approve=False, handler="workflow_handlers:record")
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    for job, error in ((unapproved, GovernanceRefusal), (missing, ValidationError)):
        wf = workflow(engine, [{"id": "a", "job": job}])
        with pytest.raises(error):
            start(engine, wf)
    assert count(engine, "workflow_runs") == 0 and count(engine, "job_runs") == 0


def test_a_step_that_is_a_workflow_is_refused_however_the_workflow_starts(engine: Engine) -> None:
    """One rule for a workflow started directly and one fired as a run: a step runs a job."""
    j = jobs(engine)
    inner = workflow(engine, [{"id": "a", "job": j["record"]}])
    outer = workflow(engine, [{"id": "nested", "job": inner}])
    with pytest.raises(ValidationError, match="is a workflow; a step runs a job"):
        start(engine, outer)
    with pytest.raises(ValidationError, match="is a workflow; a step runs a job"):
        engine.submit(SubmitRequest(outer, request_id="fired", scope=Scope()))
    assert count(engine, "workflow_runs") == 0 and count(engine, "job_runs") == 0


def test_a_job_definition_cannot_be_started_as_a_workflow(engine: Engine) -> None:
    job = define(engine, handler="workflow_handlers:record")
    with pytest.raises(ValidationError, match="not a workflow"):
        start(engine, job)


def test_the_same_client_key_finds_the_same_workflow_run(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}])
    first, created = start_workflow(engine, StartWorkflow(wf, client_key="k-1"), actor="t")
    again, created_again = start_workflow(engine, StartWorkflow(wf, client_key="k-1"), actor="t")
    assert created and not created_again and again.workflow_run_id == first.workflow_run_id
    assert count(engine, "workflow_runs") == 1


def test_a_client_key_reused_for_other_parameters_is_refused_and_starts_nothing(engine: Engine, marker: Path) -> None:
    """As for runs: the same key and request finds the workflow run it started (a default left
    out is the default), the same key with other parameters is a conflict naming that run."""
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}], params=[{"name": "who"}, {"name": "n", "default": "1"}])
    first, _ = start_workflow(engine, StartWorkflow(wf, params={"who": "ada"}, client_key="k-2"), actor="t")
    same, created = start_workflow(
        engine, StartWorkflow(wf, params={"who": "ada", "n": "1"}, client_key="k-2"), actor="t"
    )
    assert not created and same.workflow_run_id == first.workflow_run_id
    for params in ({"who": "bob"}, {"who": "ada", "n": "2"}, {"who": "ada", "unknown": "x"}):
        with pytest.raises(ConflictError) as info:
            start_workflow(engine, StartWorkflow(wf, params=params, client_key="k-2"), actor="t")
        assert info.value.field == "Idempotency-Key" and first.workflow_run_id in info.value.message
    assert count(engine, "workflow_runs") == 1


def test_a_workflow_definition_fired_as_a_job_starts_exactly_one_workflow_run(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}])
    request = SubmitRequest(wf, request_id="once", scope=Scope())
    trigger = engine.submit(request).run
    assert not engine.submit(request).created  # the same trigger again: the same run
    with coordinating(engine):
        wait_until(lambda: count(engine, "workflow_runs", "status = 'COMPLETED'") == 1, what="the workflow")
    assert count(engine, "workflow_runs") == 1 and ran(marker) == ["a"]
    with engine.store.read() as tx:
        run = tx.run_get(trigger.job_run_id)
    assert run is not None and run.status is RunStatus.COMPLETED and run.result is not None
    wid = run.result["workflow_run_id"]
    assert view(engine, wid).record.trigger["trigger_run_id"] == trigger.job_run_id


def test_a_coordinator_that_dies_mid_advance_leaves_nothing_and_the_next_one_continues(
    engine: Engine, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": j["record"], "params": {"name": "b"}},
        ],
    )
    wid = start(engine, wf)

    def crash(*_: object) -> bool:
        raise RuntimeError("killed between creating the step run and recording it")

    from jobgate.store.sqlstore import StoreTx

    with monkeypatch.context() as m:
        m.setattr(StoreTx, "workflow_apply", crash)
        with pytest.raises(RuntimeError):
            advance(engine, wid)
    assert count(engine, "job_runs") == 0  # the step run was rolled back with the advance
    assert view(engine, wid).record.status is RunStatus.SCHEDULED
    with coordinating(engine):
        done = wait_workflow(engine, wid)
    assert done.record.status is RunStatus.COMPLETED and ran(marker) == ["a", "b"]


def test_concurrent_coordinators_and_a_worker_restart_between_steps_run_each_step_once(
    engine: Engine, marker: Path
) -> None:
    """Four coordinators race on every decision while the worker is stopped and started
    between steps: each step's run is created once and runs to completion once."""
    j = jobs(engine)
    steps = [{"id": f"s{i}", "job": j["record"], "params": {"name": f"s{i}"}} for i in range(4)]
    wf = workflow(engine, steps)
    wids = [start(engine, wf) for _ in range(3)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def race() -> None:
        while not stop.is_set():
            try:
                WorkflowCoordinator(engine).pass_once()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    racers = [threading.Thread(target=race, daemon=True) for _ in range(4)]
    for t in racers:
        t.start()
    try:
        for _ in range(6):  # the worker comes and goes between steps
            with running_worker(engine):
                wait_until(lambda: count(engine, "job_runs", "status = 'COMPLETED'") > 0, what="some progress")
        with running_worker(engine):
            for wid in wids:
                wait_workflow(engine, wid, timeout=30)
    finally:
        stop.set()
        for t in racers:
            t.join(10)
    assert not errors
    assert all(view(engine, wid).record.status is RunStatus.COMPLETED for wid in wids)
    assert count(engine, "job_runs") == 12
    assert sorted(ran(marker)) == sorted([f"s{i}" for i in range(4)] * 3)
    assert len({parts[2] for parts in lines(marker)}) == 12  # one execution per run


def test_each_workflow_event_is_written_with_its_transition(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}])
    wid = start(engine, wf)
    with coordinating(engine):
        wait_workflow(engine, wid)
    assert count(engine, "outbox", "event_type = 'workflow_started'") == 1
    assert count(engine, "outbox", "event_type = 'workflow_completed'") == 1
    assert count(engine, "audit_log", "action = 'workflow.completed'") == 1
    assert workflow_service.workflow_view(engine, wid).record.ended_at is not None


def test_revoking_the_workflows_approval_refuses_its_next_step(engine: Engine, marker: Path) -> None:
    from jobgate.service import approvals

    j = jobs(engine)
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["wait"], "params": {"name": "a"}},
            {"id": "b", "job": j["record"], "params": {"name": "b"}},
        ],
    )
    wid = start(engine, wf)
    with coordinating(engine):
        wait_until(lambda: ran(marker, "started") == ["a"], what="step a to start")
        approvals.revoke(engine, "default", wf, actor="admin")
        Path(str(marker) + ".gate").touch()
        done = wait_workflow(engine, wid)
    assert done.record.status is RunStatus.FAILED and done.record.error_code == "approval_revoked"
    assert ran(marker) == ["a"]  # a finished; b never ran
    assert [s.status for s in done.steps] == ["COMPLETED", "FAILED"]
    # The refused start of b is on the record, once, as a refusal at preparation would be, and
    # against the workflow, whose approval was revoked (b's own definition is approved still:
    # found by a review, the entry named b's definition).
    assert count(engine, "audit_log", "action = 'run.refused' AND reason = 'approval_revoked'") == 1
    with engine.store.read() as tx:
        [entry] = tx.audit_list(AuditFilter(tenant_id="default", action="run.refused"))
    assert (entry.event.target_type, entry.event.target_id) == ("definition", wf)


@pytest.mark.parametrize(
    ("gate", "code"),
    [("suspended", "definition_inactive"), ("retired", "definition_retired"), ("safe_mode", "safe_mode_active")],
)
def test_a_workflow_the_rule_no_longer_admits_starts_nothing_more(
    database_url: str, tmp_path: Path, marker: Path, gate: str, code: str
) -> None:
    """Not only a revoked approval: a workflow whose definition was suspended or retired, or
    whose class safe mode suspends, while it ran starts no further step (as a run of it would
    not start, and a held run would not be released)."""
    from helpers import make_config
    from jobgate.service import safemode
    from jobgate.store.sqlstore import Store

    engine = Engine(
        Store(database_url), make_config(tmp_path, safe_mode={"suspend_job_classes": ["AUDIT_INTEGRITY_JOB"]})
    )
    try:
        j = jobs(engine)
        steps = [
            {"id": "a", "job": j["wait"], "params": {"name": "a"}},
            {"id": "b", "job": j["record"], "params": {"name": "b"}},
        ]
        wf = workflow(engine, steps)
        wid = start(engine, wf)
        with coordinating(engine):
            wait_until(lambda: ran(marker, "started") == ["a"], what="step a to start")
            if gate == "safe_mode":
                safemode.activate(engine, "default", actor="admin", reason="incident")
            else:  # the definition's next version says so (the lifecycle is the definition's)
                define(
                    engine,
                    approve=False,
                    job_definition_id=wf,
                    job_class="AUDIT_INTEGRITY_JOB",
                    workflow={"steps": steps},
                    handler=None,
                    status=gate,
                )
            Path(str(marker) + ".gate").touch()
            done = wait_workflow(engine, wid)
        assert done.record.status is RunStatus.FAILED and done.record.error_code == code
        assert ran(marker) == ["a"]  # a finished; b never ran
        assert [s.status for s in done.steps] == ["COMPLETED", "FAILED"]
        assert count(engine, "job_runs", f"workflow_run_id = '{wid}'") == 1
        assert count(engine, "audit_log", f"action = 'run.refused' AND reason = '{code}'") == 1
    finally:
        engine.store.dispose()


def test_a_workflow_started_by_a_reviewed_request_goes_on_under_safe_modes_manual_review(
    database_url: str, tmp_path: Path, marker: Path
) -> None:
    """Safe mode's manual review asks for a second person: a workflow whose trigger run a
    request's approver reviewed has one, and goes on step after step (found by a review: the
    check before each step judged it unreviewed and refused its first step)."""
    from helpers import make_config
    from jobgate.service import requests, safemode
    from jobgate.store.sqlstore import Store

    engine = Engine(Store(database_url), make_config(tmp_path, safe_mode={"manual_review": True}))
    try:
        j = jobs(engine)
        steps = [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": j["record"], "params": {"name": "b"}},
        ]
        wf = workflow(engine, steps)
        safemode.activate(engine, "default", actor="root", reason="incident")
        with pytest.raises(GovernanceRefusal):  # one person alone may not start it
            start(engine, wf)
        asked = requests.propose(
            engine, tenant_id="default", requester="ada", job_definition_id=wf, params={}, title="t", reason="r"
        )
        assert requests.approve(engine, "default", asked.request_id, actor="root").job_run_id is not None
        with coordinating(engine):
            wait_until(lambda: count(engine, "workflow_runs", f"job_definition_id = '{wf}'") == 1, what="its workflow")
            wid = next(iter(workflow_ids(engine, wf)))
            done = wait_workflow(engine, wid)
        assert done.record.status is RunStatus.COMPLETED, done.record
        assert ran(marker) == ["a", "b"]
    finally:
        engine.store.dispose()


def test_a_workflow_whose_stored_block_this_version_cannot_read_is_escalated_not_wedged(
    engine: Engine, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workflow block an earlier version stored and this one's reading refuses (found by a
    review: a condition literal NaN, refused since) made every coordinator pass fail and the
    cancel fail with it. The workflow is handed to a person (ESCALATED), naming why."""
    j = jobs(engine)
    wid = start(engine, workflow(engine, [{"id": "a", "job": j["record"]}, {"id": "b", "job": j["record"]}]))

    def stricter(content: object, source: str) -> object:
        raise ValidationError("'NaN' is not a JSON value", field="workflow.steps[1].when")

    monkeypatch.setattr(workflow_service, "workflow_spec_of", stricter)
    cancel_workflow(engine, wid, actor="op")  # asked, and the pass after it escalates
    done = view(engine, wid)
    assert done.record.status is RunStatus.ESCALATED and done.record.error_code == "definition_unreadable"
    assert "workflow.steps[1].when" in str(done.record.error_message)
    assert ran(marker) == []


def workflow_ids(engine: Engine, job: str) -> list[str]:
    from sqlalchemy import text

    from jobgate.testing import connection

    with engine.store.read() as tx:
        sql = text("SELECT workflow_run_id FROM workflow_runs WHERE job_definition_id = :j")
        return [str(r) for r in connection(tx).execute(sql, {"j": job}).scalars()]


def test_a_workflow_escalated_by_the_sla_monitor_starts_nothing_more_and_stops_its_running_step(
    database_url: str, tmp_path: Path, marker: Path
) -> None:
    from datetime import timedelta

    from helpers import make_config
    from jobgate.service import sla
    from jobgate.service.workflow_replay import replay_workflow
    from jobgate.store.sqlstore import Store

    policy = {"sla_policy_id": "wf_fast_v1", "deadline_seconds": 1, "escalation_after_seconds": 2}
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, sla_policies=[policy]))
    try:
        j = jobs(engine)
        wf = workflow(
            engine,
            [
                {"id": "a", "job": j["wait"], "params": {"name": "a"}},
                {"id": "b", "job": j["record"], "params": {"name": "b"}},
            ],
            sla_policy="wf_fast_v1",
        )
        wid = start(engine, wf)
        with coordinating(engine):
            wait_until(lambda: ran(marker, "started") == ["a"], what="step a to start")
            sla.check(engine, now=engine.clock.now() + timedelta(seconds=5))
            wait_until(lambda: ran(marker, "stopped") == ["a"], what="step a's run to be stopped")
            wait_until(
                lambda: [s.status for s in view(engine, wid).steps] == ["CANCELLED", "CANCELLED"],
                what="the open steps to be cancelled",
            )
        done = view(engine, wid)
        assert done.record.status is RunStatus.ESCALATED
        assert ran(marker) == []  # b never started
        assert [t.reason for t in done.transitions if t.step_id][-2:] == ["workflow_halted", "workflow_halted"]
        assert replay_workflow(engine, wid).match
        # sealed when escalated, and again when its open steps were halted after: the seal covers them
        from jobgate.service import audit

        audit.seal_pending(engine, engine.clock.now())
        findings = [f.message() for r in audit.verify_records(engine, ["default"]) for f in r.findings]
        assert findings == []
    finally:
        store.dispose()


def test_waiting_on_a_workflow_names_a_step_a_gate_holds(
    engine: Engine, marker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: ``workflows start --wait`` waited its whole timeout on a step held by
    ``code_changed`` and then asked "is a worker running?". A held step waits for a person: the
    wait says so at once, and its timeout names the step and the gate."""
    from sqlalchemy import text

    from jobgate.cli.workflows import _wait
    from jobgate.core.errors import NotReadyError
    from jobgate.testing import connection

    j = jobs(engine)
    wid = start(engine, workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}]))
    advance(engine, wid)  # the coordinator makes the step's run; no worker takes it
    [step] = view(engine, wid).steps
    assert step.job_run_id is not None
    with engine.store.write() as tx:  # as the attempt-start check holds a run whose code changed
        connection(tx).execute(
            text(
                "UPDATE job_runs SET status = 'HELD', hold_reason = 'code_changed', held_at = 1 WHERE job_run_id = :r"
            ),
            {"r": step.job_run_id},
        )
    with pytest.raises(NotReadyError) as waited:
        _wait(engine, wid, 0.3)
    assert f"step a held: run {step.job_run_id}, held by code_changed" in waited.value.message
    assert "worker" not in waited.value.message
    assert capsys.readouterr().err.count("warning: step a is held") == 1


@pytest.mark.parametrize("key", ["a b/c", "caf\u00e9", "", "x" * 201, "tab\there"])
def test_a_workflow_start_meets_the_idempotency_key_rule_a_run_meets(engine: Engine, key: str) -> None:
    """Found by a review: ``POST /runs`` refused a key with spaces or outside ASCII (422), ``POST
    /workflows`` and ``workflows start --key`` stored it. One rule for every start; nothing stored."""
    from jobgate.core.idempotency import CLIENT_KEY_RULE

    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}])
    with pytest.raises(ValidationError) as refused:
        start_workflow(engine, StartWorkflow(wf, client_key=key), actor="ada")
    assert refused.value.field == "Idempotency-Key" and refused.value.message == CLIENT_KEY_RULE
    assert count(engine, "workflow_runs") == 0 and count(engine, "job_runs") == 0
