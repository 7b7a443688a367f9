"""Safe mode's actions (seed 000 §39-40): what is refused, what is tightened, what runs at
each switch, and that switching off restores the ordinary state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import count, define, make_config

from jobgate.core.errors import ConflictError, GovernanceRefusal
from jobgate.core.models import Scope
from jobgate.core.records import AuditFilter
from jobgate.service import audit, requests, safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store

SAFE = {
    "job": "safe-mode-job",
    "suspend_job_classes": ["FEDERATION_SYNC_JOB"],
    "manual_review": True,
    "profile_overrides": {"replay_sample_size": 50},
}


@pytest.fixture
def guarded(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    config = make_config(tmp_path, profiles={"default": {"replay_sample_size": 5, "other": 1}}, safe_mode=SAFE)
    store = Store(database_url)
    engine = Engine(store, config)
    define(engine, job_definition_id="export", job_class="FEDERATION_SYNC_JOB")
    define(engine, job_definition_id="report", job_class="OBSERVABILITY_JOB")
    define(
        engine,
        job_definition_id="safe-mode-job",
        job_class="SAFE_MODE_JOB",
        trigger_type="safe_mode",
        handler="jobgate.standins:safe_mode_report",
        priority="critical",
        params=[{"name": "phase", "required": True}, {"name": "activation", "required": True}],
    )
    yield engine
    store.dispose()


def run(engine: Engine, job: str, request_id: str | None = None) -> str:
    request = SubmitRequest(job, scope=Scope(), requested_by="ada", request_id=request_id, reason="r")
    return engine.submit(request, actor="ada").run.job_run_id


def test_while_on_suspended_classes_and_direct_manual_runs_are_refused(guarded: Engine) -> None:
    safemode.activate(guarded, "default", actor="root", reason="incident 42")
    before = count(guarded, "job_runs")
    for job, rule in (("export", "suspended_class:FEDERATION_SYNC_JOB"), ("report", "manual_review_required")):
        with pytest.raises(GovernanceRefusal) as refused:
            run(guarded, job)
        assert (refused.value.code, refused.value.rule) == ("safe_mode_active", rule)
    assert count(guarded, "job_runs") == before  # nothing stored
    entries = audit.search(guarded, AuditFilter(tenant_id="default", action="run.refused"))
    assert [e.event.payload["rule"] for e in entries] == [
        "suspended_class:FEDERATION_SYNC_JOB",
        "manual_review_required",
    ]
    # The reviewed path still works while safe mode is on.
    proposed = requests.propose(
        guarded, tenant_id="default", requester="ada", job_definition_id="report", params={}, title="t", reason="r"
    )
    approved = requests.approve(guarded, "default", proposed.request_id, actor="root")
    assert approved.job_run_id is not None


def test_a_definition_naming_itself_safe_mode_job_gets_no_pass_for_its_manual_runs(guarded: Engine) -> None:
    """Only what safe mode itself triggers is exempt: a definition that declares the class
    SAFE_MODE_JOB and is run by hand is reviewed like any manual run (at its attempt:
    ``tests/runtime/test_attempt_gates.py``)."""
    define(guarded, job_definition_id="self-declared", job_class="SAFE_MODE_JOB")
    safemode.activate(guarded, "default", actor="root", reason="incident")
    before = count(guarded, "job_runs")
    with pytest.raises(GovernanceRefusal) as refused:
        run(guarded, "self-declared")
    assert (refused.value.code, refused.value.rule) == ("safe_mode_active", "manual_review_required")
    assert count(guarded, "job_runs") == before  # nothing stored


def test_runs_bound_while_on_carry_the_tightened_values_and_switching_off_restores(guarded: Engine) -> None:
    ordinary = run(guarded, "report")
    safemode.activate(guarded, "default", actor="root", reason="incident")
    proposed = requests.propose(
        guarded, tenant_id="default", requester="ada", job_definition_id="report", params={}, title="t", reason="r"
    )
    tightened = requests.approve(guarded, "default", proposed.request_id, actor="root").job_run_id
    safemode.deactivate(guarded, "default", actor="root", reason="resolved")
    after = run(guarded, "report")
    with guarded.store.read() as tx:
        runs = {r.job_run_id: r for r in tx.runs_get([ordinary, str(tightened), after])}
        snapshots = {rid: tx.snapshot_get(r.config_snapshot_id) for rid, r in runs.items()}
    values = {rid: s.content["values"] for rid, s in snapshots.items() if s is not None}
    assert values[ordinary] == values[after] == {"replay_sample_size": 5, "other": 1}
    assert values[str(tightened)] == {"replay_sample_size": 50, "other": 1}
    assert runs[ordinary].config_digest == runs[after].config_digest != runs[str(tightened)].config_digest
    run(guarded, "export")  # no longer suspended


def test_each_switch_runs_the_safe_mode_job_and_is_audited(guarded: Engine) -> None:
    period, on_run = safemode.switch(guarded, "default", True, actor="root", reason="incident")
    _, off_run = safemode.switch(guarded, "default", False, actor="root", reason="resolved")
    assert on_run is not None and off_run is not None and on_run != off_run
    with guarded.store.read() as tx:
        job = tx.run_get(on_run)
    assert job is not None and job.priority.value == "critical" and job.params["phase"] == "activate"
    assert period.actions["suspend_job_classes"] == ["FEDERATION_SYNC_JOB"]
    actions = [e.event.action for e in audit.search(guarded, AuditFilter(tenant_id="default", target_type="safe_mode"))]
    assert actions == ["safe_mode.activated", "safe_mode.deactivated"]
    with pytest.raises(ConflictError):
        safemode.deactivate(guarded, "default", actor="root", reason="again")


def test_automatic_activation_needs_policy_permission_and_a_policy_trigger(database_url: str, tmp_path: Path) -> None:
    import threading

    from tests.runtime.runtime_support import wait_until

    from jobgate.core.models import TriggerType
    from jobgate.runtime.worker import Worker, WorkerSettings

    def world(allow: bool) -> Engine:
        config = make_config(tmp_path / str(allow), safe_mode={"allow_automatic": allow})
        engine = Engine(Store(database_url), config)
        define(
            engine,
            job_definition_id=f"auto-{allow}",
            job_class="SAFE_MODE_JOB",
            trigger_type="policy",
            handler="jobgate.service.safemode:activate_automatically",
        )
        return engine

    for allow in (False, True):
        engine = world(allow)
        run_id = engine.submit(
            SubmitRequest(f"auto-{allow}", trigger_type=TriggerType.POLICY, scope=Scope(), trigger_id=f"p-{allow}"),
            actor="policy",
        ).run.job_run_id
        worker = Worker(engine, WorkerSettings(concurrency=1))
        threading.Thread(target=worker.run, daemon=True).start()

        def ended(engine: Engine = engine, run_id: str = run_id) -> bool:
            with engine.store.read() as tx:
                found = tx.run_get(run_id)
            return found is not None and found.status.is_terminal

        try:
            wait_until(ended, timeout=20, what=f"the policy run of allow_automatic={allow} to end")
        finally:
            worker.stop()
            worker.wait_stopped(10)
        with engine.store.read() as tx:
            run = tx.run_get(run_id)
        state = safemode.status(engine, "default")
        if allow:
            assert run is not None and run.status.value == "COMPLETED" and state is not None and state.active
            assert state.activated_by == f"automatic:{run_id}"
            safemode.deactivate(engine, "default", actor="root", reason="reset")
        else:
            assert run is not None and run.status.value in ("FAILED", "DEAD_LETTERED")
            assert state is None or not state.active
            refusals = audit.search(engine, AuditFilter(tenant_id="default", action="safe_mode.refused"))
            assert refusals and "allow_automatic" in str(refusals[0].event.reason)
        engine.store.dispose()
