"""The auth matrix, generated from the route table: every route x every role x own tenant /
other tenant / no token / revoked token / malformed tokens -> the status its rule implies,
and no byte of the other tenant's data in any body.

Each route has a sample request that an allowed caller of ``acme`` may make against
``acme``'s own resources (made fresh for every call). A route without a sample fails the
test: a new route cannot ship without its row in the matrix.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.api.conftest import ACME_FLOW, ACME_JOB, World, body_of
from tests.helpers import define

from jobgate.api.access import Rule, rule_of
from jobgate.api.app import api_routes
from jobgate.core.tokens import Role
from jobgate.service import tokens
from jobgate.testing import connection


@dataclass
class Sample:
    path: str
    json: Any = None
    ok: set[int] = field(default_factory=lambda: {200})
    other: set[int] = field(default_factory=lambda: {404})  # an allowed caller of another tenant


Make = Callable[[World], Sample]


def _runs(w: World) -> Sample:
    w.new_run()
    return Sample("/api/v1/runs", other={200})


def _log(w: World) -> Sample:
    run = w.new_run()
    w.log_for(run)
    return Sample(f"/api/v1/runs/{run.job_run_id}/log")


def _artifact(w: World) -> Sample:
    run = w.terminal_run()
    w.artifact_for(run)
    return Sample(f"/api/v1/runs/{run.job_run_id}/artifact")


def _definition_doc() -> dict[str, Any]:
    return {
        "job_definition_id": f"api-{uuid.uuid4().hex[:6]}",
        "job_class": "MAINTENANCE_JOB",
        "trigger_type": "manual",
        "runner": "py",
        "body": "print('hello')",
    }


def _sla_breaches(w: World) -> Sample:
    """A breach of one of acme's runs, recorded as the SLA monitor records it."""
    from datetime import timedelta

    from jobgate.store.sql import sla as sla_rows

    run = w.new_run()
    with w.engine.store.write() as tx:
        sla_rows.breach_insert(
            connection(tx),
            sla_rows.BreachRecord(
                f"TGSLA-{uuid.uuid4().hex}", "acme", "run", run.job_run_id, run.job_class.value,
                run.job_definition_id, None, "sla_deadline", "breach", "sla_hour", run.created_at + timedelta(hours=1),
                run.created_at + timedelta(hours=2), "warning", False,
            ),
        )  # fmt: skip
    return Sample("/api/v1/sla/breaches", other={200})


def _pack(w: World) -> str:
    """A pack of acme's, published as its admin would."""
    from jobgate.core.packs import PackRef
    from jobgate.packs import registry

    pack_id = f"acme-pack-{uuid.uuid4().hex[:6]}"
    registry.publish(w.engine, "acme", PackRef(pack_id, "1"), [ACME_JOB], actor="test")
    w.made.add(pack_id)
    return pack_id


def _scheduled_terminal_run(w: World) -> str:
    """A cancelled run of one of acme's schedules (its slot names the schedule)."""
    from jobgate.service import control, schedules

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
    w.made.add(run.job_run_id)
    return control.cancel_run(w.engine, run.job_run_id, actor="test", tenant_id="acme").job_run_id


def _retry_pair(w: World) -> tuple[str, str]:
    """A terminal run of acme and its retry."""
    from jobgate.service import control

    source = w.terminal_run().job_run_id
    made, _ = control.retry_run(w.engine, source, actor="test", tenant_id="acme")
    w.made.add(made.job_run_id)
    return source, made.job_run_id


def _retried(w: World) -> str:
    return _retry_pair(w)[0]


def _retry(w: World) -> str:
    return _retry_pair(w)[1]


SEED_ROUTE = "/api/trustgate/MEID_TRUST_ROUTE_SCHEDULER"
ORC = "/api/orchestrator"


def _cron_job(w: World) -> str:
    """An acme definition cron schedules may start (a seed 004 scenario's triggers)."""
    define(w.engine, job_definition_id="acme-cron", tenant_id="acme", also_triggered_by=["cron"])
    w.made.add("acme-cron")
    return "acme-cron"


SAMPLES: dict[tuple[str, str], Make] = {
    ("GET", "/healthz"): lambda w: Sample("/healthz"),
    ("GET", "/api/v1/buildinfo"): lambda w: Sample("/api/v1/buildinfo", other={200}),
    ("GET", "/buildinfo.json"): lambda w: Sample("/buildinfo.json", other={200}),
    ("GET", "/readyz"): lambda w: Sample("/readyz"),
    ("GET", "/metrics"): lambda w: Sample("/metrics", other={200}),
    ("POST", "/api/v1/runs"): lambda w: Sample("/api/v1/runs", {"job_definition_id": ACME_JOB}, ok={201}),
    ("GET", "/api/v1/runs"): _runs,
    ("GET", "/api/v1/runs/{job_run_id}"): lambda w: Sample(f"/api/v1/runs/{w.new_run().job_run_id}"),
    ("POST", "/api/v1/runs/{job_run_id}/cancel"): lambda w: Sample(f"/api/v1/runs/{w.new_run().job_run_id}/cancel"),
    ("POST", "/api/v1/runs/{job_run_id}/stop"): lambda w: Sample(
        f"/api/v1/runs/{w.running_run().job_run_id}/stop", ok={202}
    ),
    ("POST", "/api/v1/runs/{job_run_id}/retry"): lambda w: Sample(
        f"/api/v1/runs/{w.terminal_run().job_run_id}/retry", ok={201}
    ),
    ("POST", "/api/v1/scheduler/runs/{job_run_id}/retry"): lambda w: Sample(
        f"/api/v1/scheduler/runs/{_scheduled_terminal_run(w)}/retry", ok={201}
    ),
    ("GET", "/api/v1/runs/{job_run_id}/children"): lambda w: Sample(f"/api/v1/runs/{_retried(w)}/children"),
    ("GET", "/api/v1/runs/{job_run_id}/parents"): lambda w: Sample(f"/api/v1/runs/{_retry(w)}/parents"),
    ("GET", "/api/v1/scheduler/runs/{job_run_id}/children"): lambda w: Sample(
        f"/api/v1/scheduler/runs/{_retried(w)}/children"
    ),
    ("GET", "/api/v1/scheduler/runs/{job_run_id}/parents"): lambda w: Sample(
        f"/api/v1/scheduler/runs/{_retry(w)}/parents"
    ),
    ("GET", "/api/v1/runs/{job_run_id}/log"): _log,
    ("GET", "/api/v1/runs/{job_run_id}/artifact"): _artifact,
    ("GET", "/api/v1/runs/{job_run_id}/stream"): lambda w: Sample(f"/api/v1/runs/{w.terminal_run().job_run_id}/stream"),
    ("GET", "/api/v1/scheduler/runs/{job_run_id}/stream"): lambda w: Sample(
        f"/api/v1/scheduler/runs/{w.terminal_run().job_run_id}/stream"
    ),
    ("GET", "/api/v1/scheduler/workers"): lambda w: Sample("/api/v1/scheduler/workers", other={200}),
    ("POST", "/api/v1/schedule"): lambda w: Sample("/api/v1/schedule", {"job_definition_id": ACME_JOB}),
    ("POST", "/api/v1/cancel"): lambda w: Sample("/api/v1/cancel", {"job_run_id": w.new_run().job_run_id}),
    ("GET", "/api/v1/definitions"): lambda w: Sample("/api/v1/definitions", other={200}),
    ("GET", "/api/v1/definitions/{job_definition_id}"): lambda w: Sample(f"/api/v1/definitions/{ACME_JOB}"),
    ("GET", "/api/v1/definitions/{job_definition_id}/versions"): lambda w: Sample(
        f"/api/v1/definitions/{ACME_JOB}/versions"
    ),
    ("POST", "/api/v1/definitions"): lambda w: Sample(
        "/api/v1/definitions", {"definitions": [_definition_doc()]}, other={200}
    ),
    ("GET", "/api/v1/schedules"): lambda w: (w.schedule(), Sample("/api/v1/schedules", other={200}))[1],
    ("POST", "/api/v1/schedules"): lambda w: Sample(
        "/api/v1/schedules",
        {"schedule": {"id": f"s-{uuid.uuid4().hex[:6]}", "job": ACME_JOB, "every_seconds": 60}},
        ok={201},
        other={422},  # the document names a definition the caller's tenant does not have
    ),
    ("GET", "/api/v1/schedules/{schedule_id}/misses"): lambda w: Sample(f"/api/v1/schedules/{w.schedule()}/misses"),
    ("POST", "/api/v1/schedules/{schedule_id}/enable"): lambda w: Sample(f"/api/v1/schedules/{w.schedule()}/enable"),
    ("POST", "/api/v1/schedules/{schedule_id}/disable"): lambda w: Sample(f"/api/v1/schedules/{w.schedule()}/disable"),
    ("DELETE", "/api/v1/schedules/{schedule_id}"): lambda w: Sample(f"/api/v1/schedules/{w.schedule()}", ok={204}),
    ("POST", "/api/v1/events"): lambda w: Sample(
        "/api/v1/events", {"event_type": "inventory.changed", "event_id": uuid.uuid4().hex}, other={200}
    ),
    ("GET", "/api/v1/dead-letters"): lambda w: Sample("/api/v1/dead-letters", other={200}),
    # A pending run is not dead-lettered: an allowed caller gets past the rule and meets the 409.
    ("POST", "/api/v1/dead-letters/{job_run_id}/requeue"): lambda w: Sample(
        f"/api/v1/dead-letters/{w.new_run().job_run_id}/requeue", ok={409}
    ),
    ("POST", "/api/v1/dead-letters/{job_run_id}/close"): lambda w: Sample(
        f"/api/v1/dead-letters/{w.new_run().job_run_id}/close", {"note": "done by hand"}, ok={409}
    ),
    ("POST", "/api/v1/definitions/{job_definition_id}/approve"): lambda w: Sample(
        f"/api/v1/definitions/{ACME_JOB}/approve", {"digest": w.digest(ACME_JOB)}
    ),
    ("GET", "/api/v1/definitions/{job_definition_id}/approval"): lambda w: Sample(
        f"/api/v1/definitions/{ACME_JOB}/approval"
    ),
    ("DELETE", "/api/v1/definitions/{job_definition_id}/approval"): lambda w: (
        w.approve(ACME_JOB),
        Sample(f"/api/v1/definitions/{ACME_JOB}/approval"),
    )[1],
    ("GET", "/api/v1/audit"): lambda w: (w.new_run(), w.terminal_run(), Sample("/api/v1/audit", other={200}))[2],
    ("POST", "/api/v1/requests"): lambda w: Sample(
        "/api/v1/requests", {"job_definition_id": ACME_JOB, "title": "t", "reason": "r"}, ok={201}
    ),
    ("GET", "/api/v1/requests"): lambda w: (w.proposal(), Sample("/api/v1/requests", other={200}))[1],
    ("GET", "/api/v1/requests/{request_id}"): lambda w: Sample(f"/api/v1/requests/{w.proposal()}"),
    ("POST", "/api/v1/requests/{request_id}/test"): lambda w: Sample(f"/api/v1/requests/{w.proposal()}/test"),
    ("POST", "/api/v1/requests/{request_id}/approve"): lambda w: Sample(f"/api/v1/requests/{w.proposal()}/approve"),
    ("POST", "/api/v1/requests/{request_id}/reject"): lambda w: Sample(
        f"/api/v1/requests/{w.proposal()}/reject", {"note": "not this month"}
    ),
    ("GET", "/api/v1/safe-mode"): lambda w: Sample("/api/v1/safe-mode", other={200}),
    ("POST", "/api/v1/safe-mode"): lambda w: (
        w.safe_mode_off(),
        Sample("/api/v1/safe-mode", {"active": True, "reason": "drill"}, other={200}),
    )[1],
    ("GET", "/api/v1/audit/verify"): lambda w: Sample("/api/v1/audit/verify", other={200}),
    ("GET", "/api/v1/audit/verify/records"): lambda w: Sample("/api/v1/audit/verify/records", other={200}),
    ("GET", "/api/v1/audit/{seq}/proof"): lambda w: (w.new_run(), Sample(f"/api/v1/audit/{w.anchored()}/proof"))[1],
    ("GET", "/api/v1/evidence"): lambda w: Sample(f"/api/v1/evidence?job_run_id={w.terminal_run().job_run_id}"),
    ("GET", "/api/v1/governance/settings"): lambda w: Sample("/api/v1/governance/settings", other={200}),
    ("GET", "/api/v1/audit/keys"): lambda w: Sample("/api/v1/audit/keys", other={200}),
    ("GET", "/api/v1/workers"): lambda w: Sample("/api/v1/workers", other={200}),
    ("GET", "/api/v1/quotas/usage"): lambda w: Sample("/api/v1/quotas/usage", other={200}),
    ("GET", "/api/v1/doctor"): lambda w: Sample("/api/v1/doctor", other={200}),
    # A closed month's figures, computed for the caller's tenant (another tenant gets its own).
    ("GET", "/api/v1/telemetry"): lambda w: Sample("/api/v1/telemetry?period=2026-01", other={200}),
    ("GET", "/api/v1/tokens"): lambda w: Sample("/api/v1/tokens", other={200}),
    ("GET", "/api/v1/sla/breaches"): lambda w: _sla_breaches(w),
    ("POST", "/api/v1/tokens"): lambda w: Sample("/api/v1/tokens", {"role": "consumer"}, ok={201}, other={201}),
    ("DELETE", "/api/v1/tokens/{token_id}"): lambda w: Sample(f"/api/v1/tokens/{w.victim_token()}", ok={204}),
    ("POST", "/api/v1/workflows"): lambda w: Sample("/api/v1/workflows", {"job_definition_id": ACME_FLOW}, ok={201}),
    ("GET", "/api/v1/workflows"): lambda w: (w.workflow(), Sample("/api/v1/workflows", other={200}))[1],
    ("GET", "/api/v1/workflows/{workflow_run_id}"): lambda w: Sample(f"/api/v1/workflows/{w.workflow()}"),
    ("GET", "/api/v1/workflows/{workflow_run_id}/transitions"): lambda w: Sample(
        f"/api/v1/workflows/{w.workflow()}/transitions"
    ),
    ("POST", "/api/v1/workflows/{workflow_run_id}/cancel"): lambda w: Sample(
        f"/api/v1/workflows/{w.workflow()}/cancel"
    ),
    # The deployment's plugins, not a tenant's data: any tenant's admin, and nobody else.
    ("GET", "/internal/plugins/status"): lambda w: Sample("/internal/plugins/status", other={200}),
    ("POST", "/internal/plugins/probe"): lambda w: Sample("/internal/plugins/probe", other={200}),
    # The pack registry (seed 001 §6-7): the caller's tenant's packs only.
    ("GET", "/api/v1/packs"): lambda w: (_pack(w), Sample("/api/v1/packs", other={200}))[1],
    ("POST", "/api/v1/packs"): lambda w: Sample(
        "/api/v1/packs", {"pack": f"p-{uuid.uuid4().hex[:6]}@1", "definitions": [ACME_JOB]}, ok={201}
    ),
    ("POST", "/api/v1/export/offline-seed"): lambda w: (_pack(w), Sample("/api/v1/export/offline-seed", other={200}))[
        1
    ],
    # No trust root in this world: every allowed caller meets 503 (tests/api/test_packs_api.py imports).
    ("POST", "/api/v1/import/offline-seed"): lambda w: Sample("/api/v1/import/offline-seed", ok={503}, other={503}),
    # Seed 000 §42-44 at the seed's own route.
    ("POST", f"{SEED_ROUTE}/schedule"): lambda w: Sample(f"{SEED_ROUTE}/schedule", {"job_definition_id": ACME_JOB}),
    ("POST", f"{SEED_ROUTE}/cancel"): lambda w: Sample(f"{SEED_ROUTE}/cancel", {"job_run_id": w.new_run().job_run_id}),
    ("GET", f"{SEED_ROUTE}/workflows/{{workflow_run_id}}"): lambda w: Sample(f"{SEED_ROUTE}/workflows/{w.workflow()}"),
    # Seed 004's API (tests/api/test_orchestrator_api.py), at /api/orchestrator.
    ("GET", f"{ORC}/scenarios"): lambda w: Sample(f"{ORC}/scenarios", other={200}),
    ("GET", f"{ORC}/scenarios/{{name}}"): lambda w: Sample(f"{ORC}/scenarios/{ACME_JOB}"),
    ("POST", f"{ORC}/scenarios/{{name}}/run"): lambda w: Sample(
        f"{ORC}/scenarios/{ACME_JOB}/run", {"params": {"n": "1"}}, ok={201}
    ),
    ("POST", f"{ORC}/scenarios/{{name}}/approve"): lambda w: Sample(f"{ORC}/scenarios/{ACME_JOB}/approve"),
    ("GET", f"{ORC}/scenarios/{{name}}/approval"): lambda w: Sample(f"{ORC}/scenarios/{ACME_JOB}/approval"),
    ("DELETE", f"{ORC}/scenarios/{{name}}/approval"): lambda w: (
        w.approve(ACME_JOB),
        Sample(f"{ORC}/scenarios/{ACME_JOB}/approval"),
    )[1],
    ("GET", f"{ORC}/results/{{scenario}}"): lambda w: (w.new_run(), Sample(f"{ORC}/results/{ACME_JOB}"))[1],
    ("GET", f"{ORC}/jobs"): lambda w: (w.new_run(), Sample(f"{ORC}/jobs", other={200}))[1],
    ("GET", f"{ORC}/jobs/{{job_id}}"): lambda w: Sample(f"{ORC}/jobs/{w.new_run().job_run_id}"),
    ("GET", f"{ORC}/jobs/{{job_id}}/artifact"): lambda w: Sample(
        _artifact(w).path.replace("/api/v1/runs/", f"{ORC}/jobs/")
    ),
    ("POST", f"{ORC}/jobs/{{job_id}}/cancel"): lambda w: Sample(f"{ORC}/jobs/{w.new_run().job_run_id}/cancel"),
    ("POST", f"{ORC}/jobs/{{job_id}}/stop"): lambda w: Sample(
        f"{ORC}/jobs/{w.running_run().job_run_id}/stop", ok={202}
    ),
    ("GET", f"{ORC}/schedules"): lambda w: (w.schedule(), Sample(f"{ORC}/schedules", other={200}))[1],
    ("POST", f"{ORC}/schedules"): lambda w: Sample(
        f"{ORC}/schedules",
        {"id": f"s-{uuid.uuid4().hex[:6]}", "scenario": _cron_job(w), "schedule": "0 2 1 * *"},
        ok={201},
        other={422},  # the entry names a scenario the caller's tenant does not have
    ),
    ("PATCH", f"{ORC}/schedules/{{schedule_id}}/enable"): lambda w: Sample(f"{ORC}/schedules/{w.schedule()}/enable"),
    ("PATCH", f"{ORC}/schedules/{{schedule_id}}/disable"): lambda w: Sample(f"{ORC}/schedules/{w.schedule()}/disable"),
    ("DELETE", f"{ORC}/schedules/{{schedule_id}}"): lambda w: Sample(f"{ORC}/schedules/{w.schedule()}", ok={204}),
    ("GET", f"{ORC}/tokens"): lambda w: Sample(f"{ORC}/tokens", other={200}),
    ("POST", f"{ORC}/tokens"): lambda w: Sample(
        f"{ORC}/tokens", {"name": "branch-runner", "role": "consumer"}, ok={201}, other={201}
    ),
    ("DELETE", f"{ORC}/tokens/{{token_id}}"): lambda w: Sample(f"{ORC}/tokens/{w.victim_token()}", ok={204}),
    ("POST", f"{ORC}/requests"): lambda w: Sample(f"{ORC}/requests", {"scenario": ACME_JOB, "title": "t"}, ok={201}),
    ("GET", f"{ORC}/requests"): lambda w: (w.proposal(), Sample(f"{ORC}/requests", other={200}))[1],
    ("GET", f"{ORC}/requests/{{request_id}}"): lambda w: Sample(f"{ORC}/requests/{w.proposal()}"),
    ("POST", f"{ORC}/requests/{{request_id}}/test"): lambda w: Sample(f"{ORC}/requests/{w.proposal()}/test"),
    ("POST", f"{ORC}/requests/{{request_id}}/approve"): lambda w: Sample(f"{ORC}/requests/{w.proposal()}/approve"),
    ("POST", f"{ORC}/requests/{{request_id}}/reject"): lambda w: Sample(
        f"{ORC}/requests/{w.proposal()}/reject", {"note": "not this month"}
    ),
}


def _route_table() -> list[tuple[str, str, Rule | None]]:
    return [(method, route.path, rule_of(route.endpoint)) for route in api_routes() for method in sorted(route.methods)]


ROUTES = _route_table()


def test_every_route_has_a_rule_and_a_sample() -> None:
    assert [(m, p) for m, p, rule in ROUTES if rule is None] == []
    assert sorted({(m, p) for m, p, _ in ROUTES} - set(SAMPLES)) == []
    assert sorted(set(SAMPLES) - {(m, p) for m, p, _ in ROUTES}) == []  # no stale rows


def expected(rule: Rule, role: Role, same_tenant: bool, sample: Sample) -> set[int]:
    if rule.anonymous:
        return sample.ok
    assert rule.roles is not None
    if role not in rule.roles:
        return {403}
    if not same_tenant:
        return sample.other
    if role in rule.owner_roles:
        return {403}  # the sample's resources were made by the tenant's admin, not this caller
    return sample.ok


def _leaks(w: World, sample: Sample, body: str) -> list[str]:
    """Acme's data in a body, other than what the caller itself named in its request."""
    asked = sample.path + json.dumps(sample.json)
    for named in [*w.made, ACME_JOB, ACME_FLOW]:
        body = body.replace(named, "") if named in asked else body
    return [i for i in sorted(w.made) if i in body] + (["tenant name"] if "acme" in body else [])


def _call(w: World, method: str, sample: Sample, headers: dict[str, str]) -> Any:
    return w.client.request(method, sample.path, json=sample.json, headers=headers)


@pytest.mark.parametrize(("method", "path"), [(m, p) for m, p, _ in ROUTES], ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_route_matrix(world: World, method: str, path: str) -> None:
    _matrix(world, method, path)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("method", "path"), [(m, p) for m, p, _ in ROUTES], ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_route_matrix_for_people_signed_in_by_oidc(oidc_world: World, method: str, path: str) -> None:
    """The same table for principals of an OpenID Connect provider: each role and tenant a
    person whose JWT carries the tenant and a roles claim the configuration maps. On SQLite
    only: who a credential names is decided before any query, and the token matrix above
    already walks tenant scoping on both backends."""
    _matrix(oidc_world, method, path)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("method", "path"), [(m, p) for m, p, _ in ROUTES], ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_route_matrix_for_people_of_an_ldap_directory(ldap_world: World, method: str, path: str) -> None:
    """And for acme's people signing in with HTTP Basic against the LDAP directory, a role from
    their groups (a consumer is in none); the other tenant's callers hold tokens."""
    _matrix(ldap_world, method, path)


def _matrix(world: World, method: str, path: str) -> None:
    rule = next(r for m, p, r in ROUTES if (m, p) == (method, path))
    assert rule is not None
    make = SAMPLES[(method, path)]
    revoked = tokens.create(world.engine, tenant_id="acme", role="admin", actor="test")
    tokens.revoke(world.engine, "acme", revoked.stored.token_id, actor="test")
    failures = []
    for tenant in ("acme", "other"):
        for role in Role:
            sample = make(world)
            response = _call(world, method, sample, world.headers(tenant, role))
            want = expected(rule, role, tenant == "acme", sample)
            if response.status_code not in want:
                failures.append(f"{tenant}/{role}: {response.status_code} not in {want}: {response.text[:200]}")
            if tenant == "other" and (leaked := _leaks(world, sample, body_of(response))):
                failures.append(f"other/{role}: body shows acme's {leaked}: {response.text[:300]}")
    bad_headers = {
        "no token": {},
        "revoked": {"Authorization": f"Bearer {revoked.token}"},
        "malformed": {"Authorization": "Bearer nothing"},
        "empty": {"Authorization": "Bearer "},
        "wrong scheme": {"Authorization": f"Basic {revoked.token}"},
    }
    for label, headers in bad_headers.items():
        sample = make(world)
        response = _call(world, method, sample, headers)
        want = sample.ok if rule.anonymous else {401}
        if response.status_code not in want:
            failures.append(f"{label}: {response.status_code} not in {want}: {response.text[:200]}")
        if not rule.anonymous:
            assert response.json()["error"] == "unauthenticated"
            assert "acme" not in response.text
    assert failures == []


def test_a_route_without_a_rule_is_refused(world: World) -> None:
    """Deny by default: forgetting the rule makes a route unusable, never open."""
    app = world.client.app

    @app.get("/api/v1/forgotten")  # type: ignore[attr-defined,untyped-decorator]
    def forgotten() -> dict[str, str]:
        return {"secret": "leaked"}

    response = world.client.get("/api/v1/forgotten", headers=world.headers("acme", Role.ADMIN))
    assert response.status_code == 403 and "leaked" not in response.text
    assert response.json()["error"] == "forbidden"


def test_an_activator_acts_on_its_own_runs(world: World) -> None:
    me = world.headers("acme", Role.ACTIVATOR)
    mine = world.client.post("/api/v1/runs", json={"job_definition_id": ACME_JOB}, headers=me).json()["run"]
    theirs = world.new_run()
    assert world.client.post(f"/api/v1/runs/{mine['job_run_id']}/cancel", headers=me).status_code == 200
    refused = world.client.post(f"/api/v1/runs/{theirs.job_run_id}/cancel", headers=me)
    assert refused.status_code == 403 and refused.json()["field"] == "job_run_id"
    with world.engine.store.read() as tx:
        still = tx.run_get(theirs.job_run_id)
    assert still is not None and still.status.value == "SCHEDULED"  # nothing happened to it


def test_a_token_limited_to_definitions_sees_and_runs_only_those(world: World) -> None:
    limited = tokens.create(world.engine, tenant_id="acme", role="operator", actor="test", jobs=["shared-job"])
    headers = {"Authorization": f"Bearer {limited.token}"}
    hidden = world.new_run()  # an ACME_JOB run
    shown = world.new_run(job="shared-job")
    listed = world.client.get("/api/v1/runs", headers=headers).json()["items"]
    assert [r["job_run_id"] for r in listed] == [shown.job_run_id]
    assert world.client.get(f"/api/v1/runs/{hidden.job_run_id}", headers=headers).status_code == 404
    refused = world.client.post("/api/v1/runs", json={"job_definition_id": ACME_JOB}, headers=headers)
    assert refused.status_code == 404
    names = [d["job_definition_id"] for d in world.client.get("/api/v1/definitions", headers=headers).json()["items"]]
    assert names == ["shared-job"]


def test_a_consumer_cancelling_someone_elses_run_is_refused_and_recorded(world: World) -> None:
    from jobgate.service import audit
    from jobgate.store.sql.governance import AuditFilter

    run = world.new_run()
    for role in (Role.CONSUMER, Role.ACTIVATOR):  # no cancel right at all / not the owner
        refused = world.client.post(f"/api/v1/runs/{run.job_run_id}/cancel", headers=world.headers("acme", role))
        assert refused.status_code == 403
    with world.engine.store.read() as tx:
        still = tx.run_get(run.job_run_id)
    assert still is not None and still.status.value == "SCHEDULED"
    entries = audit.search(world.engine, AuditFilter(tenant_id="acme", action="access.refused"))
    assert [(e.event.actor, e.event.target_id) for e in entries] == [
        (world.actor("acme", role), "POST /api/v1/runs/{job_run_id}/cancel") for role in (Role.CONSUMER, Role.ACTIVATOR)
    ]
