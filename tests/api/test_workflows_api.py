"""Workflow runs through the API: start (idempotent), the seed §44 status, transitions, cancel,
and the refusals (a job is not a workflow, an ended workflow cannot be cancelled)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.api.conftest import ACME_FLOW, ACME_JOB, World
from tests.helpers import count

from jobgate.core.tokens import Role

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_support import running_worker, wait_until

from jobgate.runtime.coordinator import WorkflowCoordinator
from jobgate.runtime.loops import LoopThread

API = "/api/v1"


def test_start_runs_to_completion_and_reports_the_seed_status_shape(world: World) -> None:
    op = world.headers("acme", Role.OPERATOR)
    made = world.client.post(f"{API}/workflows", json={"job_definition_id": ACME_FLOW}, headers=op)
    assert made.status_code == 201, made.text
    body = made.json()
    wid = body["workflow_run_id"]
    assert body["status"] == "SCHEDULED" and body["remaining_steps"] == ["one"] and body["current_step"] is None
    coordinator = WorkflowCoordinator(world.engine, interval=0.02)
    thread = LoopThread(coordinator, world.engine.clock)
    with running_worker(world.engine):
        thread.start()
        try:
            wait_until(
                lambda: world.client.get(f"{API}/workflows/{wid}", headers=op).json()["status"] == "COMPLETED",
                what="the workflow to complete",
            )
        finally:
            thread.stop()
            assert thread.join(10)
    status = world.client.get(f"{API}/workflows/{wid}", headers=op).json()
    assert {
        k: status[k] for k in ("workflow_run_id", "status", "current_step", "completed_steps", "remaining_steps")
    } == {
        "workflow_run_id": wid,
        "status": "COMPLETED",
        "current_step": None,
        "completed_steps": ["one"],
        "remaining_steps": [],
    }
    step = status["steps"][0]
    run = world.client.get(f"{API}/runs/{step['job_run_id']}", headers=op).json()["run"]
    assert run["workflow_run_id"] == wid and run["params"] == {"n": "1"}
    transitions = world.client.get(f"{API}/workflows/{wid}/transitions", headers=op).json()
    assert [t["seq"] for t in transitions] == list(range(1, len(transitions) + 1))
    assert transitions[-1]["to_status"] == "COMPLETED"
    listed = world.client.get(f"{API}/workflows?status=COMPLETED", headers=op).json()["items"]
    assert [w["workflow_run_id"] for w in listed] == [wid]
    for never in ("HELD", "DEAD_LETTERED", "RETRY_WAIT", "DISPATCHED"):  # a step run's, never a workflow's
        refused = world.client.get(f"{API}/workflows?status={never}", headers=op)
        assert refused.status_code == 422 and refused.json()["field"] == "status", refused.text


def test_the_same_idempotency_key_returns_the_first_workflow_run(world: World) -> None:
    op = {**world.headers("acme", Role.OPERATOR), "Idempotency-Key": "close-2026-11"}
    first = world.client.post(f"{API}/workflows", json={"job_definition_id": ACME_FLOW}, headers=op)
    again = world.client.post(f"{API}/workflows", json={"job_definition_id": ACME_FLOW}, headers=op)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["workflow_run_id"] == again.json()["workflow_run_id"]
    assert count(world.engine, "workflow_runs") == 1


def test_cancel_then_a_second_cancel_conflicts(world: World) -> None:
    op = world.headers("acme", Role.OPERATOR)
    wid = world.workflow()
    cancelled = world.client.post(f"{API}/workflows/{wid}/cancel", headers=op)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    assert [s["status"] for s in cancelled.json()["steps"]] == ["CANCELLED"]
    again = world.client.post(f"{API}/workflows/{wid}/cancel", headers=op)
    assert again.status_code == 409 and again.json()["field"] == "status"
    assert count(world.engine, "job_runs") == 0  # nothing ever ran


def test_refusals_name_the_field_and_store_nothing(world: World) -> None:
    op = world.headers("acme", Role.OPERATOR)
    job = world.client.post(f"{API}/workflows", json={"job_definition_id": ACME_JOB}, headers=op)
    assert job.status_code == 422 and job.json()["field"] == "job_definition_id"
    unknown = world.client.post(f"{API}/workflows", json={"job_definition_id": "nope"}, headers=op)
    assert unknown.status_code == 404
    extra = world.client.post(f"{API}/workflows", json={"job_definition_id": ACME_FLOW, "x": 1}, headers=op)
    assert extra.status_code == 422
    missing = world.client.get(f"{API}/workflows/TGWF-nope", headers=op)
    assert missing.status_code == 404 and missing.json()["field"] == "workflow_run_id"
    assert count(world.engine, "workflow_runs") == 0


def test_the_list_pages_with_a_cursor(world: World) -> None:
    op = world.headers("acme", Role.OPERATOR)
    made = [world.workflow() for _ in range(5)]
    seen: list[str] = []
    cursor = None
    for _ in range(4):
        url = f"{API}/workflows?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = world.client.get(url, headers=op).json()
        seen += [w["workflow_run_id"] for w in page["items"]]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    assert sorted(seen) == sorted(made) and len(seen) == 5
    forged = world.client.get(f"{API}/workflows?cursor=nope", headers=op)
    assert forged.status_code == 400 and forged.json()["field"] == "cursor"
