"""The pack registry's routes: publish, export an offline seed, import it into another
deployment (here a second application on the same database, importing into another tenant
with its own trust root), and the refusals: 409, 422 audited with nothing written, 503."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count, make_config

from jobgate.api.server_state import ServerState
from jobgate.console.app import create_app
from jobgate.core.errors import ValidationError
from jobgate.core.tokens import Role
from jobgate.evidence import keys as evidence_keys
from jobgate.export.bundles import pack
from jobgate.packs import archive
from jobgate.service import approvals
from jobgate.service.engine import Engine

DOC = {"job_definition_id": "nightly-report", "job_class": "MAINTENANCE_JOB", "trigger_type": "manual",
       "runner": "py", "body": "print('report')"}  # fmt: skip


@pytest.fixture
def prod(world: World, tmp_path: Path) -> Iterator[TestClient]:
    """A second deployment on the same database, trusting the first one's evidence key."""
    signer = evidence_keys.create(world.engine.config)
    base = tmp_path / "prod"
    base.mkdir()
    engine = Engine(world.engine.store, make_config(base, packs={"trusted_keys": [signer.public_b64]}))
    with TestClient(create_app(ServerState(engine, auth=True)), raise_server_exceptions=False) as client:
        yield client


def _export(world: World, definitions: list[str], pack: str = "nightly@1.0.0") -> bytes:
    admin = world.headers("acme", Role.ADMIN)
    published = world.client.post("/api/v1/packs", json={"pack": pack, "definitions": definitions}, headers=admin)
    assert published.status_code == 201, published.text
    response = world.client.post("/api/v1/export/offline-seed", headers=admin)
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    return response.content


def _written(world: World) -> tuple[int, ...]:
    return tuple(count(world.engine, t, "tenant_id = 'other'") for t in ("definitions", "packs", "pack_blobs"))


def test_publish_export_and_import_into_the_callers_tenant(world: World, prod: TestClient) -> None:
    admin = world.headers("acme", Role.ADMIN)
    assert world.client.post("/api/v1/definitions", json={"definitions": [DOC]}, headers=admin).status_code == 200
    data = _export(world, ["nightly-report"])
    again = world.client.post("/api/v1/packs", json={"pack": "NIGHTLY@1.0.0", "definitions": ["nightly-report"]},
                              headers=admin)  # fmt: skip
    assert again.status_code == 200 and again.json()["created"] is False  # the same identity and content

    imported = prod.post("/api/v1/import/offline-seed", content=data, headers=world.headers("other", Role.ADMIN))
    assert imported.status_code == 200, imported.text
    body = imported.json()
    assert [p["pack"]["pack"] for p in body["packs"]] == ["nightly@1.0.0"] and body["approved"] == []
    assert body["signed_by"].startswith("sha256-")
    acme = world.client.get("/api/v1/definitions/nightly-report", headers=admin).json()
    other = prod.get("/api/v1/definitions/nightly-report", headers=world.headers("other", Role.ADMIN)).json()
    assert other["digest"] == acme["digest"]
    assert not approvals.status(world.engine, "other", "nightly-report").approved  # unapproved by default
    # each tenant sees its own packs only
    listed = prod.get("/api/v1/packs", headers=world.headers("other", Role.OPERATOR)).json()
    assert [(p["pack"], p["origin"]) for p in listed] == [("nightly@1.0.0", "import")]
    assert world.client.get("/api/v1/packs", headers=world.headers("acme", Role.OPERATOR)).json()[0]["origin"] == (
        "publish"
    )


def test_other_content_under_a_stored_identity_is_409(world: World) -> None:
    admin = world.headers("acme", Role.ADMIN)
    world.client.post("/api/v1/definitions", json={"definitions": [DOC]}, headers=admin)
    _export(world, ["nightly-report"])
    world.client.post("/api/v1/definitions", json={"definitions": [{**DOC, "body": "print('v2')"}]}, headers=admin)
    response = world.client.post(
        "/api/v1/packs", json={"pack": "nightly@1.0.0", "definitions": ["nightly-report"]}, headers=admin
    )
    assert response.status_code == 409 and response.json()["error"] == "pack_identity_digest_conflict"


def test_a_tampered_archive_is_422_audited_and_writes_nothing(world: World, prod: TestClient) -> None:
    world.client.post("/api/v1/definitions", json={"definitions": [DOC]}, headers=world.headers("acme", Role.ADMIN))
    data = _export(world, ["nightly-report"])
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        files = {n: z.read(n) for n in z.namelist()}
    blob = next(n for n in files if n.startswith("blobs/"))
    files[blob] = files[blob].replace(b"report", b"rep0rt")
    before = _written(world)
    response = prod.post("/api/v1/import/offline-seed", content=pack(files), headers=world.headers("other", Role.ADMIN))
    assert response.status_code == 422 and response.json()["error"] == "offline_seed_refused"
    assert blob in response.json()["message"] and "Traceback" not in response.text
    assert _written(world) == before
    assert count(world.engine, "audit_log", "tenant_id = 'other' AND action = 'offline_seed.import_refused'") == 1


def test_a_raw_handler_is_not_imported_over_the_api(world: World, prod: TestClient) -> None:
    data = _export(world, [ACME_JOB])  # the world's definitions name Python handlers
    before = _written(world)
    response = prod.post("/api/v1/import/offline-seed", content=data, headers=world.headers("other", Role.ADMIN))
    assert response.status_code == 422 and response.json()["field"] == "handler"
    assert _written(world) == before


def test_no_trust_root_is_503(world: World) -> None:
    world.client.post("/api/v1/definitions", json={"definitions": [DOC]}, headers=world.headers("acme", Role.ADMIN))
    data = _export(world, ["nightly-report"])
    response = world.client.post(
        "/api/v1/import/offline-seed", content=data, headers=world.headers("other", Role.ADMIN)
    )
    assert response.status_code == 503 and response.json()["field"] == "packs.trusted_keys"
    assert count(world.engine, "packs", "tenant_id = 'other'") == 0


def test_an_unsigned_export_is_refused_by_an_importer(world: World, prod: TestClient) -> None:
    """Without the evidence key the manifest ships unsigned; no importer takes it."""
    world.client.post("/api/v1/definitions", json={"definitions": [DOC]}, headers=world.headers("acme", Role.ADMIN))
    data = _export(world, ["nightly-report"])
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        files = {n: z.read(n) for n in z.namelist() if n != archive.ENVELOPE}
    response = prod.post("/api/v1/import/offline-seed", content=pack(files), headers=world.headers("other", Role.ADMIN))
    assert response.status_code == 422 and "only a signed archive" in response.json()["message"]


def test_an_archive_larger_than_the_request_limit_is_still_imported(world: World, tmp_path: Path) -> None:
    """The import route takes archives up to their own limit (``archive.MAX_ARCHIVE_BYTES``);
    every other route keeps ``server.max_body_bytes``."""
    admin = world.headers("acme", Role.ADMIN)
    signer = evidence_keys.create(world.engine.config)
    assert world.client.post("/api/v1/definitions", json={"definitions": [DOC]}, headers=admin).status_code == 200
    data = _export(world, ["nightly-report"])
    base = tmp_path / "small"
    base.mkdir()
    limit = 1024
    assert len(data) > limit
    config = make_config(base, packs={"trusted_keys": [signer.public_b64]}, server={"max_body_bytes": limit})
    with TestClient(create_app(ServerState(Engine(world.engine.store, config), auth=True))) as small:
        other = world.headers("other", Role.ADMIN)
        imported = small.post("/api/v1/import/offline-seed", content=data, headers=other)
        assert imported.status_code == 200, imported.text
        too_big = small.post("/api/v1/definitions", content=b"x" * (limit + 1), headers=other)
        assert too_big.status_code == 413 and too_big.json()["error"] == "payload_too_large"


def test_a_refusal_while_applying_is_audited_and_writes_nothing(world: World, prod: TestClient) -> None:
    """Verified, parsed, then refused when stored (here: the definition's own schedule would take
    over a schedule someone else stored under its name): 422, audited, nothing written."""
    from tests.api.conftest import SHARED_JOB

    from jobgate.scheduling.owned import owned_schedule_id
    from jobgate.service import schedules

    cron = {**DOC, "job_definition_id": "nightly-cron", "trigger_type": "cron", "schedule_expression": "0 2 * * *"}
    admin = world.headers("acme", Role.ADMIN)
    assert world.client.post("/api/v1/definitions", json={"definitions": [cron]}, headers=admin).status_code == 200
    data = _export(world, ["nightly-cron"])
    now = world.engine.clock.now()
    squatter = {"id": owned_schedule_id("nightly-cron"), "job": SHARED_JOB, "event_type": "x", "tenant": "other"}
    schedules.put_schedules(world.engine, [schedules.schedule_from_document(squatter, now=now)], source="api", now=now)
    before = _written(world)
    response = prod.post("/api/v1/import/offline-seed", content=data, headers=world.headers("other", Role.ADMIN))
    assert response.status_code == 422 and response.json()["field"] == "schedule_expression", response.text
    assert _written(world) == before
    assert count(world.engine, "audit_log", "tenant_id = 'other' AND action = 'offline_seed.import_refused'") == 1


def test_the_import_and_the_definitions_route_refuse_the_same_documents(tmp_path: Path) -> None:
    """Found by a review: a definition naming a configured target (which the configuration backs
    with a Python handler) was accepted by ``POST /api/v1/definitions`` and refused by the
    API's import of a pack holding it. One rule for both: the document names a raw handler."""
    from jobgate.api.routes.packs import _api_admission
    from jobgate.definitions import parse_definition

    config = make_config(tmp_path, targets={"MEID_X": {"cmi": "x.1", "handler": "engine_handlers:succeed"}})
    target = {"job_definition_id": "via-target", "job_class": "MAINTENANCE_JOB", "target_engine_meid": "MEID_X"}
    raw = {"job_definition_id": "raw", "job_class": "MAINTENANCE_JOB", "handler": "engine_handlers:succeed"}
    admit = _api_admission(None)  # type: ignore[arg-type]
    admit(parse_definition(target, "pack:via-target", config))  # admitted, as the route admits it
    with pytest.raises(ValidationError) as refused:
        admit(parse_definition(raw, "pack:raw", config))
    assert refused.value.field == "handler"


def test_a_publish_with_an_unknown_field_or_a_huge_name_is_refused_briefly(world: World) -> None:
    admin = world.headers("acme", Role.ADMIN)
    extra = world.client.post(
        "/api/v1/packs", json={"pack": "p@1.0.0", "definitions": ["nightly-report"], "extra": 1}, headers=admin
    )
    assert extra.status_code == 422 and extra.json()["field"] == "extra"
    for name in ("p" * 150 + "@1", "bad id!@1"):
        body = {"pack": name, "definitions": ["nightly-report"]}
        named = world.client.post("/api/v1/packs", json=body, headers=admin)
        assert named.status_code == 422 and named.json()["field"] == "pack"
        assert len(named.text) < 400  # the answer names the rule, it does not echo the input
    assert world.client.get("/api/v1/packs", headers=admin).json() == []
