"""Schedules, events, dead letters, tokens, workers, doctor, readiness and metrics over HTTP."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from tests.api.conftest import ACME_JOB, SHARED_JOB, World
from tests.helpers import count, define
from tests.runtime.runtime_support import get_run, wait_until

from jobgate.core.tokens import Role
from jobgate.runtime.worker import Worker, WorkerSettings
from jobgate.service.engine import Engine
from jobgate.store.base import WorkerBeat

API = "/api/v1"


def test_schedule_lifecycle_is_recorded_with_the_token(world: World) -> None:
    h = world.headers("acme", Role.OPERATOR)
    doc = {"id": "nightly", "job": ACME_JOB, "every_seconds": 86400, "timezone": "Europe/Helsinki"}
    made = world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=h)
    assert made.status_code == 201 and made.json()["document"]["tenant"] == "acme"
    assert world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=h).status_code == 200
    assert world.client.post(f"{API}/schedules/nightly/disable", headers=h).json()["changed"] is True
    assert world.client.post(f"{API}/schedules/nightly/disable", headers=h).json()["changed"] is False
    assert world.client.post(f"{API}/schedules/nightly/enable", headers=h).json()["changed"] is True
    with world.engine.store.read() as tx:
        changes = tx.changes_list("acme", "nightly")
    assert [c.field for c in changes] == ["created", "paused", "resumed"]  # re-put unchanged: nothing to record
    assert {c.source for c in changes} == {world.actor("acme", Role.OPERATOR)}
    assert world.client.delete(f"{API}/schedules/nightly", headers=h).status_code == 204
    assert world.client.delete(f"{API}/schedules/nightly", headers=h).status_code == 404


def test_a_bad_schedule_names_the_field_and_stores_nothing(world: World) -> None:
    h = world.headers("acme", Role.OPERATOR)
    for doc, field, status in [
        ({"id": "x", "job": ACME_JOB, "cron": "61 * * * *"}, "cron", 422),
        ({"id": "x", "job": ACME_JOB}, "schedule", 422),
        ({"id": "x", "job": ACME_JOB, "every_seconds": 60, "tenant": "other"}, "schedule.tenant", 403),
        ({"id": "x", "job": "nope", "every_seconds": 60}, "job", 422),
    ]:
        refused = world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=h)
        assert refused.status_code == status and field in refused.json()["field"], refused.json()
    assert count(world.engine, "schedules") == 0 and count(world.engine, "schedule_changes") == 0


def test_an_event_fires_subscribed_schedules_once_per_source_event(world: World) -> None:
    h = world.headers("acme", Role.OPERATOR)
    doc = {"id": "on-upload", "job": SHARED_JOB, "event_type": "file.uploaded", "payload_params": ["n"]}
    assert world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=h).status_code == 201
    event = {"event_type": "file.uploaded", "event_id": "upload-1", "data": {"n": "7"}}
    first = world.client.post(f"{API}/events", json=event, headers=h).json()
    again = world.client.post(f"{API}/events", json=event, headers=h).json()
    assert first["fired"][0]["created"] is True and again["fired"][0]["created"] is False
    assert first["fired"][0]["job_run_id"] == again["fired"][0]["job_run_id"]
    run = world.client.get(f"{API}/runs/{first['fired'][0]['job_run_id']}", headers=h).json()["run"]
    assert run["params"]["n"] == "7" and run["trigger_type"] == "event"
    other = world.client.post(f"{API}/events", json=event, headers=world.headers("other", Role.OPERATOR)).json()
    assert other["fired"] == []  # acme's schedule does not hear another tenant's events


SEED_18 = {  # seed 000 §18's trigger payload, as written there (with our event type)
    "trigger_id": "TGTRIG-2026-00001472",
    "trigger_type": "event",
    "event_type": "trustgate.quarantine.created",
    "source_engine_meid": "MEID_TRUST_QUARANTINE_MANAGER",
    "source_engine_cmi": "vera.TG-QUARANTINE.ENGINE.MANAGER.1_0_0",
    "signal_id": "SIG-2026-00001472",
    "eco_number": "ECO-A123",
    "policy_context": {"policy_bundle": "FAGF-2026.2", "scheduler_profile": "production_scheduler_v1"},
    "created_at": "2026-06-25T18:00:00Z",
}


def test_an_event_in_the_seed_18_shape_records_its_source_and_policy_context(world: World) -> None:
    h = world.headers("acme", Role.OPERATOR)
    doc = {"id": "on-quarantine", "job": SHARED_JOB, "event_type": "trustgate.quarantine.created"}
    assert world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=h).status_code == 201
    for bad, field in [
        ({"source_engine_meid": "has space"}, "source_engine_meid"),
        ({"created_at": "2026-06-25T18:00:00"}, "created_at"),
        ({"event_id": "another"}, "trigger_id"),
        ({"trigger_id": None}, "event_id"),
        ({"policy_context": "FAGF"}, "policy_context"),
    ]:
        refused = world.client.post(f"{API}/events", json={**SEED_18, **bad}, headers=h)
        assert refused.status_code in (400, 422) and field in refused.json()["field"], refused.json()
    assert count(world.engine, "job_runs") == 0  # nothing stored for a refused event
    fired = world.client.post(f"{API}/events", json=SEED_18, headers=h).json()
    assert fired["event_id"] == "TGTRIG-2026-00001472" and fired["fired"][0]["created"] is True
    run_id = fired["fired"][0]["job_run_id"]
    with world.engine.store.read() as tx:
        trigger = tx.run_trigger(run_id)
        run = tx.run_get(run_id)
    assert trigger is not None and run is not None
    assert trigger["source_event_id"] == "TGTRIG-2026-00001472"
    assert (trigger["source_engine_meid"], trigger["source_engine_cmi"]) == (
        "MEID_TRUST_QUARANTINE_MANAGER",
        "vera.TG-QUARANTINE.ENGINE.MANAGER.1_0_0",
    )
    assert trigger["policy_context"] == {**SEED_18["policy_context"], "source_created_at": "2026-06-25T18:00:00Z"}
    assert run.scope["eco_number"] == "ECO-A123" and run.scope["signal_id"] == "SIG-2026-00001472"


def test_dead_letters_list_and_requeue(world: World, engine: Engine) -> None:
    define(engine, job_definition_id="always-fails", tenant_id="acme", handler="engine_handlers:fail_final")
    run = world.new_run(job="always-fails")
    worker = Worker(engine, WorkerSettings(concurrency=1))
    threading.Thread(target=worker.run, daemon=True).start()
    try:
        wait_until(lambda: get_run(engine, run.job_run_id).status.is_terminal, timeout=20, what="the run to end")
    finally:
        worker.stop()
        worker.wait_stopped(10)
    h = world.headers("acme", Role.OPERATOR)
    letters = world.client.get(f"{API}/dead-letters", headers=h).json()["items"]
    assert [d["job_run_id"] for d in letters] == [run.job_run_id]
    assert world.client.get(f"{API}/dead-letters", headers=world.headers("other", Role.OPERATOR)).json()["items"] == []
    requeued = world.client.post(f"{API}/dead-letters/{run.job_run_id}/requeue", headers=h)
    assert requeued.status_code == 200 and requeued.json()["status"] == "SCHEDULED"
    assert world.client.get(f"{API}/dead-letters", headers=h).json()["items"] == []


def test_tokens_are_shown_once_and_a_revoked_one_stops_working_at_once(world: World) -> None:
    h = world.headers("acme", Role.ADMIN)
    made = world.client.post(f"{API}/tokens", json={"role": "auditor", "label": "q3 audit"}, headers=h)
    assert made.status_code == 201
    raw, token_id = made.json()["token"], made.json()["info"]["token_id"]
    listed = world.client.get(f"{API}/tokens", headers=h).text
    secret = raw.split("_", 2)[2]  # jgt_<id>_<secret>; the secret itself may hold "_"
    assert token_id in listed and raw not in listed and secret not in listed
    theirs = {"Authorization": f"Bearer {raw}"}
    assert world.client.get(f"{API}/runs", headers=theirs).status_code == 200
    assert world.client.delete(f"{API}/tokens/{token_id}", headers=h).status_code == 204
    assert world.client.get(f"{API}/runs", headers=theirs).status_code == 401
    bad_role = world.client.post(f"{API}/tokens", json={"role": "superuser"}, headers=h)
    assert bad_role.status_code == 422 and bad_role.json()["field"] == "role"
    foreign = world.client.delete(f"{API}/tokens/{world.token_ids[('other', Role.ADMIN)]}", headers=h)
    assert foreign.status_code == 404  # another tenant's token answers like a missing one


def test_expired_tokens_are_refused(world: World) -> None:
    from datetime import timedelta

    from jobgate.service import tokens
    from jobgate.testing import FakeClock

    made = tokens.create(world.engine, tenant_id="acme", role="admin", actor="t", expires_in=timedelta(seconds=1))
    world.engine.clock = FakeClock(world.engine.clock.now() + timedelta(seconds=2))
    assert world.client.get(f"{API}/runs", headers={"Authorization": f"Bearer {made.token}"}).status_code == 401


def test_workers_report_the_execution_mode_apart_from_registrations(world: World) -> None:
    body = world.client.get(f"{API}/workers", headers=world.headers("acme", Role.CONSUMER)).json()
    assert body["execution_mode"] == "standalone" and body["visibility_state"] == "no_registrations"
    assert body["execution_availability"] == "unavailable" and body["total"] == 0


def test_workers_show_neither_hosts_nor_pids_and_only_the_callers_definitions(world: World) -> None:
    """Seed 001 worker visibility: no process id, no host; a worker's advertised capabilities are
    shown for the caller's tenant only."""
    now = world.engine.clock.now()
    advertised = {
        "sha256:a": {"tenant": "acme", "job": "acme-report", "runnable": False, "reason": "runner 'etl' is missing"},
        "sha256:b": {"tenant": "other", "job": "their-secret-job", "runnable": False, "reason": "no module 'x'"},
        "sha256:c": {"tenant": "acme", "job": "acme-ok", "runnable": True},
    }
    with world.engine.store.write() as tx:
        tx.worker_heartbeat(
            WorkerBeat("worker-0123456789ab", "secret-host.internal", 48213, 2, ("default",), now, advertised)
        )
    response = world.client.get(f"{API}/workers", headers=world.headers("acme", Role.CONSUMER))
    (item,) = response.json()["items"]
    assert item["worker_id"] == "worker-0123456789ab" and item["cannot_run"] == ["acme-report"]
    assert (
        "secret-host" not in response.text and "48213" not in response.text and "their-secret-job" not in response.text
    )


def test_doctor_and_readiness(world: World) -> None:
    world.new_run()
    doctor = world.client.get(f"{API}/doctor", headers=world.headers("acme", Role.OPERATOR)).json()
    checks = {c["name"]: c for c in doctor["checks"]}
    assert checks["database"]["status"] == checks["migrations"]["status"] == "green"
    assert "1 due" in checks["queue"]["detail"]
    assert checks["workers"]["status"] in ("amber", "red")  # nothing executes this test's runs
    other = world.client.get(f"{API}/doctor", headers=world.headers("other", Role.OPERATOR)).json()
    assert {c["name"]: c for c in other["checks"]}["queue"]["detail"] == "no run is waiting"
    ready = world.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True


def test_a_loop_whose_every_pass_fails_is_amber_on_readyz(world: World) -> None:
    """Found by a review: the SLA monitor failed every pass for minutes (one run's parameter)
    while ``/readyz`` said ``green, alive``. Alive is not working: three failed passes in a row
    make it amber (the node still serves: ready stays true)."""
    state: Any = world.client.app.state.server  # type: ignore[attr-defined]
    state.loops = lambda: {"sla-monitor": True, "scheduler": True}
    state.loops_failing = lambda: {"sla-monitor": 3, "scheduler": 2}
    checks = {c["name"]: c for c in world.client.get("/readyz").json()["checks"]}
    assert checks["sla-monitor"]["status"] == "amber" and "last 3 passes failed" in checks["sla-monitor"]["detail"]
    assert checks["scheduler"] == {"name": "scheduler", "status": "green", "detail": "alive"}


def test_readyz_answers_red_in_time_when_the_database_never_answers_and_healthz_still_answers(
    world: World, monkeypatch: Any
) -> None:
    """Found by a review: a database that accepts connections and never answers held /readyz
    for ever, and the waiting requests held every thread /healthz needed."""
    import threading

    from jobgate.api.routes import health

    released = threading.Event()
    monkeypatch.setattr(health, "READY_SECONDS", 0.2)
    monkeypatch.setattr(health, "_readiness", lambda state: released.wait(10) and [])  # a stalled read
    try:
        ready = world.client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"] == [
            {"name": "database", "status": "red", "detail": "no answer within 0.2 s"}
        ]
        assert world.client.get("/healthz").status_code == 200
    finally:
        released.set()
    assert health.healthz.__code__.co_flags & 0x80  # a coroutine: on the event loop, never the pool


def test_metrics_are_the_callers_tenants(world: World) -> None:
    world.new_run()
    world.new_run(tenant="other", job="shared-job")
    text = world.client.get("/metrics", headers=world.headers("acme", Role.OPERATOR)).text
    assert 'jobgate_queue_due{tenant="acme"} 1.0' in text
    assert 'tenant="other"' not in text
    assert "jobgate_http_requests_total" in text


def test_definitions_apply_refuses_a_raw_handler_and_stores_nothing(world: World) -> None:
    h = world.headers("acme", Role.ADMIN)
    doc = {"job_definition_id": f"x-{uuid.uuid4().hex[:6]}", "job_class": "MAINTENANCE_JOB", "handler": "os:getcwd"}
    refused = world.client.post(f"{API}/definitions", json={"definitions": [doc]}, headers=h)
    assert refused.status_code == 422 and refused.json()["field"] == "definitions[0].handler"
    listed = world.client.get(f"{API}/definitions", headers=h).json()["items"]
    assert doc["job_definition_id"] not in [d["job_definition_id"] for d in listed]


def test_safe_mode_through_the_api(world: World) -> None:
    admin, reader = world.headers("acme", Role.ADMIN), world.headers("acme", Role.CONSUMER)
    assert world.client.get(f"{API}/safe-mode", headers=reader).json()["active"] is False
    on = world.client.post(f"{API}/safe-mode", json={"active": True, "reason": "incident 7"}, headers=admin).json()
    assert (on["active"], on["reason"], on["by"]) == (True, "incident 7", world.actor("acme", Role.ADMIN))
    again = world.client.post(f"{API}/safe-mode", json={"active": True, "reason": "x"}, headers=admin)
    assert again.status_code == 409
    refused = world.client.post(f"{API}/safe-mode", json={"active": False, "reason": "done"}, headers=reader)
    assert refused.status_code == 403  # admins only
    assert world.client.get(f"{API}/safe-mode", headers=world.headers("other", Role.ADMIN)).json()["active"] is False
    off = world.client.post(f"{API}/safe-mode", json={"active": False, "reason": "done"}, headers=admin).json()
    assert (off["active"], off["reason"]) == (False, "done")


def test_a_definitions_own_schedule_is_refused_to_schedule_writes_at_both_doors(world: World) -> None:
    """409 at ``/api/v1/schedules`` and at seed 004's ``/schedules``: the rhythm a definition
    declares changes with a new approved version only."""
    job = define(world.engine, job_definition_id=f"acme-kept-{uuid.uuid4().hex[:6]}", tenant_id="acme",
                 trigger_type="cron", schedule_expression="0 * * * *")  # fmt: skip
    h = world.headers("acme", Role.OPERATOR)
    v1 = {"schedule": {"id": job, "job": job, "cron": "*/30 * * * *"}}
    assert world.client.post(f"{API}/schedules", json=v1, headers=h).status_code == 409
    seed = {"id": job, "scenario": job, "schedule": "*/30 * * * *", "params": {}}
    refused = world.client.post("/schedules", json=seed, headers=h)
    assert refused.status_code == 409 and "kept by definition" in refused.text
    assert world.client.delete(f"{API}/schedules/{job}", headers=h).status_code == 409
    assert world.client.delete(f"/schedules/{job}", headers=h).status_code == 409
    listed = {s["schedule_id"]: s for s in world.client.get(f"{API}/schedules", headers=h).json()["items"]}
    assert listed[job]["owner"] == "definition" and listed[job]["state"] == "active"


def test_misses_are_listed_paged_filtered_and_a_run_shows_its_slot(world: World) -> None:
    from datetime import timedelta

    from jobgate.runtime.scheduler import Scheduler

    job = define(world.engine, job_definition_id=f"acme-hourly-{uuid.uuid4().hex[:6]}", tenant_id="acme",
                 trigger_type="cron", schedule_expression="0 * * * *")  # fmt: skip
    with world.engine.store.read() as tx:
        mark = tx.schedule_get("acme", job).watermark  # type: ignore[union-attr]
    hour = mark.replace(minute=0, second=0, microsecond=0)
    # Five hourly slots after the watermark, the latest 30 minutes late: 4 coalesced, 1 run.
    Scheduler(world.engine, owner="api-test").tick(hour + timedelta(hours=5, minutes=30))
    h = world.headers("acme", Role.OPERATOR)
    first = world.client.get(f"{API}/schedules/{job}/misses", params={"limit": 3}, headers=h).json()
    assert [m["reason"] for m in first["items"]] == ["coalesced"] * 3 and first["next_cursor"]
    rest = world.client.get(
        f"{API}/schedules/{job}/misses", params={"limit": 3, "cursor": first["next_cursor"]}, headers=h
    ).json()
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None
    assert rest["items"][0]["fire_at"] > first["items"][-1]["fire_at"]
    none = world.client.get(f"{API}/schedules/{job}/misses", params={"reason": "refused"}, headers=h).json()
    assert none["items"] == []
    bad = world.client.get(f"{API}/schedules/{job}/misses", params={"reason": "bogus"}, headers=h)
    assert bad.status_code == 422 and "reason" in str(bad.json())
    other = world.headers("other", Role.OPERATOR)
    assert world.client.get(f"{API}/schedules/{job}/misses", headers=other).status_code == 404
    runs = world.client.get(f"{API}/runs", params={"job_definition_id": job}, headers=h).json()["items"]
    (run,) = runs
    assert run["schedule_id"] == job and run["slot_at"] > rest["items"][0]["fire_at"]  # the latest slot ran
    listed = {s["schedule_id"]: s for s in world.client.get(f"{API}/schedules", headers=h).json()["items"]}
    assert listed[job]["owner"] == "definition" and listed[job]["state"] == "active"
