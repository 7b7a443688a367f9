"""Governance through the HTTP API, as a hostile admin would try it (Found 5, 7 and 8 of the
governance issue): one admin cannot run a program alone, a second token minted by the same
admin is not a second person, job-limited tokens stay inside their limit, and odd inputs are
refused with a 4xx naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count
from tests.runtime.runtime_support import running_worker, wait_status

from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus
from jobgate.core.tokens import Role
from jobgate.service import audit, tokens
from jobgate.testing import connection

API = "/api/v1"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_one_admin_cannot_run_a_program_alone(world: World, tmp_path: Path) -> None:
    """Found 5: an admin applies a definition whose body is Python over the API and approves it
    itself, or with tokens it minted itself: refused every time, nothing executes. A second
    person's approval lets it run."""
    marker = tmp_path / "ran.txt"
    admin = world.headers("acme", Role.ADMIN)
    doc = {
        "job_definition_id": "adhoc",
        "job_class": "MAINTENANCE_JOB",
        "runner": "py",
        "body": f"open({str(marker)!r}, 'a').write('ran\\n')",
    }
    assert world.client.post(f"{API}/definitions", json={"definitions": [doc]}, headers=admin).status_code == 200
    digest = world.digest("adhoc")
    approve = f"{API}/definitions/adhoc/approve"
    minted_plain = world.client.post(f"{API}/tokens", json={"role": "admin"}, headers=admin).json()
    minted_named = world.client.post(f"{API}/tokens", json={"role": "admin", "principal": "bob"}, headers=admin).json()
    assert minted_plain["info"]["principal"] == world.actor("acme", Role.ADMIN)  # the same person, another token
    assert minted_named["info"]["minted_by"] == [world.actor("acme", Role.ADMIN)]
    for headers in (admin, bearer(minted_plain["token"]), bearer(minted_named["token"])):
        refused = world.client.post(approve, json={"digest": digest}, headers=headers)
        assert refused.status_code == 403 and refused.json()["error"] == "four_eyes", refused.json()
    assert world.client.post(f"{API}/runs", json={"job_definition_id": "adhoc"}, headers=admin).status_code == 403
    with running_worker(world.engine) as worker:
        worker.idle.wait(2)
    assert not marker.exists() and count(world.engine, "job_runs") == 0
    refusals = audit.search(world.engine, AuditFilter(tenant_id="acme", action="definition.approval_refused"))
    assert len(refusals) == 3
    reviewer = tokens.create(world.engine, tenant_id="acme", role="admin", actor="root", principal="reviewer")
    assert world.client.post(approve, json={"digest": digest}, headers=bearer(reviewer.token)).status_code == 200
    run = world.client.post(f"{API}/runs", json={"job_definition_id": "adhoc"}, headers=admin).json()["run"]
    with running_worker(world.engine):
        wait_status(world.engine, run["job_run_id"], RunStatus.COMPLETED)
    assert marker.read_text() == "ran\n"


def test_an_admin_cannot_approve_its_own_request_with_a_token_it_minted(world: World) -> None:
    """Found 7: four eyes compares people: a second token minted by the proposer is the proposer."""
    admin = world.headers("acme", Role.ADMIN)
    proposed = world.client.post(
        f"{API}/requests",
        json={"job_definition_id": ACME_JOB, "params": {"n": "1"}, "title": "t", "reason": "r"},
        headers=admin,
    ).json()
    second = world.client.post(f"{API}/tokens", json={"role": "admin", "principal": "someone-else"}, headers=admin)
    other = bearer(second.json()["token"])
    approve = f"{API}/requests/{proposed['request_id']}/approve"
    for headers in (admin, other):
        refused = world.client.post(approve, headers=headers)
        assert refused.status_code == 403 and refused.json()["error"] == "four_eyes", refused.json()
    assert count(world.engine, "job_runs") == 0
    operator = world.headers("acme", Role.OPERATOR)  # minted on the host: a person of its own
    assert world.client.post(approve, headers=operator).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/safe-mode", {"active": True, "reason": "mine only"}),
        ("GET", "/quotas/usage", None),
        ("GET", "/doctor", None),
        ("GET", "/audit", None),
        ("GET", "/audit/verify", None),
        ("GET", "/telemetry", None),
        ("GET", "/tokens", None),
    ],
)
def test_a_job_limited_token_is_refused_tenant_wide_routes_naming_its_limit(
    world: World, method: str, path: str, body: dict[str, object] | None
) -> None:
    """Found 8: a token limited to definitions sees and changes only what its limit covers."""
    made = tokens.create(world.engine, tenant_id="acme", role="admin", actor="test", jobs=["shared-job"])
    response = world.client.request(method, f"{API}{path}", json=body, headers=bearer(made.token))
    assert response.status_code == 403, response.text
    assert response.json()["field"] == "jobs" and "shared-job" in response.json()["message"]
    assert count(world.engine, "safe_mode_periods") == 0


def test_a_signature_refusal_is_audited_under_the_definition_it_names(world: World, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient
    from tests.helpers import make_config

    from jobgate.api.app import create_app
    from jobgate.api.server_state import ServerState
    from jobgate.governance import signing
    from jobgate.service.engine import Engine

    ops = signing.generate("ops")
    config = make_config(tmp_path, signing={"require_signed_definitions": True, "trust_roots": {"ops": ops.public_b64}})
    signed = Engine(world.engine.store, config)
    client = TestClient(create_app(ServerState(signed, auth=True)), raise_server_exceptions=False)
    doc = {"job_definition_id": "unsigned-job", "job_class": "MAINTENANCE_JOB", "runner": "py", "body": "print(1)"}
    refused = client.post(f"{API}/definitions", json={"definitions": [doc]}, headers=world.headers("acme", Role.ADMIN))
    assert refused.status_code == 422 and refused.json()["field"] == "definitions[0].signature"
    entries = audit.search(signed, AuditFilter(tenant_id="acme", action="definition.refused"))
    assert [e.event.target_id for e in entries] == ["unsigned-job"]


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/runs", '{"job_definition_id": "acme-job", "params": {"n": "\\ud800"}}', "params.n"),
        ("/schedules", '{"schedule": {"id": "a\\udfff", "job": "acme-job", "every_seconds": 60}}', "schedule.id"),
        ("/events", '{"event_type": "x", "event_id": "e", "data": ' + '{"a": ' * 300 + "1" + "}" * 300 + "}", None),
        ("/events", '{"event_type": "x", "event_id": "e", "data": {"a": ' + "[" * 3000 + "]" * 3000 + "}}", None),
    ],
)
def test_unstorable_input_is_a_4xx_naming_the_field_and_stores_nothing(
    world: World, path: str, raw: str, field: str | None
) -> None:
    headers = {**world.headers("acme", Role.ADMIN), "Content-Type": "application/json"}
    response = world.client.post(f"{API}{path}", content=raw.encode(), headers=headers)
    assert response.status_code in (400, 422), response.text
    if field is not None:
        assert response.json()["field"] == field
    assert count(world.engine, "job_runs") == 0 and count(world.engine, "schedules") == 0


@pytest.mark.parametrize("char", ["%09", "%0A", "%0D", "%00", "%1F", "%7F"])
@pytest.mark.parametrize("where", ["/api/v1/runs/TGJOBRUN-x{c}", "/api/v1/no-such-route{c}", "/api/v1/runs?status={c}"])
def test_control_characters_in_the_url_are_refused_everywhere(world: World, char: str, where: str) -> None:
    response = world.client.get(where.format(c=char), headers=world.headers("acme", Role.ADMIN))
    assert response.status_code == 400 and response.json()["field"] == "url", response.text


def test_an_unknown_query_parameter_is_refused_naming_it(world: World) -> None:
    admin = world.headers("acme", Role.ADMIN)
    before = count(world.engine, "definition_approvals")
    url = f"{API}/definitions/{ACME_JOB}/approve?expected_digest=sha256:x"
    refused = world.client.post(url, json={"digest": world.digest(ACME_JOB)}, headers=admin)
    assert refused.status_code == 400 and refused.json()["field"] == "expected_digest"
    assert count(world.engine, "definition_approvals") == before  # nothing approved


def test_an_ambiguous_request_is_refused_naming_what_is_given_twice(world: World) -> None:
    """A query parameter that takes one value given twice, a JSON key given twice, two
    Authorization headers: which one counts would be a guess, so none does; nothing stored."""
    operator = world.headers("acme", Role.OPERATOR)
    admin = world.headers("acme", Role.ADMIN)
    both = world.client.get(f"{API}/runs?limit=2&limit=1", headers=operator)
    assert both.status_code == 400 and both.json()["field"] == "limit"
    twice = world.client.get(f"{API}/runs?job_definition_id={ACME_JOB}&job_definition_id=other", headers=operator)
    assert twice.status_code == 400 and twice.json()["field"] == "job_definition_id"
    listed = world.client.get(f"{API}/runs?status=SCHEDULED&status=RUNNING", headers=operator)
    assert listed.status_code == 200  # a parameter that takes a list is repeated by design
    claim = world.client.get(f"{API}/runs?tenant_id=acme&tenant_id=other", headers=operator)
    assert claim.status_code == 403 and claim.json()["field"] == "tenant_id"  # every value is a claim
    before = count(world.engine, "job_runs")
    body = '{"job_definition_id": "' + ACME_JOB + '", "params": {"n": "1"}, "params": {"n": "2"}}'
    dup = world.client.post(f"{API}/runs", content=body, headers={**operator, "Content-Type": "application/json"})
    assert dup.status_code == 400 and dup.json()["field"] == "params"
    two = [("Authorization", admin["Authorization"]), ("Authorization", operator["Authorization"])]
    twice_authorized = world.client.get(f"{API}/tokens", headers=two)
    assert twice_authorized.status_code == 400 and twice_authorized.json()["field"] == "Authorization"
    assert count(world.engine, "job_runs") == before


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/runs", {"job_definition_id": ACME_JOB, "tenant_id": "other"}, "tenant_id"),
        ("POST", "/runs", {"job_definition_id": ACME_JOB, "tenant": "other"}, "tenant"),
        ("POST", "/schedule", {"job_definition_id": ACME_JOB, "scope": {"tenant_id": "other"}}, "scope.tenant_id"),
        ("GET", "/runs?tenant_id=other", None, "tenant_id"),
        (
            "POST",
            "/requests",
            {"job_definition_id": ACME_JOB, "title": "t", "reason": "r", "tenant_id": "x"},
            "tenant_id",
        ),
    ],
)
def test_a_body_or_query_naming_another_tenant_is_403_tenant_claim_mismatch(
    world: World, method: str, path: str, body: dict[str, object] | None, field: str
) -> None:
    response = world.client.request(method, f"{API}{path}", json=body, headers=world.headers("acme", Role.ADMIN))
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "tenant_claim_mismatch" and response.json()["field"] == field
    assert count(world.engine, "job_runs") == 0 and count(world.engine, "run_requests") == 0


def test_a_body_naming_the_callers_own_tenant_is_accepted(world: World) -> None:
    body = {"job_definition_id": ACME_JOB, "tenant_id": "acme", "params": {"n": "1"}}
    assert world.client.post(f"{API}/runs", json=body, headers=world.headers("acme", Role.ADMIN)).status_code == 201


def test_the_records_verification_names_a_tampered_record_and_the_keys_are_published(world: World) -> None:
    from sqlalchemy import text

    from jobgate.evidence import keys as evidence_keys
    from jobgate.service import audit

    auditor = world.headers("acme", Role.AUDITOR)
    assert world.client.get("/api/v1/audit/keys", headers=auditor).json() == []  # no key: none published
    clean = world.client.get("/api/v1/audit/verify/records", headers=auditor).json()
    assert clean["ok"] and clean["checked"]["token"] >= 1, clean
    evidence_keys.create(world.engine.config)
    (key,) = world.client.get("/api/v1/audit/keys", headers=auditor).json()
    assert key["algorithm"] == "Ed25519" and key["status"] == "current"
    audit.seal_pending(world.engine, world.engine.clock.now())
    with world.engine.store.write() as tx:  # a direct edit: a token of acme made admin
        connection(tx).execute(
            text("UPDATE api_tokens SET role = 'admin' WHERE tenant_id = 'acme' AND role = 'auditor'")
        )
    found = world.client.get("/api/v1/audit/verify/records", headers=auditor).json()
    assert not found["ok"] and found["findings"][0]["kind"] == "token" and found["findings"][0]["column"] == "role"
    other = world.client.get("/api/v1/audit/verify/records", headers=world.headers("other", Role.AUDITOR)).json()
    assert other["ok"] and other["tenant_id"] == "other"  # another tenant's records are not in it


@pytest.mark.parametrize("content", ["", "[]", "null", "3"])
def test_a_body_missing_or_not_an_object_is_refused_naming_the_body(world: World, content: str) -> None:
    operator = world.headers("acme", Role.OPERATOR)
    json_headers = {**operator, "Content-Type": "application/json"}
    refused = world.client.post(f"{API}/runs", content=content, headers=json_headers)
    assert refused.status_code == 422 and refused.json()["field"] == "body", refused.text
    assert count(world.engine, "job_runs") == 0
