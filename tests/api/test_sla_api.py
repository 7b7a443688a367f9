"""``GET /api/v1/sla/breaches``: the tenant's records in the seed §23 shape, filtered and paged."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests.api.conftest import SHARED_JOB, World
from tests.helpers import define, make_config

from jobgate.config import JobgateConfig
from jobgate.core.models import Scope
from jobgate.core.tokens import Role
from jobgate.service import sla, tokens
from jobgate.service.submission import SubmitRequest

SLA_JOB = "acme-sla-job"


@pytest.fixture
def config(tmp_path: Path) -> JobgateConfig:
    return make_config(
        tmp_path,
        sla_policies=[{"sla_policy_id": "hour", "deadline_seconds": 3600, "remind_before_seconds": 600}],
    )


def test_breaches_are_listed_for_the_callers_tenant_only(world: World) -> None:
    define(world.engine, job_definition_id=SLA_JOB, tenant_id="acme", sla_policy="hour")
    runs = [
        world.engine.submit(
            SubmitRequest(SLA_JOB, request_id=f"r{i}", scope=Scope(tenant_id="acme", keys=(("eco_number", "ECO-7"),)))
        ).run
        for i in range(3)
    ]
    now = max(r.created_at for r in runs)
    assert sla.check(world.engine, now + timedelta(minutes=55)).reminders == 3
    assert sla.check(world.engine, now + timedelta(hours=2)).breaches == 3
    reader = world.headers("acme", Role.CONSUMER)

    body = world.client.get("/api/v1/sla/breaches", headers=reader).json()
    assert {i["job_run_id"] for i in body["items"]} == {r.job_run_id for r in runs}
    assert len(body["items"]) == 6 and body["next_cursor"] is None
    item = next(i for i in body["items"] if i["phase"] == "breach")
    assert item == item | {
        "job_class": "MAINTENANCE_JOB",
        "job_definition_id": SLA_JOB,
        "eco_number": "ECO-7",
        "sla_policy": "hour",
        "kind": "sla_deadline",
        "severity": "warning",
        "requires_escalation": False,
        "escalated": False,
        "workflow_run_id": None,
    }

    only = world.client.get("/api/v1/sla/breaches?phase=breach&kind=sla_deadline", headers=reader).json()
    assert [i["phase"] for i in only["items"]] == ["breach"] * 3
    one = world.client.get(f"/api/v1/sla/breaches?subject_id={runs[0].job_run_id}", headers=reader).json()
    assert {i["job_run_id"] for i in one["items"]} == {runs[0].job_run_id}

    seen: list[str] = []
    url = "/api/v1/sla/breaches?limit=4"
    while url:
        page = world.client.get(url, headers=reader).json()
        seen += [i["sla_breach_id"] for i in page["items"]]
        url = f"/api/v1/sla/breaches?limit=4&cursor={page['next_cursor']}" if page["next_cursor"] else ""
    assert len(seen) == len(set(seen)) == 6

    other = world.client.get("/api/v1/sla/breaches", headers=world.headers("other", Role.ADMIN))
    assert other.status_code == 200 and other.json()["items"] == []
    limited = tokens.create(world.engine, tenant_id="acme", role="operator", actor="test", jobs=[SHARED_JOB])
    hidden = world.client.get("/api/v1/sla/breaches", headers={"Authorization": f"Bearer {limited.token}"})
    assert hidden.status_code == 200 and hidden.json()["items"] == []


def test_bad_filters_are_refused_naming_the_field(world: World) -> None:
    reader = world.headers("acme", Role.CONSUMER)
    for query, field in (("kind=late", "kind"), ("phase=now", "phase"), ("cursor=!!", "cursor"), ("limit=0", "limit")):
        response = world.client.get(f"/api/v1/sla/breaches?{query}", headers=reader)
        assert response.status_code in (400, 422), query
        assert response.json().get("field", "").endswith(field), response.text
