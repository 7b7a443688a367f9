"""Governance at the start of every attempt, on both backends: a run created under an approval,
a gate and a safe-mode state that no longer hold does not start its next attempt. Every case
asserts through the handler's own marker file that nothing executed, and names the hold or
cancel reason, its transition and its audit entry."""

from __future__ import annotations

import json
import os
import py_compile
import random
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import engine_handlers
import pytest
from runtime_support import (
    get_run,
    marker_lines,
    running_worker,
    transitions,
    wait_status,
    wait_until,
)
from tests.service.test_trust_gates import VENDOR, Environment, licence_document

from helpers import define, make_config
from jobgate.core.models import DefinitionStatus
from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus
from jobgate.governance import code
from jobgate.service import approvals, audit, control, safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RunFilter
from jobgate.store.sqlstore import Store


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executed.txt"
    monkeypatch.setenv("JOBGATE_TEST_MARKER", str(path))
    return path


def submit(engine: Engine, job: str) -> str:
    return engine.submit(SubmitRequest(job, requested_by="ada", reason="test"), actor="ada").run.job_run_id


def attempts_run(marker: Path, run_id: str) -> list[int]:
    """The attempts whose handler really executed (its own marker line: the run id, then the
    attempt, wherever the handler puts them)."""
    out = []
    for line in marker_lines(marker):
        if run_id in line:
            out.append(int(line[line.index(run_id) + 1]))
    return out


def audited(engine: Engine, run_id: str) -> list[tuple[str, str | None]]:
    entries = audit.search(engine, AuditFilter(tenant_id="default", target_id=run_id))
    return [(e.event.action, e.event.reason) for e in entries]


def open_gate(marker: Path) -> None:
    engine_handlers.open_gate(marker)  # attempt 1 of ``gated_fail_once`` goes on (and fails)


def test_a_revoked_approval_cancels_the_attempts_not_yet_started(engine: Engine, marker: Path) -> None:
    """Found 1: attempt 1 runs; the approval is revoked; attempt 1 fails retryably; attempt 2
    must never start: the run is cancelled, ``approval_revoked``."""
    job = define(engine, handler="engine_handlers:gated_fail_once", retry_policy="test_fixed_v1")
    run_id = submit(engine, job)
    with running_worker(engine):
        wait_until(lambda: attempts_run(marker, run_id) == [1], what="attempt 1 to be running")
        done = approvals.revoke(engine, "default", job, actor="root", reason="withdrawn")
        assert done.cancelled_runs == []  # it is running: revoking does not kill what has started
        open_gate(marker)
        run = wait_status(engine, run_id, RunStatus.CANCELLED)
    assert attempts_run(marker, run_id) == [1]  # attempt 2 never executed
    assert (run.error_code, run.attempt) == ("approval_revoked", 1)
    assert transitions(engine, run_id)[-2:] == [
        ("RUNNING", "RETRY_WAIT", "retry_scheduled", 1),
        ("RETRY_WAIT", "CANCELLED", "approval_revoked", 1),
    ]
    assert ("run.cancelled", "approval_revoked") in audited(engine, run_id)


def test_revoking_cancels_a_claimed_run_before_it_starts(engine: Engine, marker: Path) -> None:
    """A run claimed (DISPATCHED) and started in a later cycle is asked again at its start."""
    job = define(engine, handler="engine_handlers:marker")
    run_id = submit(engine, job)
    now = engine.clock.now()
    from datetime import timedelta

    from jobgate.store.base import RunsClaim

    with engine.store.write() as tx:  # claimed, not started: as a prefetching worker leaves it
        tx.runs_claim(RunsClaim("prefetcher", ("default",), 10, now, now + timedelta(seconds=1), start_now=0))
    assert get_run(engine, run_id).status is RunStatus.DISPATCHED
    done = approvals.revoke(engine, "default", job, actor="root")
    assert done.cancelled_runs == [run_id]  # pending: cancelled by the revocation itself
    assert marker_lines(marker) == []


def test_trust_gates_are_asked_again_before_every_attempt(database_url: str, tmp_path: Path, marker: Path) -> None:
    """Found 2: a licensed run's environment check goes down during attempt 1: attempt 2 is held
    (``trust_gate_refused``) until the check answers again, then runs."""
    env = Environment()
    licence = tmp_path / "licence.json"
    licence.write_text(json.dumps(licence_document()))
    config = make_config(
        tmp_path,
        trust_gates={
            "licence": str(licence),
            "licence_trust_roots": {"vendor": VENDOR.public_b64},
            "environment": {"url": env.url, "ttl_seconds": 0.001, "timeout_seconds": 2},
        },
    )
    store = Store(database_url)
    engine = Engine(store, config)
    try:
        job = define(
            engine, handler="engine_handlers:gated_fail_once", retry_policy="test_fixed_v1", permissions=["etl"]
        )
        run_id = submit(engine, job)
        with running_worker(engine):
            wait_until(lambda: attempts_run(marker, run_id) == [1], what="attempt 1 to be running")
            env.up = False
            open_gate(marker)
            held = wait_status(engine, run_id, RunStatus.HELD)
            assert (held.hold_reason, attempts_run(marker, run_id)) == ("trust_gate_refused", [1])
            env.up = True
            done = wait_status(engine, run_id, RunStatus.COMPLETED)
        assert done.attempt == 2 and attempts_run(marker, run_id) == [1, 2]
        steps = transitions(engine, run_id)
        assert ("RETRY_WAIT", "HELD", "held", 1) in steps and ("HELD", "SCHEDULED", "released", 1) in steps
        gated = [a for a, _ in audited(engine, run_id) if a in ("run.held", "run.released")]
        assert gated == ["run.held", "run.released"]
    finally:
        env.server.shutdown()
        env.server.server_close()
        store.dispose()


@pytest.fixture
def safe_engine(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    config = make_config(tmp_path, safe_mode={"suspend_job_classes": ["FEDERATION_SYNC_JOB"]})
    store = Store(database_url)
    yield Engine(store, config)
    store.dispose()


def test_safe_mode_holds_a_queued_run_of_a_suspended_class_until_it_is_off(safe_engine: Engine, marker: Path) -> None:
    """Found 3: a run of a suspended class already SCHEDULED when safe mode goes on does not
    start while it is on; it runs once safe mode is off."""
    engine = safe_engine
    job = define(engine, job_class="FEDERATION_SYNC_JOB", handler="engine_handlers:marker")
    other = define(engine, job_class="REPLAY_JOB", handler="engine_handlers:marker")
    run_id, free = submit(engine, job), submit(engine, other)
    safemode.activate(engine, "default", actor="ops", reason="drift")
    with running_worker(engine) as worker:
        held = wait_status(engine, run_id, RunStatus.HELD)
        wait_status(engine, free, RunStatus.COMPLETED)  # another class is not held back
        worker.idle.wait(5)
        assert held.hold_reason == "safe_mode_active" and attempts_run(marker, run_id) == []
        safemode.deactivate(engine, "default", actor="ops", reason="over")
        wait_status(engine, run_id, RunStatus.COMPLETED)
    assert attempts_run(marker, run_id) == [1]
    steps = transitions(engine, run_id)
    assert ("SCHEDULED", "HELD", "held", 0) in steps and ("HELD", "SCHEDULED", "released", 0) in steps


def test_a_worker_told_to_exit_when_idle_exits_when_a_workflow_waits_on_held_steps(
    safe_engine: Engine, marker: Path
) -> None:
    """Found by a review: ``worker --exit-when-idle`` never exited while a workflow was open,
    though its only step was HELD (waiting on a gate, not on this worker). It exits when no
    workflow has anything to decide and nothing it could run waits."""
    import threading

    from jobgate.runtime.coordinator import WorkflowCoordinator
    from jobgate.runtime.process import WorkerProcess
    from jobgate.runtime.worker import WorkerSettings
    from jobgate.service.workflows import StartWorkflow, start_workflow

    engine = safe_engine
    step = define(engine, job_class="FEDERATION_SYNC_JOB", handler="engine_handlers:marker")
    flow = define(
        engine, job_class="AUDIT_INTEGRITY_JOB", handler=None, workflow={"steps": [{"id": "sync", "job": step}]}
    )
    record, _ = start_workflow(engine, StartWorkflow(flow, requested_by="ada"), actor="ada")
    WorkflowCoordinator(engine).pass_once()  # its step's run made, not started
    safemode.activate(engine, "default", actor="ops", reason="drift")  # so its start is held
    proc = WorkerProcess(engine, WorkerSettings(poll_interval=timedelta(milliseconds=20)), publish=False)
    proc.start()
    proc.stop_when_idle()
    ended = threading.Event()
    joiner = threading.Thread(target=lambda: (proc.join(), ended.set()), daemon=True)
    joiner.start()
    try:
        assert ended.wait(60), "the worker did not exit"  # real time: a bound on the process's own exit
    finally:
        proc.stop()
    from jobgate.service.workflows import workflow_view

    with engine.store.read() as tx:
        found = tx.runs_list(RunFilter(tenant_id="default", job_definition_id=step))
    assert found, workflow_view(engine, record.workflow_run_id)
    (held,) = found
    assert held.status is RunStatus.HELD and held.workflow_run_id == record.workflow_run_id
    assert attempts_run(marker, held.job_run_id) == []
    # the step is RUNNING (its run made), and the view knows its run is HELD (the console's
    # workflow page says so; found by a review: it showed RUNNING alone)
    view = workflow_view(engine, record.workflow_run_id)
    assert [s.status for s in view.steps] == ["RUNNING"] and view.run_statuses[held.job_run_id] == "HELD"


def test_manual_review_holds_a_queued_manual_run_of_a_definition_naming_itself_safe_mode_job(
    database_url: str, tmp_path: Path, marker: Path
) -> None:
    """The class SAFE_MODE_JOB is no pass: only what safe mode itself triggers is exempt."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, safe_mode={"manual_review": True}))
    try:
        job = define(engine, job_class="SAFE_MODE_JOB", handler="engine_handlers:marker")
        run_id = submit(engine, job)
        safemode.activate(engine, "default", actor="ops", reason="incident")
        with running_worker(engine):
            held = wait_status(engine, run_id, RunStatus.HELD)
        assert held.hold_reason == "safe_mode_active" and attempts_run(marker, run_id) == []
    finally:
        store.dispose()


def test_safe_mode_holds_a_retry_waiting_run(safe_engine: Engine, marker: Path) -> None:
    """Found 3, RETRY_WAIT: attempt 1 failed before safe mode went on; attempt 2 waits for it."""
    engine = safe_engine
    job = define(
        engine, job_class="FEDERATION_SYNC_JOB", handler="engine_handlers:gated_fail_once", retry_policy="test_fixed_v1"
    )
    run_id = submit(engine, job)
    with running_worker(engine):
        wait_until(lambda: attempts_run(marker, run_id) == [1], what="attempt 1 to be running")
        safemode.activate(engine, "default", actor="ops", reason="incident")
        open_gate(marker)
        held = wait_status(engine, run_id, RunStatus.HELD)
        assert (held.hold_reason, held.attempt, attempts_run(marker, run_id)) == ("safe_mode_active", 1, [1])
        safemode.deactivate(engine, "default", actor="ops", reason="over")
        wait_status(engine, run_id, RunStatus.COMPLETED)
    assert attempts_run(marker, run_id) == [1, 2]


def test_a_held_run_is_cancelled_when_its_approval_is_revoked_meanwhile(safe_engine: Engine, marker: Path) -> None:
    engine = safe_engine
    job = define(engine, job_class="FEDERATION_SYNC_JOB", handler="engine_handlers:marker")
    run_id = submit(engine, job)
    safemode.activate(engine, "default", actor="ops", reason="drift")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.HELD)
        done = approvals.revoke(engine, "default", job, actor="root")
        assert done.cancelled_runs == [run_id]  # a held run is pending: the revocation cancels it
    assert marker_lines(marker) == [] and get_run(engine, run_id).status is RunStatus.CANCELLED


def test_a_suspended_definition_holds_its_runs_and_a_retired_one_cancels_them(engine: Engine, marker: Path) -> None:
    job = define(engine, handler="engine_handlers:marker")
    first, second = submit(engine, job), submit(engine, job)
    with engine.store.write() as tx:
        tx.definition_set_status("default", job, DefinitionStatus.SUSPENDED, engine.clock.now())
    with running_worker(engine):
        assert wait_status(engine, first, RunStatus.HELD).hold_reason == "definition_inactive"
        wait_status(engine, second, RunStatus.HELD)
        with engine.store.write() as tx:
            tx.definition_set_status("default", job, DefinitionStatus.RETIRED, engine.clock.now())
        wait_status(engine, first, RunStatus.CANCELLED)
        wait_status(engine, second, RunStatus.CANCELLED)
    assert marker_lines(marker) == [] and get_run(engine, first).error_code == "definition_retired"


# ---------------------------------------------------------------------- code identity
@pytest.fixture
def code_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A handler package of its own on sys.path: ``<name>:work`` appends ``<version> <run> <attempt>``."""
    name = f"codepkg_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "site" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(_handler_source("v1"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield name, folder / "__init__.py"
    sys.modules.pop(name, None)


def _handler_source(version: str) -> str:
    return textwrap.dedent(
        f"""
        import os

        def work(ctx):
            with open(os.environ["JOBGATE_TEST_MARKER"], "a") as fh:
                fh.write("{version} " + ctx.job_run_id + " " + str(ctx.attempt) + "\\n")
            return {{}}
        """
    )


def test_code_changed_under_an_approval_is_held_until_approved_again(
    engine: Engine, marker: Path, code_package: tuple[str, Path]
) -> None:
    """Found 4: the handler's module is edited after its approval: no run executes the new code
    unapproved; ``GET …/approval`` says what changed. Approving it is not enough for a worker
    that imported the old code: it holds the run again (what it would run is neither); a worker
    started on the approved code runs it."""
    name, source = code_package
    job = define(engine, handler=f"{name}:work")  # this process imports v1 (apply checks the handler)
    approved = approvals.status(engine, "default", job)
    assert approved.matches and approved.approval is not None
    assert approved.approval.code_identity == approved.code.parts  # type: ignore[union-attr]
    source.write_text(_handler_source("v2"))  # edited, not approved
    run_id = submit(engine, job)
    with running_worker(engine) as worker:
        held = wait_status(engine, run_id, RunStatus.HELD)
        assert held.hold_reason == "code_changed"
        worker.idle.wait(5)
        status = approvals.status(engine, "default", job)
        assert (status.approved, status.matches, status.code_changed) == (True, False, (f"package:{name}",))
        approvals.approve(engine, "default", job, actor="reviewer", note="reviewed v2 of the code")
        wait_until(lambda: _holds(engine, run_id) == 2, what="the worker that loaded v1 to hold it again")
        assert "restart it" in str(transitions_detail(engine, run_id)[-1]["message"])
    assert marker_lines(marker) == []
    sys.modules.pop(name, None)  # a restarted worker: it imports what is on disk now
    code._LOADED.pop(f"package:{name}", None)
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    assert [line[0] for line in marker_lines(marker)] == ["v2"]
    assert ("run.held", "code_changed") in audited(engine, run_id)


def test_a_code_list_never_leaves_the_handlers_own_module_out(
    engine: Engine, marker: Path, code_package: tuple[str, Path]
) -> None:
    """``code:`` narrows what an approval binds; one naming only other code (here jobgate's
    ``core`` package) still binds the handler's module: edited after approval, it does not run."""
    name, source = code_package
    job = define(engine, handler=f"{name}:work", code=["package:jobgate.core"])
    approved = approvals.status(engine, "default", job)
    assert approved.matches and f"module:{name}" in approved.code.parts  # type: ignore[union-attr]
    source.write_text(_handler_source("v2"))  # edited, not approved
    run_id = submit(engine, job)
    with running_worker(engine):
        held = wait_status(engine, run_id, RunStatus.HELD)
    assert held.hold_reason == "code_changed" and marker_lines(marker) == []
    assert approvals.status(engine, "default", job).code_changed == (f"module:{name}",)


def test_a_worker_that_loaded_the_module_before_its_edit_holds_it_after_a_new_approval(
    engine: Engine, marker: Path, code_package: tuple[str, Path]
) -> None:
    """The module part is remembered as the process imported it, as the package part is: the
    edit approved since is not what this process would run."""
    name, source = code_package
    job = define(engine, handler=f"{name}:work", code=["package:jobgate.core"])  # imports v1 here
    source.write_text(_handler_source("v2"))
    approvals.approve(engine, "default", job, actor="reviewer", note="reviewed v2 of the code")
    run_id = submit(engine, job)
    with running_worker(engine):
        held = wait_status(engine, run_id, RunStatus.HELD)
    assert held.hold_reason == "code_changed" and "restart it" in str(transitions_detail(engine, run_id)[-1]["message"])
    assert marker_lines(marker) == []
    code._LOADED.pop(f"module:{name}", None)
    code._LOADED.pop(f"package:{name}", None)


def test_a_code_list_holding_the_handlers_module_binds_nothing_more(
    engine: Engine, code_package: tuple[str, Path]
) -> None:
    name, _source = code_package
    job = define(engine, handler=f"{name}:work", code=[f"package:{name}"])
    parts = approvals.status(engine, "default", job).code.parts  # type: ignore[union-attr]
    assert sorted(parts) == ["handler", f"package:{name}"]


def test_a_fresh_import_runs_the_source_not_a_bytecode_cache_it_cannot_tell_apart(
    code_package: tuple[str, Path],
) -> None:
    """Python trusts a cached ``.pyc`` while the source keeps its modification second and size:
    an edit that keeps both would run the old code under a digest taken of the new files. The
    handler is compiled from its source instead (found when CI first cached bytecode)."""
    name, source = code_package
    (source.parent / "version.py").write_text('VERSION = "v1"\n')
    source.write_text("from .version import VERSION\n\ndef version(ctx=None):\n    return VERSION\n")
    was = os.stat(source.parent / "version.py")
    planted = py_compile.compile(str(source.parent / "version.py"))  # as an earlier import leaves it
    (source.parent / "version.py").write_text('VERSION = "v2"\n')  # same size
    os.utime(source.parent / "version.py", ns=(was.st_atime_ns, was.st_mtime_ns))  # same second
    assert code.resolve_handler(f"{name}:version")() == "v2"
    assert [str(p) for p in source.parent.rglob("*.pyc")] == [planted]  # and it wrote none


def test_a_run_admitted_under_an_approval_made_since_binds_its_code(
    engine: Engine, code_package: tuple[str, Path]
) -> None:
    """Prepared under one approval, stored after the code was approved anew (the same content):
    the run is admitted under the new approval, and its binding names the new approval's code,
    not the code of the approval it was prepared under."""
    name, source = code_package
    job = define(engine, handler=f"{name}:work")
    before = approvals.status(engine, "default", job).approval
    now = engine.clock.now()
    prepared = engine.pipeline.prepare([SubmitRequest(job)], now=now)
    source.write_text(_handler_source("v2"))
    approvals.approve(engine, "default", job, actor="reviewer", note="v2 of the code")
    after = approvals.status(engine, "default", job).approval
    assert before is not None and after is not None and before.code_digest != after.code_digest
    [result] = engine.pipeline.store_prepared(prepared, now, actor=None)
    [created, *_] = transitions_detail(engine, result.run.job_run_id)
    assert created["bound"]["code_digest"] == after.code_digest  # type: ignore[index]


def _holds(engine: Engine, run_id: str) -> int:
    return sum(1 for (_f, to, _why, _a) in transitions(engine, run_id) if to == "HELD")


def transitions_detail(engine: Engine, run_id: str) -> list[dict[str, object]]:
    with engine.store.read() as tx:
        return [dict(t.detail) for t in tx.run_transitions(run_id)]


def test_a_runner_whose_binary_or_arguments_change_is_held(engine: Engine, tmp_path: Path, marker: Path) -> None:
    """Found 4, command runners: the runner's argument template in the configuration changes
    under an approved definition: its runs are held, nothing executes."""
    body = f"open({str(marker)!r}, 'a').write('ran\\n')"
    job = define(engine, handler=None, runner="py", body=body)
    changed = make_config(
        tmp_path, runners={"py": {"binary": "python3", "args": ["-I", "{{tmpfile}}"], "stop_grace_seconds": 0.5}}
    )
    edited = Engine(engine.store, changed)
    run_id = submit(edited, job)
    with running_worker(edited) as worker:
        assert wait_status(edited, run_id, RunStatus.HELD).hold_reason == "code_changed"
        worker.idle.wait(5)
    assert not marker.exists()
    status = approvals.status(edited, "default", job)
    assert status.code_changed == ("args",)


# ---------------------------------------------------------------------- the race
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_revoke_racing_the_claims_never_lets_an_attempt_start_after_it(
    engine: Engine, marker: Path, seed: int
) -> None:
    """Runs that fail and retry every 0.2 s while a worker claims them; the approval is revoked
    at a random moment (after a random number of further attempts have started: up to two
    rounds of retries). No attempt may start once the revocation has committed: what started is
    what had started by the time ``revoke`` returned, and every run ends cancelled."""
    rng = random.Random(seed)
    job = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_patient_v1")
    ids = [submit(engine, job) for _ in range(8)]
    started_at_revoke: set[tuple[str, int]] = set()

    def attempts_started() -> int:
        return sum(get_run(engine, r).attempt for r in ids)

    with running_worker(engine):
        wait_until(lambda: all(get_run(engine, r).attempt >= 1 for r in ids), what="every run to have started")
        more = rng.randint(0, 2 * len(ids))
        target = attempts_started() + more
        wait_until(lambda: attempts_started() >= target, what=f"{more} more attempts to start")
        approvals.revoke(engine, "default", job, actor="root")
        for r in ids:
            started_at_revoke |= {(r, a) for (_f, to, _why, a) in transitions(engine, r) if to == "RUNNING"}
        for r in ids:
            wait_status(engine, r, RunStatus.CANCELLED)
    started = {(r, a) for r in ids for (_f, to, _why, a) in transitions(engine, r) if to == "RUNNING"}
    assert started == started_at_revoke
    assert {get_run(engine, r).error_code for r in ids} <= {"approval_revoked", "TARGET_UNAVAILABLE", None}


def test_runs_show_names_the_hold(safe_engine: Engine) -> None:
    engine = safe_engine
    job = define(engine, job_class="FEDERATION_SYNC_JOB", handler="engine_handlers:marker")
    run_id = submit(engine, job)
    safemode.activate(engine, "default", actor="ops", reason="drift")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.HELD)
    detail = control.run_detail(engine, run_id)
    assert detail.run.hold_reason == "safe_mode_active" and detail.run.held_at is not None
    last = detail.transitions[-1]
    assert (last.to_status, last.reason, last.detail["rule"]) == (
        RunStatus.HELD,
        "held",
        "suspended_class:FEDERATION_SYNC_JOB",
    )


def test_a_workflow_run_whose_step_lost_its_approval_ends_naming_the_refusal(engine: Engine, marker: Path) -> None:
    """Found 8: a workflow fired as a run, whose step's approval is revoked after the trigger run
    was admitted, ends with the refusal's code (audited), not an exception's class name."""
    step = define(engine, handler="engine_handlers:marker")
    flow = define(engine, handler=None, workflow={"steps": [{"id": "only", "job": step}]})
    run_id = submit(engine, flow)
    approvals.revoke(engine, "default", step, actor="root")
    with running_worker(engine):
        run = wait_until(lambda: get_run(engine, run_id).status.is_terminal, what="the trigger run to end")
    run = get_run(engine, run_id)
    assert run.error_code == "definition_not_approved" and marker_lines(marker) == []
    refusals = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused", target_id=flow))
    assert [e.event.reason for e in refusals] == ["definition_not_approved"]
