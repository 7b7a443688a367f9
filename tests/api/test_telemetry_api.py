"""``GET /api/v1/telemetry`` and the seed metrics on ``/metrics``: the caller's tenant only,
published figures as published, others computed on demand, malformed periods named."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from tests.api.conftest import World

from jobgate.core import periods
from jobgate.core.tokens import Role
from jobgate.service import tokens
from jobgate.store.sql import telemetry as store
from jobgate.store.tables import telemetry_publications
from jobgate.telemetry import rollup
from jobgate.telemetry.sinks import FileSink
from jobgate.testing import connection

API = "/api/v1/telemetry"


def publish(world: World, tenant: str, name: str) -> None:
    period = periods.parse(name)
    engine = world.engine
    doc = rollup.compute(engine, tenant, period)
    sink = FileSink(engine.config.telemetry_sink_path)
    held = rollup.deliver(sink, tenant, period, doc)
    with engine.store.write() as tx:
        rollup.publish(tx, tenant, period, held, sink.name, now=engine.clock.now(), job_run_id=None)


def test_a_published_period_is_answered_as_published(world: World) -> None:
    publish(world, "acme", "2026-Q1")
    with world.engine.store.write() as tx:  # a tampered row shows that the answer is the stored one
        connection(tx).execute(
            telemetry_publications.update().values(figures='{"period":"2026-Q1","jobs_scheduled":99}')
        )
    got = world.client.get(API, params={"period": "2026-Q1"}, headers=world.headers("acme", Role.AUDITOR))
    assert got.status_code == 200
    [item] = got.json()["items"]
    assert item["state"] == "published" and item["figures"]["jobs_scheduled"] == 99
    sink_file = world.engine.config.telemetry_sink_path
    assert item["sink"] == f"file:{sink_file.name}" and str(sink_file.parent) not in item["sink"]  # not the folders
    assert item["period_start"] == "2026-01-01T00:00:00Z"
    listed = world.client.get(API, headers=world.headers("acme", Role.OPERATOR)).json()
    assert [i["period"] for i in listed["items"]] == ["2026-Q1"]
    # another tenant has published nothing and sees nothing of acme's
    theirs = world.client.get(API, headers=world.headers("other", Role.ADMIN)).json()
    assert theirs == {"tenant_id": "other", "items": []}


def test_a_stored_sink_address_is_shown_as_scheme_and_host_only(world: World) -> None:
    """Rows stored by earlier versions kept a URL's path (a webhook's path may be its secret)
    or the server's file path: the API shows scheme and host, or the file's name."""
    publish(world, "acme", "2026-Q1")
    headers = world.headers("acme", Role.AUDITOR)
    for stored, shown in (
        ("http:http://aii.example.org:8443/ingest/SECRET", "http://aii.example.org:8443"),
        ("https://user:pw@aii.example.org/x?token=SECRET", "https://aii.example.org"),
        ("file:/srv/jobgate/data/telemetry/aii.jsonl", "file:aii.jsonl"),
    ):
        with world.engine.store.write() as tx:
            connection(tx).execute(telemetry_publications.update().values(sink=stored))
        [item] = world.client.get(API, params={"period": "2026-Q1"}, headers=headers).json()["items"]
        assert item["sink"] == shown


def test_an_unpublished_period_is_computed_for_the_caller_tenant(world: World) -> None:
    for _ in range(3):
        world.new_run()
    world.new_run(tenant="other", job="shared-job")
    now = world.engine.clock.now()
    today = periods.containing(periods.PeriodKind.DAY, now).name
    got = world.client.get(API, params={"period": today}, headers=world.headers("acme", Role.ADMIN)).json()
    [item] = got["items"]
    assert item["state"] == "open" and item["published_at"] is None
    assert item["figures"]["jobs_scheduled"] == 3 and item["figures"]["jobs_completed"] == 0
    closed = world.client.get(API, params={"period": "2026-01"}, headers=world.headers("acme", Role.ADMIN)).json()
    assert closed["items"][0]["state"] == "closed" and closed["items"][0]["figures"]["jobs_scheduled"] == 0
    with world.engine.store.read() as tx:  # reading computes; it never publishes
        assert store.publications_list(connection(tx), "acme") == []


def test_a_malformed_period_is_400_naming_the_field_and_a_future_one_422(world: World) -> None:
    h = world.headers("acme", Role.OPERATOR)
    for bad in ("2026-13", "2026-Q5", "Q2-2026", "2026-02-30", "yesterday"):
        refused = world.client.get(API, params={"period": bad}, headers=h)
        assert refused.status_code == 400, bad
        assert refused.json()["field"] == "period" and refused.json()["error"] == "bad_request"
    future = world.client.get(API, params={"period": "2999-01"}, headers=h)
    assert future.status_code == 422 and future.json()["field"] == "period"


def test_tenant_wide_figures_need_a_token_not_limited_to_definitions(world: World) -> None:
    limited = tokens.create(world.engine, tenant_id="acme", role="admin", actor="test", jobs=["shared-job"])
    headers = {"Authorization": f"Bearer {limited.token}"}
    for path in (f"{API}?period=2026-01", "/metrics"):
        refused = world.client.get(path, headers=headers)
        assert refused.status_code == 403 and refused.json()["field"] == "jobs", path


def test_metrics_carry_the_seed_set_for_the_callers_tenant(world: World) -> None:
    world.new_run()
    world.new_run()
    world.new_run(tenant="other", job="shared-job")
    text = world.client.get("/metrics", headers=world.headers("acme", Role.OPERATOR)).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    created = ("tg_scheduler_job_created_total", (("job_class", "MAINTENANCE_JOB"), ("tenant", "acme")))
    assert samples[created] == 2
    depth = ("tg_scheduler_queue_depth", (("job_class", "MAINTENANCE_JOB"), ("queue", "default"), ("tenant", "acme")))
    assert samples[depth] == 2
    assert not [k for k in samples if ("tenant", "other") in k[1]]
