"""Evidence over HTTP: an entry's inclusion proof verifies into its anchored root, and a
downloaded bundle verifies offline exactly as ``jobgate evidence export``'s does."""

from __future__ import annotations

from tests.api.conftest import ACME_JOB, World

from jobgate.core import merkle
from jobgate.core.tokens import Role
from jobgate.evidence import keys as evidence_keys
from jobgate.export.bundles import verify_bundle


def test_an_inclusion_proof_verifies_into_its_anchor_and_a_missing_one_is_named(world: World) -> None:
    world.new_run("acme")
    auditor = world.headers("acme", Role.AUDITOR)
    unanchored = world.client.get("/api/v1/audit/1/proof", headers=auditor)
    assert unanchored.status_code == 404 and "not anchored yet" in unanchored.json()["message"]
    last = world.anchored("acme")
    for seq in (1, last):
        found = world.client.get(f"/api/v1/audit/{seq}/proof", headers=auditor)
        assert found.status_code == 200, found.text
        proof = found.json()
        assert proof["seq"] == seq and proof["anchor"]["root"] == proof["root"]
        assert merkle.verify(proof["entry_hash"], proof["proof"], proof["root"])
    beyond = world.client.get(f"/api/v1/audit/{last + 1000}/proof", headers=auditor)
    assert beyond.status_code == 404 and "no audit entry" in beyond.json()["message"]
    assert world.client.get("/api/v1/audit/1/proof", headers=world.headers("acme", Role.OPERATOR)).status_code == 403


def test_a_downloaded_bundle_verifies_offline_for_each_kind_of_scope(world: World) -> None:
    signer = evidence_keys.ensure(world.engine.config)
    run = world.terminal_run("acme")
    world.anchored("acme")
    auditor = world.headers("acme", Role.AUDITOR)
    now = world.engine.clock.now()
    period = {"from": (now.replace(year=now.year - 1)).isoformat(), "to": (now.replace(year=now.year + 1)).isoformat()}
    for query, name in (
        ({"job_run_id": run.job_run_id}, f"evidence-run-{run.job_run_id}.zip"),
        ({"job_definition_id": ACME_JOB}, f"evidence-definition-{ACME_JOB}.zip"),
        (period, "evidence-period-"),
    ):
        got = world.client.get("/api/v1/evidence", params=query, headers=auditor)
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "application/zip"
        assert name in got.headers["content-disposition"]
        checked = verify_bundle(got.content, public_keys={signer.key_id: signer.public_b64})
        assert checked.ok, checked.problems
        assert checked.signed_by == signer.key_id
    zoned = {"from": "2026-12-05T10:00:00+14:00", "to": "2026-12-06T00:00:00-05:00"}
    got = world.client.get("/api/v1/evidence", params=zoned, headers=auditor)
    assert got.status_code == 200  # the name says its bounds in UTC, as its Z claims
    assert "evidence-period-20261204T200000Z-20261206T050000Z.zip" in got.headers["content-disposition"]


def test_a_bundle_request_is_refused_with_the_field_named(world: World) -> None:
    run = world.new_run("acme")
    theirs = world.new_run("other", job="shared-job")
    auditor = world.headers("acme", Role.AUDITOR)
    both = world.client.get(
        "/api/v1/evidence", params={"job_run_id": run.job_run_id, "job_definition_id": ACME_JOB}, headers=auditor
    )
    assert both.status_code == 422 and both.json()["field"] == "scope"
    naive = world.client.get(
        "/api/v1/evidence", params={"from": "2026-01-01T00:00:00", "to": "2027-01-01T00:00:00Z"}, headers=auditor
    )
    assert naive.status_code == 400 and naive.json()["field"] == "from"
    half = world.client.get("/api/v1/evidence", params={"from": "2026-01-01T00:00:00Z"}, headers=auditor)
    assert half.status_code == 422 and half.json()["field"] == "to" and "missing" in half.json()["message"]
    for field, bounds in (
        ("from", {"from": "0001-01-01T00:00:00+14:00", "to": "2027-01-01T00:00:00Z"}),
        ("to", {"from": "2026-01-01T00:00:00Z", "to": "9999-12-31T23:59:59-14:00"}),
    ):  # no instant in UTC (before year 1, after 9999): refused, not a 500
        beyond = world.client.get("/api/v1/evidence", params=bounds, headers=auditor)
        assert beyond.status_code == 400 and beyond.json()["field"] == field, beyond.text
    assert (
        world.client.get("/api/v1/evidence", params={"job_run_id": theirs.job_run_id}, headers=auditor).status_code
        == 404
    )
    assert world.client.get("/api/v1/evidence", params={"job_run_id": "../etc"}, headers=auditor).status_code == 422
    consumer = world.client.get(
        "/api/v1/evidence", params={"job_run_id": run.job_run_id}, headers=world.headers("acme", Role.CONSUMER)
    )
    assert consumer.status_code == 403
