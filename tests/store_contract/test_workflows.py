"""Workflow runs, their steps and their transitions, on both backends.

The contract: a workflow run is inserted once per idempotency key, with its steps and first
transitions; every advance is one compare-and-set on its version, writing the run's values, its
step rows and its transitions together or nothing; a cancel request and a bump move the version
so a coordinator that decided from an older state loses; ``workflows_due`` names exactly the
workflows with something to decide; every read of one workflow can be held to its tenant.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from tests.store_contract.support import T0, apply, complete, dead_lettering, make, other_thread_waits, running

from jobgate.core.records import StepRecord, WorkflowRecord, WorkflowTransition, WorkflowUpdate
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine

S = RunStatus


def _workflow(wid: str = "wf-1", *, tenant: str = "default", at: Any = T0, **kw: Any) -> WorkflowRecord:
    fields: dict[str, Any] = {
        "idempotency_key": f"key-{wid}", "job_definition_id": "flow", "definition_version": 1,
        "definition_digest": "sha256:flow", "job_class": "MAINTENANCE_JOB", "status": S.SCHEDULED,
        "phase": "forward", "params": {"day": "mon"}, "scope": {"tenant_id": tenant}, "trigger": {"by": "ada"},
        "config_snapshot_id": "snap-1", "config_digest": "sha256:cfg", "requested_by": "ada", "created_at": at,
    }  # fmt: skip
    fields.update(kw)
    return WorkflowRecord(wid, tenant, **fields)


def _steps(wid: str = "wf-1", tenant: str = "default") -> list[StepRecord]:
    return [StepRecord(wid, name, tenant, i, "PENDING") for i, name in enumerate(("extract", "load"))]


def _created(wid: str = "wf-1") -> list[WorkflowTransition]:
    return [
        WorkflowTransition(wid, 1, None, None, "CREATED", "created", "ada", T0),
        WorkflowTransition(wid, 2, None, "CREATED", "SCHEDULED", "admitted", "ada", T0, {"note": "x"}),
    ]


def _insert(engine: Engine, w: WorkflowRecord, steps: list[StepRecord] | None = None) -> bool:
    with engine.store.write() as tx:
        return tx.workflow_insert(w, _steps(w.workflow_run_id, w.tenant_id) if steps is None else steps, [])


def test_a_workflow_run_is_inserted_with_its_steps_and_transitions(engine: Engine) -> None:
    w = _workflow()
    with engine.store.write() as tx:
        assert tx.workflow_insert(w, list(reversed(_steps())), _created())
    with engine.store.read() as tx:
        assert tx.workflow_get("wf-1") == w
        assert tx.workflow_get("wf-1", "default") == w
        assert tx.workflow_get("wf-1", "tenant-b") is None
        assert tx.workflow_get("wf-unknown") is None
        assert tx.workflow_by_key("key-wf-1") == w
        assert tx.workflow_by_key("key-unknown") is None
        assert tx.workflow_steps("wf-1") == _steps()  # by position
        assert tx.workflow_transitions("wf-1") == _created()
        assert tx.workflow_steps("wf-unknown") == [] and tx.workflow_transitions("wf-unknown") == []


def test_a_second_insert_with_the_same_key_writes_nothing(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.workflow_insert(_workflow(), _steps(), _created())
        assert not tx.workflow_insert(_workflow("wf-2", idempotency_key="key-wf-1"), _steps("wf-2"), _created("wf-2"))
        assert tx.workflow_get("wf-2") is None
        assert tx.workflow_steps("wf-2") == [] and tx.workflow_transitions("wf-2") == []


def test_workflows_list_is_newest_first_filters_and_pages(engine: Engine) -> None:
    for i in range(4):
        status = S.COMPLETED if i == 3 else S.RUNNING
        _insert(engine, _workflow(f"wf-{i}", at=T0 + timedelta(seconds=i // 2), status=status))
    _insert(engine, _workflow("wf-x", job_definition_id="other"))
    _insert(engine, _workflow("wf-b", tenant="tenant-b"))

    def ids(**kw: Any) -> list[str]:
        with engine.store.read() as tx:
            return [w.workflow_run_id for w in tx.workflows_list("default", **kw)]

    assert ids() == ["wf-3", "wf-2", "wf-x", "wf-1", "wf-0"]
    assert ids(status="COMPLETED") == ["wf-3"]
    assert ids(job_definition_id="other") == ["wf-x"]
    assert ids(limit=2) == ["wf-3", "wf-2"]
    assert ids(before=(T0 + timedelta(seconds=1), "wf-2")) == ["wf-x", "wf-1", "wf-0"]


def test_an_advance_applies_by_compare_and_set_on_the_version(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.workflow_insert(_workflow(), _steps(), _created())
    started = T0 + timedelta(seconds=5)
    step = replace(_steps()[0], status="RUNNING", job_run_id="TGJOBRUN-1", started_at=started)
    t3 = WorkflowTransition("wf-1", 3, None, "SCHEDULED", "RUNNING", "started", "coordinator", started)
    t4 = WorkflowTransition("wf-1", 4, "extract", "PENDING", "RUNNING", "started", "coordinator", started)
    advance = WorkflowUpdate("wf-1", "default", 0, {"status": S.RUNNING, "started_at": started}, [step], [t3, t4])
    with engine.store.write() as tx:
        assert tx.workflow_apply(advance)
        assert not tx.workflow_apply(advance)  # decided from version 0: lost
        assert tx.workflow_next_seq("wf-1") == 5
    with engine.store.read() as tx:
        w = tx.workflow_get("wf-1")
        steps = tx.workflow_steps("wf-1")
        ts = tx.workflow_transitions("wf-1")
    assert w is not None and (w.status, w.started_at, w.version) == (S.RUNNING, started, 1)
    assert steps == [step, _steps()[1]]
    assert ts == [*_created(), t3, t4]
    # An advance with no new values still moves the version.
    with engine.store.write() as tx:
        assert tx.workflow_apply(WorkflowUpdate("wf-1", "default", 1, {}, [], []))
        assert tx.workflow_get("wf-1").version == 2  # type: ignore[union-attr]


def test_an_advance_that_ends_the_workflow_records_its_end(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.workflow_insert(_workflow(status=S.RUNNING), _steps(), _created())
    ended = T0 + timedelta(minutes=1)
    end = WorkflowTransition("wf-1", 3, None, "RUNNING", "FAILED", "step_failed", "coordinator", ended)
    values = {"status": S.FAILED, "ended_at": ended, "error_code": "STEP_FAILED", "error_message": "load failed"}
    with engine.store.write() as tx:
        assert tx.workflow_apply(WorkflowUpdate("wf-1", "default", 0, values, [], [end]))
        w = tx.workflow_get("wf-1")
        assert not tx.workflows_active_exist()
    assert w is not None
    assert (w.status, w.ended_at, w.error_code, w.error_message) == (S.FAILED, ended, "STEP_FAILED", "load failed")


def test_a_cancel_request_marks_an_active_forward_workflow_and_moves_its_version(engine: Engine) -> None:
    _insert(engine, _workflow("wf-1", status=S.RUNNING))
    _insert(engine, _workflow("wf-2", status=S.RUNNING, phase="compensating"))
    _insert(engine, _workflow("wf-3", status=S.COMPLETED))
    with engine.store.write() as tx:
        assert not tx.workflow_request_cancel("wf-1", "tenant-b")
        assert tx.workflow_request_cancel("wf-1", "default")
        assert tx.workflow_request_cancel("wf-1")  # asked again: still marked, the version moves on
        assert not tx.workflow_request_cancel("wf-2")  # compensating: runs to its end
        assert not tx.workflow_request_cancel("wf-3")
        assert not tx.workflow_request_cancel("wf-unknown")
        w = tx.workflow_get("wf-1")
        assert not tx.workflow_apply(WorkflowUpdate("wf-1", "default", 0, {"phase": "compensating"}, [], []))
    assert w is not None and (w.cancel_requested, w.version) == (True, 2)


def test_a_bump_moves_the_version_of_an_active_workflow_only(engine: Engine) -> None:
    _insert(engine, _workflow("wf-1", status=S.RUNNING))
    _insert(engine, _workflow("wf-2", status=S.CANCELLED))
    with engine.store.write() as tx:
        assert tx.workflow_bump("wf-1")
        assert not tx.workflow_bump("wf-2")
        assert not tx.workflow_bump("wf-unknown")
        assert tx.workflow_get("wf-1").version == 1  # type: ignore[union-attr]
        assert tx.workflow_get("wf-2").version == 0  # type: ignore[union-attr]


def test_workflows_active_exist_and_next_seq(engine: Engine) -> None:
    with engine.store.read() as tx:
        assert not tx.workflows_active_exist()
        assert tx.workflow_next_seq("wf-1") == 1
    _insert(engine, _workflow("wf-0", status=S.COMPLETED))
    with engine.store.read() as tx:
        assert not tx.workflows_active_exist()
    with engine.store.write() as tx:
        tx.workflow_insert(_workflow("wf-1"), [], _created())
        assert tx.workflows_active_exist()
        assert tx.workflow_next_seq("wf-1") == 3


def test_workflows_due_names_the_workflows_with_something_to_decide(engine: Engine) -> None:
    (busy,) = running(engine)
    done = complete(engine)
    (compensation,) = make(engine)
    _insert(engine, _workflow("not-started", status=S.SCHEDULED))
    _insert(engine, _workflow("cancelled", status=S.RUNNING))
    with engine.store.write() as tx:
        tx.workflow_request_cancel("cancelled")
    step = [StepRecord("step-done", "a", "default", 0, "RUNNING", job_run_id=done.job_run_id)]
    _insert(engine, _workflow("step-done", status=S.RUNNING), step)
    step = [StepRecord("step-busy", "a", "default", 0, "RUNNING", job_run_id=busy.job_run_id)]
    _insert(engine, _workflow("step-busy", status=S.RUNNING), step)
    step = [StepRecord("compensating", "a", "default", 0, "COMPENSATING", compensation_run_id=compensation.job_run_id)]
    _insert(engine, _workflow("compensating", status=S.RUNNING, phase="compensating"), step)
    step = [StepRecord("halted", "a", "default", 0, "RUNNING", job_run_id=busy.job_run_id)]
    _insert(engine, _workflow("halted", status=S.ESCALATED), step)
    _insert(engine, _workflow("finished", status=S.COMPLETED), [StepRecord("finished", "a", "default", 0, "DONE")])
    with engine.store.read() as tx:
        due = tx.workflows_due(100)
        assert len(tx.workflows_due(2)) == 2
    assert sorted(due) == ["cancelled", "halted", "not-started", "step-done"]
    # Once the compensation run ends, its workflow is due too.
    apply(engine, [dead_lettering(engine, compensation)])
    with engine.store.read() as tx:
        assert "compensating" in tx.workflows_due(100)


def test_a_locked_workflow_waits_for_its_holder(engine: Engine) -> None:
    _insert(engine, _workflow(status=S.RUNNING))
    seen: list[WorkflowRecord | None] = []
    other_thread_waits(
        engine.store,
        lambda tx: seen.append(tx.workflow_lock("wf-1")),
        lambda tx: tx.workflow_apply(WorkflowUpdate("wf-1", "default", 0, {"phase": "compensating"}, [], [])),
    )
    assert seen == [_workflow(status=S.RUNNING)]
    with engine.store.write() as tx:
        assert tx.workflow_lock("wf-unknown") is None
        assert tx.workflow_get("wf-1").phase == "compensating"  # type: ignore[union-attr]
