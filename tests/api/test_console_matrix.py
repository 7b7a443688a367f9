"""The console's access matrix, generated from its route table: every console route with a
role rule x every role -> 403 exactly when the rule (the API's own, ``api.access``) leaves the
role out; and a page or form about a record of another tenant is a 404, as in the API.

Each route has a sample an allowed caller of ``acme`` may use, made fresh for every call; a
route without one fails the test: a new console route cannot ship without its row here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from tests.api.conftest import ACME_JOB, World

from jobgate.api.access import CONSOLE_ATTRIBUTE, rule_of
from jobgate.core.tokens import Role


@dataclass
class Sample:
    path: str
    data: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


Make = Callable[[World, Role], Sample]


def _run(w: World, role: Role) -> str:
    return w.new_run("acme", by=w.actor("acme", role)).job_run_id


def _finished(w: World, role: Role) -> str:
    return w.terminal_run("acme", by=w.actor("acme", role)).job_run_id


SAMPLES: dict[tuple[str, str], Make] = {
    ("POST", "/logout"): lambda w, r: Sample("/logout"),
    ("GET", "/"): lambda w, r: Sample("/"),
    ("GET", "/runs"): lambda w, r: Sample("/runs"),
    ("GET", "/runs/{job_run_id}"): lambda w, r: Sample(f"/runs/{_run(w, r)}"),
    ("GET", "/runs/{job_run_id}/log"): lambda w, r: Sample(f"/runs/{_run(w, r)}/log"),
    ("GET", "/runs/{job_run_id}/artifact"): lambda w, r: Sample(f"/runs/{_run(w, r)}/artifact"),
    ("GET", "/runs/{job_run_id}/events"): lambda w, r: Sample(f"/runs/{_finished(w, r)}/events"),
    ("POST", "/runs/{job_run_id}/cancel"): lambda w, r: Sample(f"/runs/{_run(w, r)}/cancel", {"reason": "x"}),
    ("POST", "/runs/{job_run_id}/stop"): lambda w, r: Sample(f"/runs/{_run(w, r)}/stop", {"reason": "x"}),
    ("POST", "/runs/{job_run_id}/retry"): lambda w, r: Sample(f"/runs/{_finished(w, r)}/retry"),
    ("POST", "/runs/{job_run_id}/requeue"): lambda w, r: Sample(f"/runs/{_run(w, r)}/requeue"),
    ("GET", "/requests"): lambda w, r: Sample("/requests"),
    ("POST", "/requests"): lambda w, r: Sample(
        "/requests", {"job_definition_id": ACME_JOB, "param.n": "1", "title": "t", "reason": "r"}
    ),
    ("GET", "/requests/{request_id}"): lambda w, r: Sample(f"/requests/{w.proposal()}"),
    ("POST", "/requests/{request_id}/test"): lambda w, r: Sample(f"/requests/{w.proposal()}/test"),
    ("POST", "/requests/{request_id}/approve"): lambda w, r: Sample(f"/requests/{w.proposal()}/approve"),
    ("POST", "/requests/{request_id}/reject"): lambda w, r: Sample(f"/requests/{w.proposal()}/reject", {"note": "n"}),
    ("GET", "/definitions"): lambda w, r: Sample("/definitions"),
    ("GET", "/definitions/{job_definition_id}"): lambda w, r: Sample(f"/definitions/{ACME_JOB}"),
    ("POST", "/definitions/{job_definition_id}/approve"): lambda w, r: Sample(
        f"/definitions/{ACME_JOB}/approve", {"digest": w.digest(ACME_JOB)}
    ),
    ("POST", "/definitions/{job_definition_id}/revoke"): lambda w, r: Sample(
        f"/definitions/{ACME_JOB}/revoke", {"reason": "x"}
    ),
    ("GET", "/audit"): lambda w, r: Sample("/audit"),
    ("GET", "/audit/proof"): lambda w, r: Sample("/audit/proof", params={"seq": "1"}),
    ("GET", "/evidence"): lambda w, r: Sample("/evidence", params={"job_run_id": _finished(w, r)}),
    ("GET", "/admin"): lambda w, r: Sample("/admin"),
    ("POST", "/admin/safe-mode"): lambda w, r: Sample("/admin/safe-mode", {"active": "true", "reason": "drill"}),
    ("POST", "/admin/tokens"): lambda w, r: Sample("/admin/tokens", {"role": "consumer", "label": "m"}),
    ("POST", "/admin/tokens/{token_id}/revoke"): lambda w, r: Sample(
        f"/admin/tokens/{w.token_ids[('acme', Role.CONSUMER)]}/revoke"
    ),
    ("GET", "/schedules"): lambda w, r: Sample("/schedules"),
    ("GET", "/schedules/{schedule_id}"): lambda w, r: Sample(f"/schedules/{w.schedule()}"),
    ("POST", "/schedules/{schedule_id}/pause"): lambda w, r: Sample(f"/schedules/{w.schedule()}/pause"),
    ("POST", "/schedules/{schedule_id}/resume"): lambda w, r: Sample(f"/schedules/{w.schedule()}/resume"),
    ("GET", "/workflows"): lambda w, r: Sample("/workflows"),
    ("GET", "/workflows/{workflow_run_id}"): lambda w, r: Sample(f"/workflows/{w.workflow()}"),
}


def _console_routes() -> list[tuple[str, str, APIRoute]]:
    found = []
    for route in _APP_ROUTES:
        if isinstance(route, APIRoute) and getattr(route.endpoint, CONSOLE_ATTRIBUTE, False):
            rule = rule_of(route.endpoint)
            if rule is not None and rule.roles is None:
                continue  # public: the sign-in pages
            for method in sorted(route.methods):
                found.append((method, route.path, route))
    return found


def _app_routes() -> list[object]:
    """The routes of the routers ``console.app.create_app`` includes (no database needed to list them)."""
    from jobgate.console import definitions, governance, requests, schedules, signin, views, workflows

    return [
        r for m in (signin, views, requests, definitions, governance, schedules, workflows) for r in m.router.routes
    ]


_APP_ROUTES = _app_routes()
ROUTES = _console_routes()


def test_every_console_route_has_a_rule_and_a_sample() -> None:
    console = [r for r in _APP_ROUTES if isinstance(r, APIRoute) and getattr(r.endpoint, CONSOLE_ATTRIBUTE, False)]
    assert [r.path for r in console if rule_of(r.endpoint) is None] == []  # deny by default
    assert len(console) == len([r for r in _APP_ROUTES if isinstance(r, APIRoute)])  # every page is the console's
    assert sorted(set(SAMPLES) ^ {(m, p) for m, p, _ in ROUTES}) == []


def _client(world: World, role: Role, tenant: str = "acme") -> tuple[TestClient, str]:
    client = TestClient(world.client.app, follow_redirects=False)
    page = client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    signed = client.post(
        "/login", data={"csrf": csrf.group(1), "method": "token", "token": world.tokens[(tenant, role)]}
    )
    assert signed.status_code == 303, signed.text
    session_csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/").text)
    assert session_csrf is not None
    return client, session_csrf.group(1)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("method", "path"), [(m, p) for m, p, _ in ROUTES], ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_console_route_matrix(world: World, method: str, path: str) -> None:
    route = next(r for m, p, r in ROUTES if (m, p) == (method, path))
    rule = rule_of(route.endpoint)
    assert rule is not None and rule.roles is not None
    for role in Role:
        client, csrf = _client(world, role)
        sample = SAMPLES[(method, path)](world, role)
        if method == "GET":
            got = client.get(sample.path, params=sample.params)
        else:
            got = client.post(sample.path, data={"csrf": csrf, **sample.data}, params=sample.params)
        if role in rule.roles:
            assert got.status_code != 403 and got.status_code < 500, (role, got.status_code, got.text[:300])
        else:
            assert got.status_code == 403, (role, got.status_code, got.text[:300])
        # Whatever the route answers (a page, a download, a refusal): never kept, never sniffed
        # (found by a review: the evidence bundle's download had neither).
        assert got.headers.get("cache-control") == "no-store", (role, method, path)
        assert got.headers.get("x-content-type-options") == "nosniff", (role, method, path)
        if "{" in path and role in rule.roles:
            theirs, theirs_csrf = _client(world, role, "other")
            if method == "GET":
                crossed = theirs.get(sample.path, params=sample.params)
            else:
                crossed = theirs.post(sample.path, data={"csrf": theirs_csrf, **sample.data}, params=sample.params)
            assert crossed.status_code == 404, (role, "other tenant", crossed.status_code, crossed.text[:300])


def test_a_malformed_last_event_id_on_the_consoles_stream_is_a_400(world: World) -> None:
    """Found by a regression review: the console's run stream kept a schema pattern on the
    header, so a malformed id was a 422 page where the API's stream answers 400 naming it."""
    client, _ = _client(world, Role.CONSUMER)
    run = _finished(world, Role.CONSUMER)
    bad = client.get(f"/runs/{run}/events", headers={"Last-Event-ID": "abc"})
    assert bad.status_code == 400 and "Last-Event-ID" in bad.text, bad.text[:300]
