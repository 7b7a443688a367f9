"""The HTTP API's records conform to their CSI contracts on both backends: runs in every status
(created, listed, read in detail, retried), the seed §42 schedule response, and the inputs it
takes — a runtime event — judged the same way by the contract and by the API."""

from __future__ import annotations

import threading
from typing import Any

from tests.api.conftest import ACME_JOB, SHARED_JOB, World
from tests.helpers import define
from tests.runtime.runtime_support import wait_until

from jobgate.contracts import validate, violations
from jobgate.core.tokens import Role
from jobgate.runtime.worker import Worker, WorkerSettings
from jobgate.service.engine import Engine

API = "/api/v1"
RUN = "comp.TG.OUTPUT.JOB-RUN.v1_0"
SCHEDULED = "comp.TG.OUTPUT.SCHEDULED-JOB.v1_0"
EVENT = "comp.TG.INPUT.RUNTIME-EVENT.v1_0"
TRIGGER = "comp.TG.INPUT.SCHEDULER-TRIGGER.v1_0"


def finish(engine: Engine, run_ids: list[str], *, timeout: float = 20.0) -> None:
    """A worker runs until every one of ``run_ids`` is terminal (polled, never slept on blindly)."""
    worker = Worker(engine, WorkerSettings(concurrency=2))
    threading.Thread(target=worker.run, daemon=True).start()

    def ended() -> bool:
        with engine.store.read() as tx:
            return all(r.status.is_terminal for r in tx.runs_get(run_ids))

    try:
        wait_until(ended, timeout=timeout, what=f"runs {run_ids} to finish")
    finally:
        worker.stop()
        assert worker.wait_stopped(10)


def test_run_records_conform_in_every_status(world: World, engine: Engine) -> None:
    h = world.headers("acme", Role.ADMIN)
    define(engine, job_definition_id="c-ok", tenant_id="acme", handler="engine_handlers:succeed")
    define(engine, job_definition_id="c-dead", tenant_id="acme", handler="engine_handlers:fail_final")
    made = world.client.post(f"{API}/runs", json={"job_definition_id": "c-ok"}, headers=h)
    assert made.status_code == 201
    validate(RUN, made.json()["run"])
    dead = world.client.post(f"{API}/runs", json={"job_definition_id": "c-dead"}, headers=h).json()["run"]
    finish(engine, [made.json()["run"]["job_run_id"], dead["job_run_id"]])
    running = world.running_run()
    cancelled = world.terminal_run()
    world.new_run(by=world.actor("acme", Role.OPERATOR), n="42")  # pending, with a param
    assert world.client.post(f"{API}/runs/{running.job_run_id}/stop", headers=h).status_code == 202
    retried = world.client.post(f"{API}/runs/{cancelled.job_run_id}/retry", headers=h)
    assert retried.status_code == 201
    validate(RUN, retried.json()["run"])

    items = world.client.get(f"{API}/runs", params={"limit": 100}, headers=h).json()["items"]
    assert {r["status"] for r in items} == {"COMPLETED", "DEAD_LETTERED", "RUNNING", "CANCELLED", "SCHEDULED"}
    for item in items:
        validate(RUN, item)
        detail = world.client.get(f"{API}/runs/{item['job_run_id']}", headers=h).json()
        validate(RUN, detail["run"])
    completed = next(r for r in items if r["status"] == "COMPLETED")
    assert completed["result"] is not None and completed["started_at"] is not None  # the non-null branches too
    # The trigger each run recorded, an API submission's with its token's role among them.
    with world.engine.store.read() as tx:
        triggers = [tx.run_trigger(item["job_run_id"]) for item in items]
    assert any(t is not None and t.get("role") == "admin" for t in triggers)
    for trigger in triggers:
        validate(TRIGGER, trigger)


def test_the_seed_schedule_response_conforms_new_and_repeated(world: World) -> None:
    h = {**world.headers("acme", Role.ADMIN), "Idempotency-Key": "contract-42"}
    body = {"job_definition_id": ACME_JOB, "scope": {"eco_number": "ECO-A123"}, "trigger": {"reason": "sample"}}
    first = world.client.post(f"{API}/schedule", json=body, headers=h).json()
    validate(SCHEDULED, first)
    assert first["status"] == "scheduled"
    world.client.post(f"{API}/cancel", json={"job_run_id": first["job_run_id"]}, headers=h)
    again = world.client.post(f"{API}/schedule", json=body, headers=h).json()
    validate(SCHEDULED, again)
    assert again["status"] == "cancelled" and again["job_run_id"] == first["job_run_id"]


def test_a_runtime_event_is_judged_alike_by_the_contract_and_the_api(world: World) -> None:
    h = world.headers("acme", Role.OPERATOR)
    doc = {"id": "on-upload", "job": SHARED_JOB, "event_type": "file.uploaded", "payload_params": ["n"]}
    assert world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=h).status_code == 201
    event: dict[str, Any] = {"event_type": "file.uploaded", "event_id": "upload-1", "data": {"n": "7"}}
    validate(EVENT, event)
    fired = world.client.post(f"{API}/events", json=event, headers=h)
    assert fired.status_code == 200
    run_id = fired.json()["fired"][0]["job_run_id"]
    with world.engine.store.read() as tx:
        trigger = tx.run_trigger(run_id)
    validate(TRIGGER, trigger)
    assert trigger is not None and trigger["source_event_id"] == "upload-1"
    for bad, field in [
        ({**event, "colour": "blue"}, "colour"),
        ({"event_type": "file.uploaded", "data": {}}, "event_id"),
        ({**event, "event_type": "-bad type"}, "event_type"),
        ({**event, "event_id": ""}, "event_id"),
        ({**event, "data": [1]}, "data"),
    ]:
        assert {v.path for v in violations(EVENT, bad)} == {field}, bad
        refused = world.client.post(f"{API}/events", json=bad, headers=h)
        assert refused.status_code == 422 and field in refused.json()["field"], refused.json()


def test_a_run_with_an_artifact_conforms(world: World) -> None:
    """An artifact's digest is written as every digest is (``sha256:`` + hex, as the command
    runner records it); the contract says so, and a run that has one still conforms."""
    run = world.terminal_run()
    world.artifact_for(run, b"payroll")
    detail = world.client.get(f"{API}/runs/{run.job_run_id}", headers=world.headers("acme", Role.ADMIN)).json()
    assert detail["run"]["artifact_sha256"].startswith("sha256:")
    validate(RUN, detail["run"])
    ref = detail["run"]["result_ref"]  # seed §13: the result's reference is where it is read
    got = world.client.get(ref, headers=world.headers("acme", Role.CONSUMER))
    assert got.status_code == 200 and got.content == b"payroll"
    plain = world.client.get(f"{API}/runs/{world.new_run().job_run_id}", headers=world.headers("acme", Role.ADMIN))
    assert plain.json()["run"]["result_ref"] is None
