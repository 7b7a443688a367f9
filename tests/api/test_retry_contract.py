"""Seed 001's run retry contract (``service.retries``), at both of its paths, on SQLite and
PostgreSQL: a terminal run is retried at most once under an id derived from the tenant and
the source run; the first request is 201 with one ``run.retried`` audit entry, a repeat (or the
loser of a race) is 200 adding nothing; 404 / 409 / 400 store nothing; lineage is derived from
``retry_of`` alone."""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from tests.api.conftest import ACME_JOB, SHARED_JOB, World

from jobgate.core.idempotency import retry_run_id
from jobgate.core.lineage import retry_source
from jobgate.core.models import DefinitionStatus, JobRun, Scope
from jobgate.core.tokens import Role
from jobgate.service import audit, control, schedules
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection

RUNS, SCHEDULER = "/api/v1/runs", "/api/v1/scheduler/runs"


def admin(w: World, tenant: str = "acme") -> dict[str, str]:
    return w.headers(tenant, Role.ADMIN)


def counts(w: World) -> tuple[int, int]:
    """Every run and every audit entry stored, in every tenant."""
    with w.engine.store.read() as tx:
        conn = connection(tx)
        runs = conn.execute(text("SELECT count(*) FROM job_runs")).scalar_one()
        entries = conn.execute(text("SELECT count(*) FROM audit_log")).scalar_one()
    return int(runs), int(entries)


def retried_entries(w: World, target: str) -> list[Any]:
    return [
        e
        for e in audit.search(w.engine, audit.AuditFilter(tenant_id="acme", action="run.retried"))
        if e.event.target_id == target
    ]


def scheduled_terminal_run(w: World) -> tuple[JobRun, str]:
    """A cancelled run that an interval schedule of acme made (its slot names the schedule)."""
    sid = w.schedule()
    with w.engine.store.read() as tx:
        stored = tx.schedule_get("acme", sid)
    assert stored is not None
    at = w.engine.clock.now()
    slot = f"TGTRIG-{sid}@{at.isoformat()}"
    request = schedules.fire_request(
        stored.schedule, at=at, actor="scheduler", reason="test", trigger_id=slot, slot=slot
    )
    run = w.engine.submit(request, actor="scheduler").run
    return control.cancel_run(w.engine, run.job_run_id, actor="test", tenant_id="acme"), sid


def test_the_retry_id_is_derived_from_the_tenant_and_the_source_run() -> None:
    digest = hashlib.sha256(b"jobgate.run-retry.v1\nacme\nTGJOBRUN-x").hexdigest()[:32]
    assert retry_run_id("acme", "TGJOBRUN-x") == f"TGJOBRUN-{digest}"
    assert retry_run_id("other", "TGJOBRUN-x") != retry_run_id("acme", "TGJOBRUN-x")


def test_only_a_retrys_own_trigger_names_a_source() -> None:
    made = {"trigger_type": "manual", "request_id": "retry-of:TGJOBRUN-a", "payload": {"retry_of": "TGJOBRUN-a"}}
    assert retry_source(made) == "TGJOBRUN-a"
    assert retry_source({**made, "trigger_type": "event"}) is None  # an event's payload field
    assert retry_source({**made, "request_id": "api:key"}) is None
    assert retry_source({"payload": "retry_of"}) is None and retry_source(None) is None


@pytest.mark.parametrize("prefix", [RUNS, SCHEDULER])
def test_first_retry_is_201_then_200_with_the_same_run_and_one_audit_entry(world: World, prefix: str) -> None:
    source = scheduled_terminal_run(world)[0] if prefix == SCHEDULER else world.terminal_run()
    before = counts(world)
    first = world.client.post(f"{prefix}/{source.job_run_id}/retry", headers=admin(world))
    assert first.status_code == 201, first.text
    made = first.json()["run"]
    assert first.json()["created"] is True
    assert made["job_run_id"] == retry_run_id("acme", source.job_run_id)
    assert made["retry_of"] == source.job_run_id
    (entry,) = retried_entries(world, made["job_run_id"])
    assert entry.event.actor == world.actor("acme", Role.ADMIN)
    assert entry.event.payload["retry_of"] == source.job_run_id
    assert counts(world) == (before[0] + 1, before[1] + 1)

    after_first = counts(world)
    for path in (f"{RUNS}/{source.job_run_id}/retry", f"{prefix}/{source.job_run_id}/retry"):
        again = world.client.post(path, headers=admin(world))
        assert again.status_code == 200, again.text
        assert again.json() == {"created": False, "run": made}
    assert counts(world) == after_first
    shown = world.client.get(f"{RUNS}/{made['job_run_id']}", headers=admin(world)).json()
    assert shown["run"]["retry_of"] == source.job_run_id


def test_unknown_or_another_tenants_run_is_404_and_stores_nothing(world: World) -> None:
    other = world.new_run("other", job=SHARED_JOB)
    theirs = control.cancel_run(world.engine, other.job_run_id, actor="test", tenant_id="other")
    before = counts(world)
    for prefix in (RUNS, SCHEDULER):
        for run_id in ("TGJOBRUN-nothere", theirs.job_run_id):
            refused = world.client.post(f"{prefix}/{run_id}/retry", headers=admin(world))
            assert refused.status_code == 404, refused.text
    assert counts(world) == before


def test_a_run_not_terminal_is_409_and_stores_nothing(world: World) -> None:
    pending = world.new_run()
    running = world.running_run()
    before = counts(world)
    for run in (pending, running):
        refused = world.client.post(f"{RUNS}/{run.job_run_id}/retry", headers=admin(world))
        assert refused.status_code == 409, refused.text
        assert refused.json()["field"] == "status"
    assert counts(world) == before


def test_a_retired_definition_is_400_naming_it_and_stores_nothing(world: World) -> None:
    source = world.terminal_run()
    with world.engine.store.write() as tx:
        tx.definition_set_status("acme", ACME_JOB, DefinitionStatus.RETIRED, world.engine.clock.now())
    before = counts(world)
    refused = world.client.post(f"{RUNS}/{source.job_run_id}/retry", headers=admin(world))
    assert refused.status_code == 400, refused.text
    assert refused.json()["field"] == "job_definition_id" and "retired" in refused.json()["message"]
    assert counts(world) == before


def test_the_scheduler_path_refuses_a_run_of_no_schedule_or_of_a_deleted_one(world: World) -> None:
    manual_run = world.terminal_run()
    scheduled, sid = scheduled_terminal_run(world)
    with world.engine.store.write() as tx:
        assert tx.schedule_delete("acme", sid)
    before = counts(world)
    for run in (manual_run, scheduled):
        refused = world.client.post(f"{SCHEDULER}/{run.job_run_id}/retry", headers=admin(world))
        assert refused.status_code == 400, refused.text
        assert refused.json()["field"] == "schedule_id"
    assert counts(world) == before
    # the general path does not ask about schedules
    assert world.client.post(f"{RUNS}/{scheduled.job_run_id}/retry", headers=admin(world)).status_code == 201


@pytest.mark.parametrize("prefix", [RUNS, SCHEDULER])
def test_two_concurrent_first_requests_make_one_retry(world: World, prefix: str) -> None:
    source = scheduled_terminal_run(world)[0] if prefix == SCHEDULER else world.terminal_run()
    before = counts(world)
    barrier = threading.Barrier(2)
    answers: list[Any] = []
    lock = threading.Lock()

    def ask() -> None:
        barrier.wait()
        got = world.client.post(f"{prefix}/{source.job_run_id}/retry", headers=admin(world))
        with lock:
            answers.append(got)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.status_code for a in answers) == [200, 201], [a.text for a in answers]
    assert len({a.json()["run"]["job_run_id"] for a in answers}) == 1
    assert counts(world) == (before[0] + 1, before[1] + 1)
    assert len(retried_entries(world, retry_run_id("acme", source.job_run_id))) == 1


def test_a_retry_recorded_before_the_contract_is_found_through_retry_of(world: World) -> None:
    """A retry made before (a generated id, the payload naming its source) gets ``retry_of``
    from migration 0024's backfill, and is then the answer: 200, nothing added."""
    source = world.terminal_run()
    by = world.actor("acme", Role.ADMIN)
    old = SubmitRequest(
        ACME_JOB,
        scope=Scope(tenant_id="acme"),
        requested_by=by,
        request_id=f"retry-of:{source.job_run_id}",
        payload={"retry_of": source.job_run_id},
    )
    legacy = world.engine.submit(old, actor=by).run
    assert legacy.retry_of is None and legacy.job_run_id != retry_run_id("acme", source.job_run_id)
    with world.engine.store.write() as tx:
        backfill_0024()(connection(tx))
    before = counts(world)
    found = world.client.post(f"{RUNS}/{source.job_run_id}/retry", headers=admin(world))
    assert found.status_code == 200, found.text
    assert found.json()["run"]["job_run_id"] == legacy.job_run_id
    assert found.json()["run"]["retry_of"] == source.job_run_id
    assert counts(world) == before


def backfill_0024() -> Any:
    import jobgate.store.migrations.versions as versions

    path = Path(versions.__path__[0]) / "0024_run_retry_of.py"
    spec = importlib.util.spec_from_file_location("migration_0024", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._backfill


def test_a_further_retry_is_a_retry_of_the_retry_and_lineage_follows_retry_of(world: World) -> None:
    source, _ = scheduled_terminal_run(world)
    first = world.client.post(f"{SCHEDULER}/{source.job_run_id}/retry", headers=admin(world)).json()["run"]
    control.cancel_run(world.engine, first["job_run_id"], actor="test", tenant_id="acme")
    # the retry belongs to its source's schedule, so the scheduler path retries it too
    second = world.client.post(f"{SCHEDULER}/{first['job_run_id']}/retry", headers=admin(world))
    assert second.status_code == 201, second.text
    assert second.json()["run"]["job_run_id"] == retry_run_id("acme", first["job_run_id"])
    assert second.json()["run"]["retry_of"] == first["job_run_id"]

    for prefix in (RUNS, SCHEDULER):
        children = world.client.get(f"{prefix}/{source.job_run_id}/children", headers=admin(world)).json()
        assert [(e["kind"], e["run"]["job_run_id"]) for e in children["edges"]] == [("retry", first["job_run_id"])]
        parents = world.client.get(f"{prefix}/{second.json()['run']['job_run_id']}/parents", headers=admin(world))
        assert [e["run"]["job_run_id"] for e in parents.json()["edges"]] == [first["job_run_id"]]
        none = world.client.get(f"{prefix}/{source.job_run_id}/parents", headers=admin(world)).json()
        assert none["edges"] == [] and none["direction"] == "parents"
        # another tenant sees none of it
        hidden = world.client.get(f"{prefix}/{source.job_run_id}/children", headers=admin(world, "other"))
        assert hidden.status_code == 404


def test_retry_of_is_covered_by_the_run_seal(world: World) -> None:
    """The column repeats the sealed trigger's ``retry_of``; verification compares the two."""
    source = world.terminal_run()
    made = world.client.post(f"{RUNS}/{source.job_run_id}/retry", headers=admin(world)).json()["run"]
    control.cancel_run(world.engine, made["job_run_id"], actor="test", tenant_id="acme")
    (report,) = audit.verify_records(world.engine, ["acme"])
    assert report.ok, [f.message() for f in report.findings]
    with world.engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE job_runs SET retry_of = :x WHERE job_run_id = :r"),
            {"x": "TGJOBRUN-forged", "r": made["job_run_id"]},
        )
    (report,) = audit.verify_records(world.engine, ["acme"])
    assert [(f.record_id, f.column) for f in report.findings] == [(made["job_run_id"], "retry_of")]
