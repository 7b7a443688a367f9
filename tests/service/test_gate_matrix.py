"""Every path that can start code meets every gate (docs/guide/governance.md's table is this file).

Each path below drives one real trigger through jobgate's own machinery: the Python API, the
HTTP API and the seed contract, the CLI, the scheduler's cron, interval, batch-window, adaptive,
safe-mode and configuration fires, events, queues, policy conditions and alerts, backfill, a
four-eyes request, a retry, a requeue and a workflow step. Each gate is closed just before the
path fires: the approval revoked, safe mode on for the definition's class, the trust gate's
environment check down, a policy blackout, signatures required of an unsigned definition. The
same path with every gate open must create a run (so a refusal is never an accident of a broken
driver); with the gate closed it must create none and audit the refusal with the gate's code.

The start of every attempt is the last row: a run created with every gate open, then the gate
closes, then a worker: nothing executes (the handler's own marker file stays empty) and the run
is held, or cancelled when the approval was revoked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import text
from tests.helpers import config_document, count, define, make_config
from tests.runtime.runtime_support import marker_lines, running_worker, wait_status
from tests.service.test_trust_gates import VENDOR, Environment, licence_document

from jobgate.api.app import create_app
from jobgate.api.server_state import ServerState
from jobgate.core.states import RunStatus
from jobgate.governance import signing
from jobgate.runtime.scheduler import Scheduler
from jobgate.service import approvals, control, requests, safemode, schedules, tokens, triggers
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.service.workflows import StartWorkflow, advance, start_workflow
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

OPEN_POLICY = "policy_id: MATRIX\nversion: 1\n"
CLOSED_POLICY = (
    "policy_id: MATRIX\nversion: 2\nblackouts:\n"
    "  - {id: SP-FREEZE, start: '2000-01-01T00:00:00Z', end: '2100-01-01T00:00:00Z',\n"
    "     job_classes: [AUDIT_INTEGRITY_JOB]}\n"
)
SIGNER = signing.generate("ops")


@dataclass
class World:
    """One engine with every gate configured but open, and the ways to reach it."""

    engine: Engine
    base: Path
    url: str
    env: Environment
    signed: Engine | None = None  # the same store, with signatures required (the signature gate)
    client: TestClient | None = None
    token: str = ""
    closed: set[str] = field(default_factory=set)

    @property
    def current(self) -> Engine:
        return self.signed if "signature" in self.closed and self.signed is not None else self.engine

    def api(self) -> TestClient:
        if self.client is None or self.client.app.state.server.engine is not self.current:  # type: ignore[attr-defined]
            self.client = TestClient(create_app(ServerState(self.current, auth=True)), raise_server_exceptions=False)
            self.token = tokens.create(self.current, tenant_id="default", role="admin", actor="matrix").token
        return self.client

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def config_file(self) -> Path:
        doc = config_document(self.base, **self.overrides(signed="signature" in self.closed))
        path = self.base / ("signed.yaml" if "signature" in self.closed else "jobgate.yaml")
        path.write_text(yaml.safe_dump(doc))
        return path

    def overrides(self, *, signed: bool = False, profile_value: int = 1) -> dict[str, Any]:
        out: dict[str, Any] = {
            "safe_mode": {"suspend_job_classes": ["FEDERATION_SYNC_JOB"]},
            "trust_gates": {
                "licence": str(self.base / "licence.json"),
                "licence_trust_roots": {"vendor": VENDOR.public_b64},
                "environment": {"url": self.env.url, "ttl_seconds": 0.001, "timeout_seconds": 2},
            },
            "policy": str(self.base / "policy.yaml"),
            "profiles": {"default": {"value": profile_value}},
        }
        if signed:
            out["signing"] = {"require_signed_definitions": True, "trust_roots": {"ops": SIGNER.public_b64}}
        return out


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    env = Environment()
    (tmp_path / "licence.json").write_text(json.dumps(licence_document()))
    (tmp_path / "policy.yaml").write_text(OPEN_POLICY)
    store = Store(database_url)
    w = World(Engine(store, make_config(tmp_path)), tmp_path, database_url, env)
    w.engine = Engine(store, make_config(tmp_path, **w.overrides()))
    w.signed = Engine(store, make_config(tmp_path, **w.overrides(signed=True)))
    try:
        yield w
    finally:
        env.server.shutdown()
        env.server.server_close()
        store.dispose()


# ---------------------------------------------------------------------- gates
@dataclass(frozen=True)
class Gate:
    name: str
    fields: dict[str, Any]  # what the definition needs for this gate to concern it
    close: Callable[[World, str], None]
    codes: frozenset[str]  # the refusal codes it may give at creation


def _revoke(w: World, job: str) -> None:
    approvals.revoke(w.engine, "default", job, actor="root", reason="matrix")


def _safe_mode_on(w: World, job: str) -> None:
    safemode.activate(w.engine, "default", actor="ops", reason="matrix")


def _environment_down(w: World, job: str) -> None:
    w.env.up = False


def _blackout(w: World, job: str) -> None:
    (w.base / "policy.yaml").write_text(CLOSED_POLICY)


def _signatures_required(w: World, job: str) -> None:
    w.closed.add("signature")


GATES = {
    "open": Gate("open", {}, lambda w, job: None, frozenset()),
    "approval": Gate("approval", {}, _revoke, frozenset({"definition_not_approved"})),
    "safe_mode": Gate(
        "safe_mode", {"job_class": "FEDERATION_SYNC_JOB"}, _safe_mode_on, frozenset({"safe_mode_active"})
    ),
    "trust_gate": Gate("trust_gate", {"permissions": ["etl"]}, _environment_down, frozenset({"trust_gate_refused"})),
    "policy": Gate("policy", {"job_class": "AUDIT_INTEGRITY_JOB"}, _blackout, frozenset({"policy_refused"})),
    "signature": Gate("signature", {}, _signatures_required, frozenset({"definition_not_signed"})),
}


# ---------------------------------------------------------------------- paths
@dataclass(frozen=True)
class Path_:
    """``prepare`` runs with every gate open (what the path needs first); ``fire`` after the gate closed."""

    name: str
    fire: Callable[[World, str, Any], None]
    prepare: Callable[[World, str], Any] = lambda w, job: None
    # The definition's trigger_type (and schedule_expression: the schedule it keeps), which the
    # path's trigger must match (issue 19: trigger_type is enforced on every path).
    trigger: dict[str, Any] = field(default_factory=lambda: {"trigger_type": "manual"})


def _python(w: World, job: str, _: Any) -> None:
    w.current.submit(SubmitRequest(job, requested_by="ada", reason="matrix"), actor="ada")


def _api(w: World, job: str, _: Any) -> None:
    w.api().post("/api/v1/runs", json={"job_definition_id": job, "reason": "matrix"}, headers=w.headers())


def _contract(w: World, job: str, _: Any) -> None:
    body = {"job_definition_id": job, "trigger": {"trigger_type": "manual", "reason": "matrix"}}
    w.api().post("/api/v1/schedule", json=body, headers=w.headers())


def _cli(w: World, job: str, _: Any) -> None:
    from jobgate.cli import cli

    args = ["--config", str(w.config_file()), "--db", w.url, "submit", job, "--reason", "matrix"]
    CliRunner().invoke(cli, args, catch_exceptions=False)


def _schedule(**doc: Any) -> Callable[[World, str], Any]:
    def prepare(w: World, job: str) -> Any:
        now = w.engine.clock.now()
        body = {"id": f"m-{job}", "job": job, **doc}
        if "every_seconds" in doc and "anchor" not in doc:
            body["anchor"] = (now - timedelta(minutes=3)).isoformat()
        schedules.put_schedules(w.engine, [schedules.schedule_from_document(body, now=now)], source="test", now=now)
        return now

    return prepare


def _owned(w: World, job: str) -> Any:
    """The definition keeps its own schedule (made when it was applied): nothing to add."""
    return w.engine.clock.now()


def _tick(w: World, job: str, since: Any) -> None:
    Scheduler(w.current).tick(since + timedelta(minutes=2))


def _safe_mode_fire(w: World, job: str, since: Any) -> None:
    if not safemode.status(w.engine, "default") or not safemode.status(w.engine, "default").active:  # type: ignore[union-attr]
        safemode.activate(w.engine, "default", actor="ops", reason="matrix: the safe-mode schedule fires")
    Scheduler(w.current).tick(since + timedelta(seconds=1))


def _configuration_fire(w: World, job: str, since: Any) -> None:
    changed_config = make_config(w.base, **w.overrides(signed="signature" in w.closed, profile_value=2))
    changed = Engine(w.current.store, changed_config)
    Scheduler(changed).tick(since + timedelta(seconds=1))


def _event(w: World, job: str, _: Any) -> None:
    triggers.emit_event(
        w.current, event_type="matrix.done", event_id=f"e-{job}", data={}, tenant_id="default", actor="t"
    )


def _fact(w: World, job: str, _: Any) -> None:
    triggers.record_fact(w.current, tenant_id="default", name="matrix.level", value=5, source="t", actor="t")


def _alert(w: World, job: str, _: Any) -> None:
    triggers.post_alert(w.current, tenant_id="default", name="matrix_alert", firing=True, data={}, actor="t")


def _backfill(w: World, job: str, since: Any) -> None:
    start = since - timedelta(minutes=10)
    schedules.backfill(w.current, tenant_id="default", job_definition_id=job, start=start, end=since)


def _propose(w: World, job: str) -> Any:
    return requests.propose(
        w.engine, tenant_id="default", requester="carol", job_definition_id=job, params={}, title="t", reason="r"
    ).request_id


def _approve_request(w: World, job: str, request_id: Any) -> None:
    requests.approve(w.current, "default", request_id, actor="dave")


def _terminal_run(w: World, job: str) -> Any:
    run = w.engine.submit(SubmitRequest(job, requested_by="ada", reason="matrix"), actor="ada").run
    control.cancel_run(w.engine, run.job_run_id, actor="ops")
    return run.job_run_id


def _retry(w: World, job: str, run_id: Any) -> None:
    control.retry_run(w.current, run_id, actor="ops")


def _dead_letter(w: World, job: str) -> Any:
    run = w.engine.submit(SubmitRequest(job, requested_by="ada", reason="matrix"), actor="ada").run
    with w.engine.store.write() as tx:
        dead = text("UPDATE job_runs SET status = 'DEAD_LETTERED' WHERE job_run_id = :r")
        connection(tx).execute(dead, {"r": run.job_run_id})
    return run.job_run_id


def _requeue(w: World, job: str, run_id: Any) -> None:
    control.requeue_run(w.current, run_id, actor="ops")


def _start_workflow(w: World, job: str) -> Any:
    steps = {"steps": [{"id": "s", "job": job}]}
    flow = define(w.engine, handler=None, job_definition_id=f"flow-{job}", workflow=steps)
    record, _ = start_workflow(w.engine, StartWorkflow(flow, requested_by="ada"), actor="ada")
    return record.workflow_run_id


def _advance(w: World, job: str, workflow_run_id: Any) -> None:
    advance(w.current, workflow_run_id)


def _compensating_workflow(w: World, job: str) -> Any:
    """Step ``done`` completes, step ``breaks`` fails, so ``done`` is undone by ``job``."""
    ok = define(w.engine, job_definition_id=f"ok-{job}", handler="engine_handlers:succeed")
    bad = define(w.engine, job_definition_id=f"bad-{job}", handler="engine_handlers:fail_final")
    steps = {
        "steps": [{"id": "done", "job": ok, "compensate": {"job": job}}, {"id": "breaks", "job": bad}],
        "on_failure": "compensate",
    }
    flow = define(w.engine, handler=None, job_definition_id=f"saga-{job}", workflow=steps)
    record, _ = start_workflow(w.engine, StartWorkflow(flow, requested_by="ada"), actor="ada")
    return record.workflow_run_id


def _run_until_compensation(w: World, job: str, workflow_run_id: Any) -> None:
    """Run the saga's steps (the worker and the coordinator, in this thread) until it ends."""
    from tests.runtime.runtime_support import wait_until

    from jobgate.service.workflows import workflow_view

    ended = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ESCALATED, RunStatus.CANCELLED)
    with running_worker(w.current):

        def done() -> bool:
            advance(w.current, workflow_run_id)
            return workflow_view(w.current, workflow_run_id).record.status in ended

        wait_until(done, timeout=20, what="the saga to end")


PATHS = {
    p.name: p
    for p in (
        Path_("manual (Python API)", _python),
        Path_("manual (POST /runs)", _api),
        Path_("seed contract (POST /schedule)", _contract),
        Path_("CLI submit", _cli),
        Path_("cron", _tick, _owned, {"trigger_type": "cron", "schedule_expression": "* * * * *"}),
        Path_("interval", _tick, _owned, {"trigger_type": "interval", "schedule_expression": "every: 60s"}),
        Path_("batch window", _tick, _schedule(window_seconds=60), {"trigger_type": "batch_window"}),
        Path_(
            "adaptive",
            _tick,
            _schedule(every_seconds=60, adaptive=True, min_every_seconds=30, max_every_seconds=120),
            {"trigger_type": "adaptive"},
        ),
        Path_("safe mode", _safe_mode_fire, _schedule(safe_mode=True), {"trigger_type": "safe_mode"}),
        Path_(
            "configuration",
            _configuration_fire,
            _schedule(config_profile="default"),
            {"trigger_type": "configuration"},
        ),
        Path_("event", _event, _schedule(event_type="matrix.done"), {"trigger_type": "event"}),
        Path_("queue", _event, _schedule(event_type="matrix.done", queue=True), {"trigger_type": "queue"}),
        Path_("policy", _fact, _schedule(condition="matrix.level > 3"), {"trigger_type": "policy"}),
        Path_("alert", _alert, _schedule(condition="alert.matrix_alert == 1", alert=True), {"trigger_type": "alert"}),
        Path_("backfill", _backfill, _owned, {"trigger_type": "interval", "schedule_expression": "60"}),
        Path_("request", _approve_request, _propose),
        Path_("retry", _retry, _terminal_run),
        Path_("requeue", _requeue, _dead_letter),
        Path_("workflow step", _advance, _start_workflow),
        Path_("compensation", _run_until_compensation, _compensating_workflow),
    )
}


def _definition(w: World, gate: Gate, path: Path_) -> str:
    fields = {"job_definition_id": f"matrix-{gate.name.replace('_', '-')}", **gate.fields, **path.trigger}
    if gate.name == "signature":  # stored unsigned: refused once signatures are required
        return define(w.engine, **fields)
    return define(w.engine, **fields)


def _runs(w: World, job: str) -> int:
    return count(w.engine, "job_runs", f"job_definition_id = '{job}'")


def _refusal_codes(w: World) -> set[str]:
    with w.engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT reason FROM audit_log WHERE action = 'run.refused'")).scalars().all()
    return {str(r) for r in rows}


@pytest.mark.parametrize("gate_name", list(GATES))
@pytest.mark.parametrize("path_name", list(PATHS))
def test_every_path_meets_every_gate(world: World, path_name: str, gate_name: str) -> None:
    path, gate = PATHS[path_name], GATES[gate_name]
    job = _definition(world, gate, path)
    prepared = path.prepare(world, job)
    before = _runs(world, job)
    gate.close(world, job)
    try:
        path.fire(world, job, prepared)
    except Exception as exc:  # a refused path may raise (the Python API, requests, retries, requeues)
        codes = {getattr(exc, "code", "")}
        assert gate.codes and codes & gate.codes, f"{path.name}: {exc!r}"
    if gate.name == "open":
        if path.name == "requeue":
            assert world.engine.store is not None and _status(world, prepared) is RunStatus.SCHEDULED
        else:
            assert _runs(world, job) > before, f"{path.name} made no run with every gate open"
        return
    assert _runs(world, job) == before, f"{path.name} stored a run past the {gate.name} gate"
    if path.name == "requeue":
        assert _status(world, prepared) is RunStatus.DEAD_LETTERED
    assert _refusal_codes(world) & gate.codes, f"{path.name}: the {gate.name} refusal is not in the audit log"


def _status(w: World, run_id: str) -> RunStatus:
    with w.engine.store.read() as tx:
        run = tx.run_get(run_id)
    assert run is not None
    return run.status


# ---------------------------------------------------------------------- every attempt
ATTEMPT_OUTCOMES = {
    "approval": (RunStatus.CANCELLED, "approval_revoked"),
    "safe_mode": (RunStatus.HELD, "safe_mode_active"),
    "trust_gate": (RunStatus.HELD, "trust_gate_refused"),
    "policy": (RunStatus.HELD, "policy_refused"),
    "signature": (RunStatus.HELD, "definition_not_signed"),
}


@pytest.mark.parametrize("gate_name", list(ATTEMPT_OUTCOMES))
def test_every_attempt_meets_every_gate(
    world: World, gate_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run created with its gate open, then the gate closes: its attempt never starts."""
    marker = tmp_path / "ran.txt"
    monkeypatch.setenv("JOBGATE_TEST_MARKER", str(marker))
    gate = GATES[gate_name]
    name = f"attempt-{gate_name.replace('_', '-')}"
    job = define(world.engine, job_definition_id=name, handler="engine_handlers:marker", **gate.fields)
    run_id = world.engine.submit(SubmitRequest(job, requested_by="ada", reason="matrix"), actor="ada").run.job_run_id
    if gate_name == "approval":
        digest = approvals.status(world.engine, "default", job).current_digest
        with world.engine.store.write() as tx:  # revoked without the revocation's own cancellation
            tx.approval_revoke("default", job, digest, "root", world.engine.clock.now())
    else:
        gate.close(world, job)
    status, reason = ATTEMPT_OUTCOMES[gate_name]
    with running_worker(world.current) as worker:
        run = wait_status(world.current, run_id, status)
        worker.idle.wait(2)
    assert marker_lines(marker) == []
    assert (run.hold_reason if status is RunStatus.HELD else run.error_code) == reason
