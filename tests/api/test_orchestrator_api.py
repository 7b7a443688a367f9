"""Seed 004's API as a compatibility surface, each route checked against the seed's text, on
both backends: the seed's paths for API callers (a bearer token), ``/api/orchestrator`` for
anyone, the same rules and services as ``/api/v1`` (so: refused means nothing stored)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count, define

from jobgate.core.tokens import Role
from jobgate.definitions.loader import parse_definition_text

# The seed's scenario file, its runner one this machine has (the seed's is tdtpcli).
SCENARIO = """\
orchestrator:
  name: export-payroll
  description: "Payroll export by period"
  runner: py
  permissions: [etl, enc]
  params:
    - name: period
      required: true
      pattern: '^\\d{4}-\\d{2}$'

# Below: the body the runner executes; {{.period}} substituted before it runs.
print("payroll for {{.period}}")
"""
# The same without ``permissions``: no licence is configured here, so the trust gate would refuse.
UNGATED = SCENARIO.replace("  permissions: [etl, enc]\n", "")


def load_scenario(world: World, text: str = UNGATED, tenant: str = "acme") -> str:
    loaded = parse_definition_text(text, "export-payroll.yaml", world.engine.config)
    world.engine.apply_definitions([loaded], tenant_id=tenant)
    return loaded.definition.job_definition_id


def admin(world: World, tenant: str = "acme") -> dict[str, str]:
    return world.headers(tenant, Role.ADMIN)


@pytest.mark.parametrize("prefix", ["", "/api/orchestrator"])
def test_nothing_runs_until_the_loaded_content_is_approved(world: World, prefix: str) -> None:
    """Seed 004 "Scenario approval": run is refused with 403 until an admin approves the exact
    loaded content; approve hashes what is loaded (no checksum is taken from the caller)."""
    name = load_scenario(world)
    h = admin(world)
    runs_before = count(world.engine, "job_runs")
    refused = world.client.post(f"{prefix}/scenarios/{name}/run", json={"params": {"period": "2026-06"}}, headers=h)
    assert refused.status_code == 403, refused.text
    assert count(world.engine, "job_runs") == runs_before  # nothing stored

    status = world.client.get(f"{prefix}/scenarios/{name}/approval", headers=h).json()
    assert status["matches"] is False and status["approval"] is None

    # A reviewer may pin what they read: content other than the loaded one is refused, not approved.
    stale = world.client.post(f"{prefix}/scenarios/{name}/approve", json={"sha256": "0" * 64}, headers=h)
    assert stale.status_code == 409 and stale.json()["field"] == "sha256", stale.text
    assert world.client.get(f"{prefix}/scenarios/{name}/approval", headers=h).json()["approval"] is None
    bad = world.client.post(f"{prefix}/scenarios/{name}/approve", json={"sha256": "not-a-digest"}, headers=h)
    assert bad.status_code == 422
    pinned = world.digest(name).removeprefix("sha256:")
    approved = world.client.post(f"{prefix}/scenarios/{name}/approve", json={"sha256": pinned}, headers=h)
    assert approved.status_code == 200, approved.text
    approved = world.client.post(f"{prefix}/scenarios/{name}/approve", headers=h)  # the seed's form: no body
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert {"name", "sha256", "approved_by", "approved_at", "enabled"} <= set(body)
    assert body["name"] == name and body["enabled"] is True
    assert body["approved_by"] == world.actor("acme", Role.ADMIN)
    assert body["sha256"] == world.digest(name).removeprefix("sha256:")

    status = world.client.get(f"{prefix}/scenarios/{name}/approval", headers=h).json()
    assert status["matches"] is True and status["approval"]["sha256"] == body["sha256"]

    ran = world.client.post(f"{prefix}/scenarios/{name}/run", json={"params": {"period": "2026-06"}}, headers=h)
    assert ran.status_code == 201, ran.text
    job = world.client.get(f"{prefix}/jobs/{ran.json()['job_id']}", headers=h).json()
    assert job["scenario"] == name and job["runner"] == "py" and job["status"] == "pending"
    assert job["params"] == {"period": "2026-06"} and job["sha256"] == body["sha256"]


def test_an_approved_scenario_still_meets_its_trust_gate(world: World) -> None:
    """Seed 004 "Trust gates": its permissions must be covered by the licence; none is here."""
    name = load_scenario(world, SCENARIO)
    h = admin(world)
    assert world.client.post(f"/scenarios/{name}/approve", headers=h).status_code == 200
    before = count(world.engine, "job_runs")
    refused = world.client.post(f"/scenarios/{name}/run", json={"params": {"period": "2026-06"}}, headers=h)
    assert refused.status_code == 403 and refused.json()["error"] == "trust_gate_refused", refused.text
    assert count(world.engine, "job_runs") == before


def test_an_edited_scenario_loses_its_approval(world: World) -> None:
    """ "Editing an already-approved scenario invalidates the approval" — including its runner."""
    name = load_scenario(world)
    h = admin(world)
    assert world.client.post(f"/scenarios/{name}/approve", headers=h).status_code == 200
    load_scenario(world, UNGATED.replace("Payroll export", "Payroll export (edited)"))
    status = world.client.get(f"/scenarios/{name}/approval", headers=h).json()
    assert status["matches"] is False and "content" in status["changed"]
    before = count(world.engine, "job_runs")
    refused = world.client.post(f"/scenarios/{name}/run", json={"params": {"period": "2026-06"}}, headers=h)
    assert refused.status_code == 403 and count(world.engine, "job_runs") == before


def test_scenarios_list_and_definition(world: World) -> None:
    name = load_scenario(world)
    h = world.headers("acme", Role.CONSUMER)
    listed = {s["name"]: s for s in world.client.get("/scenarios", headers=h).json()}
    assert listed[name]["runner"] == "py" and listed[name]["description"] == "Payroll export by period"
    assert listed[name]["approved"] is False and listed[ACME_JOB]["approved"] is True
    one = world.client.get(f"/scenarios/{name}", headers=h).json()
    assert one["content"] == UNGATED and one["params"][0]["name"] == "period"
    # another tenant's scenario is not there at all
    assert world.client.get(f"/scenarios/{name}", headers=world.headers("other", Role.ADMIN)).status_code == 404
    assert name not in {
        s["name"] for s in world.client.get("/scenarios", headers=world.headers("other", Role.ADMIN)).json()
    }


def test_a_param_outside_its_pattern_is_refused_naming_it(world: World) -> None:
    name = load_scenario(world)
    h = admin(world)
    world.client.post(f"/scenarios/{name}/approve", headers=h)
    before = count(world.engine, "job_runs")
    bad = world.client.post(f"/scenarios/{name}/run", json={"params": {"period": "June"}}, headers=h)
    assert bad.status_code == 422 and bad.json()["field"].endswith("period"), bad.text
    assert count(world.engine, "job_runs") == before


def test_roles_follow_the_seed_table(world: World) -> None:
    """consumer lists, activator runs, admin approves; a consumer may not run or approve."""
    name = load_scenario(world)
    consumer, activator = world.headers("acme", Role.CONSUMER), world.headers("acme", Role.ACTIVATOR)
    assert world.client.get("/scenarios", headers=consumer).status_code == 200
    assert world.client.post(f"/scenarios/{name}/approve", headers=activator).status_code == 403
    assert world.client.post(f"/scenarios/{name}/approve", headers=admin(world)).status_code == 200
    assert (
        world.client.post(
            f"/scenarios/{name}/run", json={"params": {"period": "2026-01"}}, headers=consumer
        ).status_code
        == 403
    )
    assert (
        world.client.post(
            f"/scenarios/{name}/run", json={"params": {"period": "2026-01"}}, headers=activator
        ).status_code
        == 201
    )
    assert world.client.get("/tokens", headers=activator).status_code == 403
    assert world.client.get("/scenarios").status_code == 401  # auth on every route but /healthz


def test_cancel_and_stop_each_valid_in_one_state_own_jobs_only(world: World) -> None:
    """Seed 004 "Stopping and cancelling jobs": cancel a pending job, stop a running one, the
    wrong one is 409; only the submitter or an admin; cancelled_by/cancelled_at recorded."""
    activator = world.headers("acme", Role.ACTIVATOR)
    mine = world.new_run(by=world.actor("acme", Role.ACTIVATOR), n="1")
    theirs = world.new_run(n="2")
    assert world.client.post(f"/jobs/{theirs.job_run_id}/cancel", headers=activator).status_code == 403
    assert world.client.post(f"/jobs/{mine.job_run_id}/stop", headers=activator).status_code == 409
    done = world.client.post(f"/jobs/{mine.job_run_id}/cancel", headers=activator)
    assert done.status_code == 200, done.text
    job = done.json()
    assert job["status"] == "cancelled" and job["cancelled_by"] == world.actor("acme", Role.ACTIVATOR)
    assert job["cancelled_at"] is not None
    running = world.running_run()
    assert world.client.post(f"/jobs/{running.job_run_id}/cancel", headers=admin(world)).status_code == 409
    stopped = world.client.post(f"/jobs/{running.job_run_id}/stop", headers=admin(world))
    assert stopped.status_code == 202 and stopped.json()["status"] == "running"


def test_jobs_results_log_and_artifact(world: World) -> None:
    h = world.headers("acme", Role.CONSUMER)
    run = world.terminal_run()
    world.log_for(run, "hello\nworld\n")
    path = world.artifact_for(run, b"payroll,2026-06\n")
    listed = world.client.get("/jobs", headers=h).json()
    assert run.job_run_id in {j["id"] for j in listed} and len(listed) <= 100
    job = world.client.get(f"/jobs/{run.job_run_id}", headers=h).json()
    assert job["log"] == "hello\nworld\n" and job["status"] == "cancelled"
    assert job["artifact_sha256"] == hashlib.sha256(b"payroll,2026-06\n").hexdigest()
    got = world.client.get(f"/jobs/{run.job_run_id}/artifact", headers=h)
    assert got.status_code == 200 and got.content == b"payroll,2026-06\n"
    assert got.headers["content-disposition"] == f'attachment; filename="{path.name}"'
    no_output = world.terminal_run()
    assert world.client.get(f"/jobs/{no_output.job_run_id}/artifact", headers=h).status_code == 404
    assert world.client.get(f"/jobs/{no_output.job_run_id}", headers=h).json()["log"] == ""
    results = world.client.get(f"/results/{ACME_JOB}", headers=h).json()
    assert {run.job_run_id, no_output.job_run_id} <= {j["id"] for j in results}
    assert all(j["scenario"] == ACME_JOB for j in results)
    other = world.headers("other", Role.ADMIN)
    assert world.client.get(f"/jobs/{run.job_run_id}", headers=other).status_code == 404
    assert world.client.get(f"/results/{ACME_JOB}", headers=other).status_code == 404


def test_schedules_add_pause_resume_delete(world: World) -> None:
    """The seed's schedule seed entry posted as is; PATCH enable/disable; DELETE."""
    h = admin(world)
    name = load_scenario(world)
    entry = {
        "id": "monthly-payroll",
        "scenario": name,
        "schedule": "0 2 1 * *",
        "params": {"period": "{{current_month}}"},
    }
    unapproved = world.client.post("/schedules", json=entry, headers=h)
    assert unapproved.status_code == 422 and count(world.engine, "schedules") == 0, unapproved.text
    world.client.post(f"/scenarios/{name}/approve", headers=h)
    made = world.client.post("/schedules", json=entry, headers=h)
    assert made.status_code == 201, made.text
    assert made.json()["schedule"] == "0 2 1 * *" and made.json()["enabled"] is True
    assert world.client.patch("/schedules/monthly-payroll/disable", headers=h).json()["enabled"] is False
    assert world.client.patch("/schedules/monthly-payroll/enable", headers=h).json()["enabled"] is True
    assert "monthly-payroll" in {s["id"] for s in world.client.get("/schedules", headers=h).json()}
    bad = world.client.post("/schedules", json={**entry, "id": "broken", "schedule": "61 * * * *"}, headers=h)
    assert bad.status_code == 422 and bad.json()["field"] == "schedule", bad.text
    assert world.client.patch("/schedules/broken/enable", headers=h).status_code == 404
    manual_only = load_scenario(
        world,
        UNGATED.replace("export-payroll", "by-hand").replace("  runner: py", "  runner: py\n  also_triggered_by: []"),
    )
    world.client.post(f"/scenarios/{manual_only}/approve", headers=h)
    refused = world.client.post("/schedules", json={**entry, "id": "by-hand", "scenario": manual_only}, headers=h)
    assert refused.status_code == 422 and refused.json()["field"] == "scenario", refused.text
    assert world.client.delete("/schedules/monthly-payroll", headers=h).status_code == 204
    assert world.client.patch("/schedules/monthly-payroll/enable", headers=h).status_code == 404


def test_tokens_issue_with_a_scenario_allowlist(world: World) -> None:
    """Seed 004 "Issuing a token": name/role/scenarios, the raw value shown once, and the token
    limited to its scenarios; ``scenarios: []`` grants all of them."""
    name = load_scenario(world)
    h = admin(world)
    issued = world.client.post(
        "/tokens", json={"name": "branch-runner", "role": "activator", "scenarios": [name]}, headers=h
    )
    assert issued.status_code == 201, issued.text
    body: dict[str, Any] = issued.json()
    assert body["note"] == "store this token now — it is not retrievable later"
    assert body["token"] not in world.client.get("/tokens", headers=h).text  # never listed again
    listed = {t["id"]: t for t in world.client.get("/tokens", headers=h).json()}
    assert listed[body["id"]]["scenarios"] == [name] and listed[body["id"]]["name"] == "branch-runner"
    limited = {"Authorization": f"Bearer {body['token']}"}
    assert [s["name"] for s in world.client.get("/scenarios", headers=limited).json()] == [name]
    assert world.client.get(f"/scenarios/{ACME_JOB}", headers=limited).status_code == 404
    everything = world.client.post("/tokens", json={"name": "all", "role": "consumer", "scenarios": []}, headers=h)
    assert listed.get(everything.json()["id"]) is None
    all_token = {"Authorization": f"Bearer {everything.json()['token']}"}
    assert len(world.client.get("/scenarios", headers=all_token).json()) > 1
    assert world.client.delete(f"/tokens/{body['id']}", headers=h).status_code == 204
    assert world.client.get("/scenarios", headers=limited).status_code == 401
    refused = world.client.post("/tokens", json={"name": "x", "role": "superuser"}, headers=h)
    assert refused.status_code == 422 and refused.json()["field"].endswith("role")


def test_the_request_workflow(world: World) -> None:
    """Seed 004 "Project-request workflow": propose (consumer), test, approve -> job_id, or
    reject with a note; a consumer sees only its own requests."""
    consumer, h = world.headers("acme", Role.CONSUMER), admin(world)
    proposed = world.client.post(
        "/requests", json={"scenario": ACME_JOB, "params": {"n": "7"}, "title": "month end"}, headers=consumer
    )
    assert proposed.status_code == 201, proposed.text
    request = proposed.json()
    assert request["status"] == "pending" and request["scenario"] == ACME_JOB and request["job_id"] is None
    tested = world.client.post(f"/requests/{request['id']}/test", headers=h).json()
    assert tested["admissible"] is True and tested["checks"]
    approved = world.client.post(f"/requests/{request['id']}/approve", headers=h).json()
    assert approved["status"] == "approved" and approved["job_id"]
    assert world.client.get(f"/jobs/{approved['job_id']}", headers=h).json()["params"] == {"n": "7"}

    second = world.client.post("/requests", json={"scenario": ACME_JOB, "title": "again"}, headers=consumer).json()
    runs_before = count(world.engine, "job_runs")
    rejected = world.client.post(f"/requests/{second['id']}/reject", json={"note": "not this month"}, headers=h).json()
    assert rejected["status"] == "rejected" and rejected["note"] == "not this month"
    assert count(world.engine, "job_runs") == runs_before
    assert world.client.post(f"/requests/{second['id']}/approve", headers=h).status_code == 409

    own = world.client.get("/requests", headers=consumer).json()
    assert {r["id"] for r in own} == {request["id"], second["id"]}
    pending = world.client.get("/requests", params={"status": "pending"}, headers=h).json()
    assert request["id"] not in {r["id"] for r in pending}
    assert world.client.get(f"/requests/{request['id']}", headers=world.headers("other", Role.ADMIN)).status_code == 404


def test_a_browser_at_a_shared_path_still_gets_the_console(world: World) -> None:
    """``/requests`` and ``/schedules`` are console pages too: a browser (HTML, no token) gets
    the console; a script with a token gets the API."""
    page = world.client.get("/requests", headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code in (200, 303) and "json" not in page.headers.get("content-type", "")
    api = world.client.get("/requests", headers={**admin(world), "Accept": "text/html"})
    assert api.status_code == 200 and api.headers["content-type"].startswith("application/json")
    assert world.client.get("/schedules", headers={"Accept": "application/json"}).status_code == 401


def test_the_surface_is_in_the_openapi_description(world: World) -> None:
    paths = world.client.get("/openapi.json").json()["paths"]
    for path in (
        "/api/orchestrator/scenarios/{name}/run",
        "/api/orchestrator/jobs/{job_id}/stop",
        "/api/orchestrator/schedules/{schedule_id}/enable",
        "/api/orchestrator/requests/{request_id}/reject",
        "/api/trustgate/MEID_TRUST_ROUTE_SCHEDULER/schedule",
        "/api/trustgate/MEID_TRUST_ROUTE_SCHEDULER/workflows/{workflow_run_id}",
    ):
        assert path in paths, path


SEED_ROUTE = "/api/trustgate/MEID_TRUST_ROUTE_SCHEDULER"


def test_seed_000_contract_at_its_own_route(world: World) -> None:
    """Seed 000 §42-44 as written: schedule, cancel, workflow status at the MEID route."""
    h = admin(world)
    body = {
        "job_definition_id": ACME_JOB,
        "scope": {"environment": "production", "region": "eu-north-1", "tenant_id": "acme", "eco_number": "ECO-A123"},
        "trigger": {
            "trigger_type": "manual",
            "requested_by": "auditor@example.com",
            "reason": "External assurance replay sample.",
        },
    }
    scheduled = world.client.post(f"{SEED_ROUTE}/schedule", json=body, headers=h)
    assert scheduled.status_code == 200, scheduled.text
    out = scheduled.json()
    assert set(out) == {"status", "job_run_id", "config_snapshot_id", "scheduled_for"}
    assert out["status"] == "scheduled"
    cancel = {"job_run_id": out["job_run_id"], "reason": "Superseded.", "requested_by": "platform.operator@example.com"}
    cancelled = world.client.post(f"{SEED_ROUTE}/cancel", json=cancel, headers=h).json()
    assert cancelled == {"status": "cancelled", "job_run_id": out["job_run_id"], "audit_required": True}
    flow = world.workflow()
    status = world.client.get(f"{SEED_ROUTE}/workflows/{flow}", headers=h).json()
    assert {"workflow_run_id", "status", "current_step", "completed_steps", "remaining_steps"} <= set(status)
    assert status["workflow_run_id"] == flow
    # the same rules as /api/v1: another tenant's claim is refused and nothing is stored
    before = count(world.engine, "job_runs")
    other = {**body, "scope": {**body["scope"], "tenant_id": "other"}}
    assert world.client.post(f"{SEED_ROUTE}/schedule", json=other, headers=h).status_code == 403
    assert (
        world.client.get(f"{SEED_ROUTE}/workflows/{flow}", headers=world.headers("other", Role.ADMIN)).status_code
        == 404
    )
    assert count(world.engine, "job_runs") == before


@pytest.mark.parametrize(
    ("path", "headers", "target"),
    [
        ("/scenarios", {}, "/api/orchestrator/scenarios"),
        ("/jobs/TGJOBRUN-1/artifact", {"accept": "text/html"}, "/api/orchestrator/jobs/TGJOBRUN-1/artifact"),
        ("/requests", {"authorization": "Bearer x", "accept": "text/html"}, "/api/orchestrator/requests"),
        ("/requests", {"accept": "*/*"}, "/api/orchestrator/requests"),  # a script
        ("/requests/R1/approve", {"accept": "text/html", "cookie": "a=1"}, None),  # a browser form
        ("/schedules", {"accept": "application/json", "cookie": "jobgate_session=s"}, None),  # signed in
        ("/scenariosx", {}, None),
        ("/runs", {}, None),
        ("/api/v1/jobs", {}, None),
        ("/", {}, None),
    ],
)
def test_which_face_a_bare_path_is_for(path: str, headers: dict[str, str], target: str | None) -> None:
    from jobgate.api.routes.orchestrator import SEED_PATH, seed_path
    from jobgate.identity.sessions import SESSION_COOKIE

    headers = {k: v.replace("jobgate_session", SESSION_COOKIE) for k, v in headers.items()}
    assert seed_path(path, headers, session_cookie=SESSION_COOKIE) == target
    if target is not None:
        assert SEED_PATH.match(path)  # the middleware's first look lets it through


def test_asking_again_while_a_stop_stands_records_nothing(world: World) -> None:
    """No worker acts on the run here, so the first stop stands while it is asked again."""
    activator = world.headers("acme", Role.ACTIVATOR)
    run = world.running_run(by=world.actor("acme", Role.ACTIVATOR))
    assert world.client.post(f"/jobs/{run.job_run_id}/stop", headers=activator).status_code == 202
    stops = "action = 'run.stop_requested'"
    before = count(world.engine, "audit_log", stops)
    repeat = world.client.post(f"/jobs/{run.job_run_id}/stop", headers=activator)
    assert repeat.status_code == 202 and repeat.json()["state"] == "RUNNING"
    assert count(world.engine, "audit_log", stops) == before


def test_a_stopped_job_names_who_stopped_it(world: World) -> None:
    """cancelled_by is the person who asked to stop, not the worker that saw the exit."""
    from tests.runtime.runtime_support import running_worker, wait_until

    from jobgate.core.states import RunStatus

    seconds = [{"name": "seconds", "pattern": "[0-9.]+"}]
    define(
        world.engine, job_definition_id="acme-sleep", tenant_id="acme", handler="engine_handlers:sleep", params=seconds
    )
    activator = world.headers("acme", Role.ACTIVATOR)
    made = world.client.post("/scenarios/acme-sleep/run", json={"params": {"seconds": "30"}}, headers=activator)
    job_id = made.json()["job_id"]

    def state() -> str:
        return str(world.client.get(f"/jobs/{job_id}", headers=activator).json()["state"])

    with running_worker(world.engine):
        wait_until(lambda: state() == RunStatus.RUNNING.value, what="the job to start")
        assert world.client.post(f"/jobs/{job_id}/stop", headers=activator).status_code == 202
        wait_until(lambda: state() == RunStatus.CANCELLED.value, what="the job to end cancelled")
    job = world.client.get(f"/jobs/{job_id}", headers=activator).json()
    assert job["status"] == "cancelled" and job["cancelled_by"] == world.actor("acme", Role.ACTIVATOR)
    assert job["cancelled_at"] is not None


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("post", "/scenarios/nope/run", {"params": {}}, 404, "name"),
        ("post", "/requests", {"scenario": "nope", "title": "t"}, 404, "scenario"),
        ("post", "/tokens", {"name": "x", "role": "consumer", "scenarios": ["../../x"]}, 422, "scenarios"),
        ("post", "/tokens", {"name": "x", "role": "consumer", "scenarios": ["s" * 300]}, 422, "scenarios"),
        ("post", "/api/v1/tokens", {"role": "consumer", "jobs": ["été"]}, 422, "jobs"),
        ("get", "/results/nope", None, 404, "scenario"),
        ("get", "/jobs/TGJOBRUN-0", None, 404, "id"),
        ("get", "/jobs/" + "x" * 300, None, 422, "job_id"),
        ("post", "/scenarios/" + "x" * 300 + "/run", {"params": {}}, 422, "name"),
        ("post", "/scenarios/%C3%A9t%C3%A9/approve", None, 422, "name"),
    ],
)
def test_refusals_name_the_seeds_fields_and_store_nothing(
    world: World, method: str, path: str, body: Any, status: int, field: str
) -> None:
    before = (count(world.engine, "job_runs"), count(world.engine, "api_tokens"), count(world.engine, "run_requests"))
    response = world.client.request(method.upper(), path, json=body, headers=admin(world))
    assert response.status_code == status, response.text
    assert response.json()["field"].startswith(field), response.json()
    assert "x" * 250 not in response.text  # an over-long id is not echoed back
    after = (count(world.engine, "job_runs"), count(world.engine, "api_tokens"), count(world.engine, "run_requests"))
    assert after == before


def test_revoking_says_revoked_not_changed(world: World) -> None:
    name = load_scenario(world)
    h = admin(world)
    world.client.post(f"/scenarios/{name}/approve", headers=h)
    status = world.client.delete(f"/scenarios/{name}/approval", headers=h).json()
    assert status["matches"] is False and status["changed"] == ["approval revoked"]


def test_a_seed_schedule_may_wait_for_its_scenarios_approval(world: World) -> None:
    name = load_scenario(world)
    entry = {"id": "waiting", "scenario": name, "schedule": "0 2 1 * *", "params": {"period": "2026-01"}}
    made = world.client.post("/schedules", json={**entry, "allow_pending": True}, headers=admin(world))
    assert made.status_code == 201 and made.json()["enabled"] is False, made.text


@pytest.mark.parametrize("prefix", ["", "/api/orchestrator"])
def test_with_four_eyes_a_seed_approval_names_what_was_reviewed(world: World, prefix: str) -> None:
    """Found by a review: with four eyes on, the seed route approved whatever was loaded when
    the second person clicked (``{}``): a version applied after their review passed as reviewed.
    The checksum they reviewed is then required; nothing is approved without it."""
    from dataclasses import replace

    name = load_scenario(world)
    config = world.engine.config
    world.engine.config = replace(config, governance=replace(config.governance, four_eyes=True))
    try:
        for body in ({}, None):
            refused = world.client.post(f"{prefix}/scenarios/{name}/approve", json=body, headers=admin(world))
            assert refused.status_code == 422 and refused.json()["field"] == "sha256", refused.text
        assert world.client.get(f"{prefix}/scenarios/{name}/approval", headers=admin(world)).json()["approval"] is None
        pinned = world.digest(name).removeprefix("sha256:")
        named = world.client.post(f"{prefix}/scenarios/{name}/approve", json={"sha256": pinned}, headers=admin(world))
        assert named.status_code == 200, named.text
    finally:
        world.engine.config = config
