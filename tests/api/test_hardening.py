"""The API's edges, each found by a review: limited tokens staying within their definitions,
symlinked run files, tenant-scoped metrics, inputs that must not reach the database, quota
and idempotency order, stream limits, and ``--no-auth`` callers."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.api.conftest import ACME_FLOW, ACME_JOB, SHARED_JOB, World, build_world
from tests.helpers import count, define, make_config
from tests.runtime.test_event_triggers import subscribe

from jobgate.api.app import create_app
from jobgate.api.server_state import ServerState
from jobgate.core.tokens import Role
from jobgate.service import safemode, tokens
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

API = "/api/v1"


def limited(w: World, role: str) -> dict[str, str]:
    made = tokens.create(w.engine, tenant_id="acme", role=role, actor="test", jobs=["shared-job"])
    return {"Authorization": f"Bearer {made.token}"}


def test_a_limited_admin_cannot_administer_tokens_or_other_definitions(world: World) -> None:
    h = limited(world, "admin")
    assert world.client.post(f"{API}/tokens", json={"role": "admin"}, headers=h).status_code == 403
    assert world.client.get(f"{API}/tokens", headers=h).status_code == 403
    victim = world.token_ids[("acme", Role.CONSUMER)]
    assert world.client.delete(f"{API}/tokens/{victim}", headers=h).status_code == 403
    doc = {"job_definition_id": ACME_JOB, "job_class": "MAINTENANCE_JOB", "runner": "py", "body": "print(1)"}
    refused = world.client.post(f"{API}/definitions", json={"definitions": [doc]}, headers=h)
    assert refused.status_code == 403 and refused.json()["field"] == "definitions[0].job_definition_id"
    with world.engine.store.read() as tx:
        assert len(tx.definition_versions("acme", ACME_JOB)) == 1  # no new version stored


def test_a_limited_operators_event_fires_only_its_definitions_schedules(world: World) -> None:
    admin = world.headers("acme", Role.ADMIN)
    hidden = define(world.engine, job_definition_id="acme-on-event", tenant_id="acme", trigger_type="event")
    for sid, job in (("hidden", hidden), ("mine", "shared-job")):
        doc = {"id": sid, "job": job, "event_type": "deploy.done"}
        assert world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=admin).status_code == 201
    event = {"event_type": "deploy.done", "event_id": "e1"}
    fired = world.client.post(f"{API}/events", json=event, headers=limited(world, "operator")).json()["fired"]
    assert [f["schedule_id"] for f in fired] == ["mine"]
    with world.engine.store.read() as tx:
        runs = connection(tx).exec_driver_sql("SELECT job_definition_id FROM job_runs").scalars().all()
    assert runs == ["shared-job"]  # the hidden definition's schedule did not fire


def test_a_limited_operator_cannot_replace_a_schedule_it_cannot_see(world: World) -> None:
    hidden = world.schedule()  # of ACME_JOB
    doc = {"id": hidden, "job": "shared-job", "every_seconds": 60}
    refused = world.client.post(f"{API}/schedules", json={"schedule": doc}, headers=limited(world, "operator"))
    assert refused.status_code == 404
    with world.engine.store.read() as tx:
        stored = tx.schedule_get("acme", hidden)
    assert stored is not None and stored.schedule.job_definition_id == ACME_JOB


def test_a_symlinked_log_is_not_served(world: World, tmp_path: Path) -> None:
    run = world.new_run()
    folder = Path(world.engine.config.data_dir) / "runs" / run.job_run_id
    folder.mkdir(parents=True)
    secret = tmp_path / "secrets.env"
    secret.write_text("DB_PASSWORD=hunter2\n")
    os.symlink(secret, folder / "run.log")
    got = world.client.get(f"{API}/runs/{run.job_run_id}/log", headers=world.headers("acme", Role.CONSUMER))
    assert got.status_code == 404 and "hunter2" not in got.text


def test_metrics_show_only_the_callers_tenants_http_series(world: World) -> None:
    world.client.get(f"{API}/runs", headers=world.headers("other", Role.ADMIN))
    text = world.client.get("/metrics", headers=world.headers("acme", Role.OPERATOR)).text
    assert 'tenant="other"' not in text and 'tenant="-"' not in text
    assert 'jobgate_http_requests_total{method="GET",route="/metrics"' not in text  # all series carry a tenant
    world.client.request("FOOBAR", f"{API}/runs")
    again = world.client.get("/metrics", headers=world.headers("acme", Role.OPERATOR)).text
    assert "FOOBAR" not in again


@pytest.mark.parametrize(
    "request_args",
    [
        ("GET", f"{API}/runs/%00"),
        ("GET", f"{API}/runs?job_class=%00"),
        ("GET", f"{API}/definitions/a%01b"),
        ("POST", f"{API}/runs", {"job_definition_id": ACME_JOB, "reason": "a\u0000b"}),
        ("POST", f"{API}/runs", {"job_definition_id": ACME_JOB, "params": {"n\u0000": "1"}}),
        ("POST", f"{API}/schedules", {"schedule": {"id": "x", "job": ACME_JOB, "every_seconds": 1e308}}),
        ("POST", f"{API}/schedules", {"schedule": {"id": "x", "job": ACME_JOB, "misfire_grace_seconds": 1e30}}),
        ("POST", f"{API}/schedules", {"schedule": {"id": "x", "job": ACME_JOB, "every_seconds": 60, "params": "x"}}),
        ("POST", f"{API}/events", {"event_type": "a.b", "event_id": "e\u0000"}),
    ],
)
def test_inputs_the_database_cannot_hold_are_refused_not_500(world: World, request_args: tuple[object, ...]) -> None:
    method, url, *body = request_args
    response = world.client.request(
        str(method), str(url), json=body[0] if body else None, headers=world.headers("acme", Role.ADMIN)
    )
    assert response.status_code in (400, 422), response.text
    assert set(response.json()) <= {"error", "message", "field", "source"}
    assert count(world.engine, "job_runs") == 0 and count(world.engine, "schedules") == 0


def test_a_cursor_with_a_naive_time_is_a_400(world: World) -> None:
    raw = base64.urlsafe_b64encode(json.dumps(["2026-01-01T00:00:00", "x"]).encode()).decode().rstrip("=")
    for path in ("/runs", "/dead-letters"):
        got = world.client.get(f"{API}{path}", params={"cursor": raw}, headers=world.headers("acme", Role.ADMIN))
        assert got.status_code == 400 and got.json()["field"] == "cursor"


def _cursor(parts: list[object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "parts",
    [
        ["2026-12-05T10:19:24+00:00", "\x00"],  # PostgreSQL text holds no NUL
        ["2026-12-05T10:19:24+00:00", "\ud800"],  # nor a lone surrogate
        ["0001-01-01T00:00:00+14:00", "x"],  # before year 1 in UTC
        ["9999-12-31T23:59:59-14:00", "x"],  # after year 9999 in UTC
        ["2026-12-05T10:19:24+00:00", 1 << 70],
        ["2026-12-05T10:19:24+00:00", True],
        ["2026-12-05T10:19:24+00:00", "x" * 5000],
        ["2026-12-05T10:19:24+00:00", 1],  # an id is text: a number ends no page (found by a review)
        ["2026-12-05T10:19:24+00:00", -1],
    ],
)
def test_a_forged_cursor_no_page_could_end_at_is_a_400_on_every_list(world: World, parts: list[object]) -> None:
    """Time-keyed lists take (instant, id); short lists sorted in memory take (id,)."""
    lists = [
        ("/runs", "/dead-letters", "/workflows", "/sla/breaches", "/audit"),
        ("/definitions", "/schedules", "/tokens"),
    ]
    cursors = [_cursor(parts), _cursor(parts[1:]) if parts[0] == "2026-12-05T10:19:24+00:00" else None]
    for paths, raw in zip(lists, cursors, strict=True):
        for path in paths if raw is not None else ():
            got = world.client.get(f"{API}{path}", params={"cursor": raw}, headers=world.headers("acme", Role.ADMIN))
            assert got.status_code in (400, 422) and got.json()["field"] == "cursor", (path, got.text)


def test_a_repeat_is_answered_before_the_quota_and_retries_and_events_count(engine_with_quota: World) -> None:
    w = engine_with_quota
    h = {**w.headers("acme", Role.ADMIN), "Idempotency-Key": "k1"}
    first = w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=h)
    w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=w.headers("acme", Role.ADMIN))
    repeat = w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=h)
    assert repeat.status_code == 200 and repeat.json()["run"]["job_run_id"] == first.json()["run"]["job_run_id"]
    source = first.json()["run"]["job_run_id"]
    w.client.post(f"{API}/runs/{source}/cancel", headers=w.headers("acme", Role.ADMIN))
    retry = w.client.post(f"{API}/runs/{source}/retry", headers=w.headers("acme", Role.ADMIN))
    assert retry.status_code == 429
    # an event counts the runs it would make; one that no schedule answers makes none
    subscribe(w.engine, "on-x", SHARED_JOB, "x.y", tenant_id="acme")
    event = w.client.post(
        f"{API}/events", json={"event_type": "x.y", "event_id": "1"}, headers=w.headers("acme", Role.ADMIN)
    )
    assert event.status_code == 429
    unanswered = w.client.post(
        f"{API}/events", json={"event_type": "z.z", "event_id": "1"}, headers=w.headers("acme", Role.ADMIN)
    )
    assert unanswered.status_code == 200 and unanswered.json()["fired"] == []
    assert count(w.engine, "job_runs") == 2
    # found by a review: a workflow start (whose steps are runs) did not count, nor did it stop
    flow = {**w.headers("acme", Role.ADMIN), "Idempotency-Key": "wf-1"}
    started = w.client.post(f"{API}/workflows", json={"job_definition_id": ACME_FLOW}, headers=flow)
    assert started.status_code == 429 and count(w.engine, "workflow_runs") == 0
    # and a body nested past any route's is a 400 naming the body, never a 500
    deep = "{" + '"a":{' * 5000 + "}" * 5001
    nested = w.client.post(
        f"{API}/runs/{source}/retry",
        content=deep,
        headers={**w.headers("acme", Role.ADMIN), "Content-Type": "application/json"},
    )
    assert nested.status_code == 400 and nested.json()["field"] == "body", nested.text


@pytest.fixture
def streaming(database_url: str, tmp_path: Path) -> Iterator[World]:
    """A world whose streams heartbeat every 0.2 s, live 3 s at most, two per token."""
    server = {
        "stream_poll_ms": 50,
        "stream_heartbeat_seconds": 0.2,
        "stream_queue_lag_seconds": 0.1,
        "stream_max_seconds": 3,
        "streams_per_token": 2,
    }
    store = Store(database_url)
    w = build_world(Engine(store, make_config(tmp_path, server=server)))
    with w.client:
        yield w
    store.dispose()


def _events(lines: Iterator[str], until: str | None = None) -> list[str]:
    kinds = []
    for line in lines:
        if line.startswith("event: "):
            kinds.append(line.removeprefix("event: "))
            if kinds[-1] == until:
                break
    return kinds


def test_a_waiting_runs_stream_repeats_its_queue_lag_on_its_own_cadence(streaming: World) -> None:
    """Seed 002: after the first snapshot, a pending run's ``queue`` event comes again on the
    queue-lag cadence (0.1 s here), apart from heartbeats (0.2 s), with a growing wait."""
    w = streaming
    run = w.new_run()
    waits = []
    with w.client.stream("GET", f"{API}/runs/{run.job_run_id}/stream", headers=w.headers("acme", Role.CONSUMER)) as r:
        kind = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "queue":
                waits.append(json.loads(line.removeprefix("data: "))["waiting_seconds"])
                if len(waits) == 4:
                    break
    assert waits == sorted(waits) and waits[-1] > waits[0]


def test_streams_refuse_an_id_beyond_history_and_end_on_revocation_and_age(streaming: World) -> None:
    w = streaming
    run = w.new_run()  # pending for ever: nothing executes in this test
    h = w.headers("acme", Role.CONSUMER)
    beyond = w.client.get(f"{API}/runs/{run.job_run_id}/stream", headers={**h, "Last-Event-ID": "99"})
    assert beyond.status_code == 400 and beyond.json()["field"] == "Last-Event-ID"
    for malformed in ("abc", "-1", "1.5", " 7x", "1" * 13):  # found by a review: 422, not the documented 400
        bad = w.client.get(f"{API}/runs/{run.job_run_id}/stream", headers={**h, "Last-Event-ID": malformed})
        assert bad.status_code == 400 and bad.json()["field"] == "Last-Event-ID", (malformed, bad.text)
    made = tokens.create(w.engine, tenant_id="acme", role="consumer", actor="test")
    mine = {"Authorization": f"Bearer {made.token}"}
    with w.client.stream("GET", f"{API}/runs/{run.job_run_id}/stream", headers=mine) as r:
        lines = r.iter_lines()
        assert "heartbeat" in _events(lines, until="heartbeat")
        tokens.revoke(w.engine, "acme", made.stored.token_id, actor="test")
        rest = _events(lines)  # returns once the server ends the stream
    assert "terminal" not in rest
    with w.client.stream("GET", f"{API}/runs/{run.job_run_id}/stream", headers=h) as r:
        kinds = _events(r.iter_lines())  # ends after stream_max_seconds
    assert kinds.count("state") == 2 and "terminal" not in kinds


def test_one_token_holds_a_bounded_number_of_streams(streaming: World) -> None:
    w = streaming
    run = w.new_run()
    state: ServerState = w.client.app.state.server  # type: ignore[attr-defined]
    token_id = f"token:{w.token_ids[('acme', Role.CONSUMER)]}"  # what the limit counts: the credential
    held = [state.open_stream(token_id), state.open_stream(token_id)]
    refused = w.client.get(f"{API}/runs/{run.job_run_id}/stream", headers=w.headers("acme", Role.CONSUMER))
    assert refused.status_code == 429
    for stream_id in held:
        assert stream_id is not None
        state.close_stream(token_id, stream_id)
    with w.client.stream("GET", f"{API}/runs/{run.job_run_id}/stream", headers=w.headers("acme", Role.CONSUMER)) as r:
        assert r.status_code == 200


def test_no_auth_serves_only_this_machines_programs(engine: Engine) -> None:
    client = TestClient(create_app(ServerState(engine, auth=False)), base_url="http://127.0.0.1:8080")
    assert client.get(f"{API}/runs").status_code == 200
    assert client.get(f"{API}/runs", headers={"Host": "evil.example:8080"}).status_code == 403
    cross_site = client.post(f"{API}/tokens", json={"role": "admin"}, headers={"Origin": "https://evil.example"})
    assert cross_site.status_code == 403 and count(engine, "api_tokens") == 0
    assert client.get(f"{API}/runs", headers={"Origin": "http://127.0.0.1:8080"}).status_code == 200  # its own
    # A page on another local port is another site (found by a review: it switched safe mode on
    # through the console's form, which has no CSRF token without sign-in).
    for other in ("http://localhost:3000", "http://127.0.0.1:3000", "http://localhost:8080", "null"):
        forged = client.post("/admin/safe-mode", data={"active": "true", "reason": "x"}, headers={"Origin": other})
        assert forged.status_code == 403, other
        assert client.get(f"{API}/runs", headers={"Origin": other}).status_code == 403, other
    assert safemode.status(engine, "default") is None


def test_a_limited_token_reaches_no_other_definition_through_a_workflow(world: World) -> None:
    """Found by a review: a token limited to one definition wrote a new version of it whose
    workflow runs another definition, approved it, and ran that definition. Writing or
    approving such a workflow is refused naming the step's job, and nothing is stored."""
    h = limited(world, "admin")
    flow = {
        "job_definition_id": SHARED_JOB,
        "job_class": "MAINTENANCE_JOB",
        "workflow": {"steps": [{"id": "x", "job": ACME_JOB, "params": {"n": "1"}}]},
    }
    versions = len(
        world.client.get(f"{API}/definitions/{SHARED_JOB}/versions", headers=world.headers("acme", Role.ADMIN)).json()
    )
    refused = world.client.post(f"{API}/definitions", json={"definitions": [flow]}, headers=h)
    assert refused.status_code == 403 and refused.json()["field"] == "definitions[0].workflow", refused.text
    assert ACME_JOB in refused.json()["message"]
    after = world.client.get(f"{API}/definitions/{SHARED_JOB}/versions", headers=world.headers("acme", Role.ADMIN))
    assert len(after.json()) == versions
    wide = tokens.create(world.engine, tenant_id="acme", role="admin", actor="test", jobs=[ACME_FLOW])
    digest = world.client.get(f"{API}/definitions/{ACME_FLOW}", headers=world.headers("acme", Role.ADMIN)).json()
    approve = world.client.post(
        f"{API}/definitions/{ACME_FLOW}/approve",
        json={"digest": digest["digest"]},
        headers={"Authorization": f"Bearer {wide.token}"},
    )
    assert approve.status_code == 403 and ACME_JOB in approve.json()["message"], approve.text
    for prefix in ("", "/api/orchestrator"):  # seed 004's door approves through the same rule
        seed = world.client.post(
            f"{prefix}/scenarios/{ACME_FLOW}/approve", json={}, headers={"Authorization": f"Bearer {wide.token}"}
        )
        assert seed.status_code == 403 and ACME_JOB in seed.text, seed.text


@pytest.mark.parametrize("header", ["Idempotency-Key", "traceparent", "Authorization"])
def test_a_single_valued_header_given_twice_is_refused_naming_it(world: World, header: str) -> None:
    """Found by a review: two Idempotency-Keys were taken silently (the first counted); only a
    second Authorization header was refused. Every header one value of which counts."""
    auth = world.headers("acme", Role.ADMIN)["Authorization"]
    values = {
        "Idempotency-Key": ("dup-a", "dup-b"),
        "traceparent": (
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-1af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        "Authorization": (auth, auth),
    }[header]
    headers = [("Authorization", auth)] if header != "Authorization" else []
    headers += [(header, v) for v in values]
    before = count(world.engine, "job_runs")
    answer = world.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=headers)
    assert answer.status_code == 400 and answer.json()["field"] == header, answer.text
    assert count(world.engine, "job_runs") == before


def test_an_event_counts_every_run_it_would_make_and_a_repeat_passes_a_spent_quota(engine_with_quota: World) -> None:
    """Found by a review: an event answered by two jobs took a tenant with one run left past its
    quota, and a redelivered event got 429 instead of the runs its first delivery made."""
    w = engine_with_quota
    second = define(w.engine, job_definition_id="acme-ev2", tenant_id="acme", trigger_type="event")
    subscribe(w.engine, "two-a", SHARED_JOB, "two.x", tenant_id="acme")
    subscribe(w.engine, "two-b", second, "two.x", tenant_id="acme")
    subscribe(w.engine, "one", SHARED_JOB, "one.x", tenant_id="acme")
    admin = w.headers("acme", Role.ADMIN)
    assert w.client.post(f"{API}/runs", json={"job_definition_id": ACME_JOB}, headers=admin).status_code == 201
    both = w.client.post(f"{API}/events", json={"event_type": "two.x", "event_id": "e1"}, headers=admin)
    assert both.status_code == 429 and "would create 2" in both.json()["message"]
    assert count(w.engine, "job_runs") == 1
    first = w.client.post(f"{API}/events", json={"event_type": "one.x", "event_id": "e2"}, headers=admin)
    assert first.status_code == 200 and first.json()["fired"][0]["created"] is True
    again = w.client.post(f"{API}/events", json={"event_type": "one.x", "event_id": "e2"}, headers=admin)
    assert again.status_code == 200, again.text
    assert again.json()["fired"][0]["job_run_id"] == first.json()["fired"][0]["job_run_id"]
    assert again.json()["fired"][0]["created"] is False and count(w.engine, "job_runs") == 2


def _bodiless_operations(world: World) -> list[tuple[str, str]]:
    """Every changing operation of the API whose OpenAPI document takes no body."""
    found = []
    for path, item in world.client.get("/openapi.json").json()["paths"].items():
        for method, operation in item.items():
            if method in ("post", "put", "patch", "delete") and "requestBody" not in operation:
                found.append((method.upper(), re.sub(r"\{[^}]+\}", "x", path)))
    return found


def test_a_body_sent_to_a_route_that_takes_none_is_refused_and_changes_nothing(world: World) -> None:
    """Found by a review: a retry's ``{"reason": …}`` was answered 201 and kept nowhere, and a
    workflow cancel with a body that is not JSON was carried out. A route that takes no body
    refuses one (400, ``body``), before anything is done; none, or ``{}``, is still accepted."""
    operations = _bodiless_operations(world)
    assert ("POST", "/api/v1/runs/x/retry") in operations and ("POST", "/api/v1/workflows/x/cancel") in operations
    before = (count(world.engine, "job_runs"), count(world.engine, "audit_log"))
    for method, path in operations:
        for sent in ('{"reason": "why"}', "not json{", "[]"):
            answer = world.client.request(
                method,
                path,
                content=sent,
                headers={**world.headers("acme", Role.ADMIN), "Content-Type": "application/json"},
            )
            assert answer.status_code == 400 and answer.json()["field"] == "body", (method, path, answer.text)
    assert (count(world.engine, "job_runs"), count(world.engine, "audit_log")) == before
    run = world.client.post(
        "/api/v1/runs", json={"job_definition_id": ACME_JOB}, headers=world.headers("acme", Role.ADMIN)
    ).json()["run"]
    world.client.post(
        f"/api/v1/runs/{run['job_run_id']}/cancel", json={"reason": "x"}, headers=world.headers("acme", Role.ADMIN)
    )
    for sent in ("", "{}", " { } "):  # nothing to say: accepted
        retried = world.client.post(
            f"/api/v1/runs/{run['job_run_id']}/retry", content=sent, headers=world.headers("acme", Role.ADMIN)
        )
        assert retried.status_code in (200, 201), retried.text


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/runs?job_definition_id=",
        "/api/v1/runs?status=",
        "/api/v1/workflows?job_definition_id=",
        "/api/v1/requests?status=",
    ],
)
def test_an_empty_query_parameter_is_refused_not_read_as_absent(world: World, url: str) -> None:
    """Found by a review: ``?job_definition_id=`` (a script's unset variable) listed every run as
    if unfiltered. An empty value is refused naming it; a console form's empty choice stays "any"."""
    answer = world.client.get(url, headers=world.headers("acme", Role.ADMIN))
    name = url.split("?")[1].split("=")[0]
    assert answer.status_code == 400 and answer.json()["field"] == name, answer.text


def test_a_console_forms_empty_choice_still_means_any(world: World) -> None:
    from tests.api.test_console_pages import _signed_in

    client = _signed_in(world, "acme", Role.ADMIN)
    for url in ("/requests?job=", "/runs?status="):
        page = client.get(url)
        assert page.status_code == 200, page.text


def test_bytes_in_a_runs_text_column_are_refused_before_a_stream_starts(world: World) -> None:
    """Found by a regression review: the SSE stream of a run holding bytes in a text column (a
    direct write to a SQLite file) answered 200 and dropped the connection mid-response; the
    run's GET answered the named refusal. The stream refuses it the same way, before starting."""
    if world.engine.store.dialect != "sqlite":
        pytest.skip("PostgreSQL refuses bytes in a text column")
    run = world.new_run("acme")
    with world.engine.store.write() as tx:
        connection(tx).exec_driver_sql(
            "UPDATE job_runs SET error_message = X'fffe' WHERE job_run_id = ?", (run.job_run_id,)
        )
    admin = world.headers("acme", Role.ADMIN)
    shown = world.client.get(f"/api/v1/runs/{run.job_run_id}", headers=admin)
    streamed = world.client.get(f"/api/v1/runs/{run.job_run_id}/stream", headers=admin)
    for answer in (shown, streamed):
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"] == "record_malformed" and answer.json()["field"] == "error_message"


@pytest.mark.parametrize("path", ["/etc/shadow", "../secret.txt", "a/../../b", "C:\\\\x"])
def test_an_api_definitions_code_path_stays_inside_the_deployment(world: World, path: str) -> None:
    """Found by a review: through the API, ``code: [/etc/shadow]`` told an admin whether any file
    of the server existed, and its SHA-256 once approved. A code path over the API is relative
    to the deployment's folder, without '..'; nothing is stored when it is not."""
    doc = {"job_definition_id": "leak", "job_class": "MAINTENANCE_JOB", "runner": "py", "body": "x", "code": [path]}
    before = count(world.engine, "definitions")
    answer = world.client.post(
        "/api/v1/definitions", json={"definitions": [doc]}, headers=world.headers("acme", Role.ADMIN)
    )
    assert answer.status_code == 422 and answer.json()["field"] == "definitions[0].code[0]", answer.text
    assert count(world.engine, "definitions") == before
