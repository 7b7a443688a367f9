"""Workflow runs against their CSI contracts on both backends: the seed §44 status response at
every stage and every ending (completed, failed after compensation, escalated, cancelled),
the workflow definitions, and every event the runs emitted, steps' job events included."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.api.conftest import World
from tests.helpers import define

from jobgate.contracts import event_contract, validate
from jobgate.core.events import EventType
from jobgate.core.tokens import Role
from jobgate.runtime.coordinator import WorkflowCoordinator
from jobgate.runtime.loops import LoopThread
from jobgate.runtime.outbox import RecordingSink, envelope, publish_once
from jobgate.service.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_support import running_worker, wait_until

API = "/api/v1"
WORKFLOW_RUN = "comp.TG.OUTPUT.WORKFLOW-RUN.v1_0"
WORKFLOW_DEFINITION = "comp.TG.INPUT.WORKFLOW-DEFINITION.v1_0"
ENDED = {"COMPLETED", "FAILED", "ESCALATED", "CANCELLED"}


def flows(engine: Engine) -> dict[str, dict[str, Any]]:
    define(engine, job_definition_id="c-ok", tenant_id="acme", handler="engine_handlers:succeed")
    define(engine, job_definition_id="c-bad", tenant_id="acme", handler="engine_handlers:fail_final")
    made = {
        "completes": {
            "steps": [
                {"id": "collect", "job": "c-ok", "outputs": ["attempt"]},
                {"id": "audit", "job": "c-ok", "depends_on": []},
                {
                    "id": "publish",
                    "job": "c-ok",
                    "depends_on": ["collect", "audit"],
                    "when": "steps.collect.outputs.attempt == 1",
                },
            ]
        },
        "compensates": {
            "steps": [
                {"id": "reserve", "job": "c-ok", "compensate": {"job": "c-ok"}},
                {"id": "charge", "job": "c-bad", "on_failure": "compensate"},
            ]
        },
        "escalates": {"steps": [{"id": "check", "job": "c-bad"}], "on_failure": "escalate"},
        "is_cancelled": {"steps": [{"id": "only", "job": "c-ok"}]},
    }
    documents = {}
    for name, block in made.items():
        doc = {"job_definition_id": f"flow-{name}", "job_class": "AUDIT_INTEGRITY_JOB", "workflow": block}
        define(engine, tenant_id="acme", handler=None, **doc)
        documents[name] = doc
    return documents


def test_workflow_runs_and_their_events_conform_at_every_ending(world: World, engine: Engine) -> None:
    h = world.headers("acme", Role.OPERATOR)
    for doc in flows(engine).values():
        validate(WORKFLOW_DEFINITION, doc)
    ids = {}
    for name in ("completes", "compensates", "escalates", "is_cancelled"):
        made = world.client.post(f"{API}/workflows", json={"job_definition_id": f"flow-{name}"}, headers=h)
        assert made.status_code == 201, made.text
        validate(WORKFLOW_RUN, made.json())
        ids[name] = made.json()["workflow_run_id"]
    cancelled = world.client.post(f"{API}/workflows/{ids['is_cancelled']}/cancel", headers=h)
    validate(WORKFLOW_RUN, cancelled.json())

    def status(name: str) -> dict[str, Any]:
        found: dict[str, Any] = world.client.get(f"{API}/workflows/{ids[name]}", headers=h).json()
        return found

    coordinator = WorkflowCoordinator(engine, interval=0.02)
    thread = LoopThread(coordinator, engine.clock)
    with running_worker(engine):
        thread.start()
        try:
            wait_until(lambda: all(status(n)["status"] in ENDED for n in ids), timeout=30, what="every workflow to end")
        finally:
            thread.stop()
            assert thread.join(10)

    ended = {name: status(name) for name in ids}
    for document in ended.values():
        validate(WORKFLOW_RUN, document)
    assert {n: d["status"] for n, d in ended.items()} == {
        "completes": "COMPLETED",
        "compensates": "FAILED",
        "escalates": "ESCALATED",
        "is_cancelled": "CANCELLED",
    }
    steps = {s["step_id"]: s for s in ended["compensates"]["steps"]}
    assert steps["reserve"]["status"] == "COMPENSATED" and steps["reserve"]["compensation_run_id"] is not None
    assert {s["step_id"]: s["outputs"] for s in ended["completes"]["steps"]}["collect"] == {"attempt": 1}
    for item in world.client.get(f"{API}/workflows", headers=h).json()["items"]:
        validate(WORKFLOW_RUN, item)
    step_run = world.client.get(f"{API}/runs/{steps['reserve']['job_run_id']}", headers=h).json()["run"]
    validate("comp.TG.OUTPUT.JOB-RUN.v1_0", step_run)
    assert step_run["workflow_run_id"] == ids["compensates"] and step_run["trigger_type"] == "workflow"

    sink = RecordingSink()
    while publish_once(engine.store, [sink], engine.clock):
        pass
    for e in sink.events:
        validate(event_contract(e.event_type), envelope(e))
    seen = {e.event_type for e in sink.events}
    assert {t.value for t in EventType if t.value.startswith("workflow_")} <= seen, seen
