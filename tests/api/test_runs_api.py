"""Runs through the API: create with idempotency, list and filter, cancel/stop/retry state
rules, logs and artifacts, and the refusals that must store nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.api.conftest import ACME_JOB, World
from tests.helpers import count, define

from jobgate.core.tokens import Role

RUNS = "/api/v1/runs"


def admin(w: World) -> dict[str, str]:
    return w.headers("acme", Role.ADMIN)


def test_create_with_an_idempotency_key_is_repeatable_and_a_changed_request_conflicts(world: World) -> None:
    h = {**admin(world), "Idempotency-Key": "order-42"}
    first = world.client.post(RUNS, json={"job_definition_id": ACME_JOB, "params": {"n": "1"}}, headers=h)
    again = world.client.post(RUNS, json={"job_definition_id": ACME_JOB, "params": {"n": "1"}}, headers=h)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run"]["job_run_id"] == again.json()["run"]["job_run_id"]
    assert (first.json()["created"], again.json()["created"]) == (True, False)
    before = count(world.engine, "job_runs")
    for changed in ({"job_definition_id": ACME_JOB, "params": {"n": "2"}}, {"job_definition_id": "shared-job"}):
        conflict = world.client.post(RUNS, json=changed, headers=h)
        assert conflict.status_code == 409 and conflict.json()["field"] == "Idempotency-Key"
    assert count(world.engine, "job_runs") == before  # nothing stored by a refused request


def test_the_same_key_in_another_tenant_is_another_request(world: World) -> None:
    mine = world.client.post(
        RUNS, json={"job_definition_id": "shared-job"}, headers={**admin(world), "Idempotency-Key": "k"}
    )
    theirs = world.client.post(
        RUNS,
        json={"job_definition_id": "shared-job"},
        headers={**world.headers("other", Role.ADMIN), "Idempotency-Key": "k"},
    )
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["run"]["job_run_id"] != theirs.json()["run"]["job_run_id"]


def test_without_a_key_every_request_is_a_new_run(world: World) -> None:
    a = world.client.post(RUNS, json={"job_definition_id": ACME_JOB}, headers=admin(world)).json()["run"]
    b = world.client.post(RUNS, json={"job_definition_id": ACME_JOB}, headers=admin(world)).json()["run"]
    assert a["job_run_id"] != b["job_run_id"]
    assert a["requested_by"] == world.actor("acme", Role.ADMIN)  # who asked is the token, not a claim


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"job_definition_id": ACME_JOB, "params": {"n": "not-a-number"}}, 422, "n"),
        ({"job_definition_id": ACME_JOB, "params": {"zzz": "1"}}, 422, "zzz"),
        ({"job_definition_id": ACME_JOB, "colour": "red"}, 422, "colour"),
        ({"params": {}}, 422, "job_definition_id"),
        ({"job_definition_id": "no-such-job"}, 404, "job_definition_id"),
        ({"job_definition_id": ACME_JOB, "params": {"n": 1}}, 422, "params.n"),
    ],
)
def test_refused_creates_name_the_field_and_store_nothing(
    world: World, body: dict[str, object], status: int, field: str
) -> None:
    response = world.client.post(RUNS, json=body, headers=admin(world))
    assert response.status_code == status, response.text
    assert field in response.json().get("field", ""), response.json()
    assert set(response.json()) <= {"error", "message", "field", "source"}
    assert count(world.engine, "job_runs") == 0 and count(world.engine, "outbox") == 0


def test_malformed_json_is_a_400_and_an_oversized_body_a_413(world: World) -> None:
    bad = world.client.post(RUNS, content=b"{not json", headers={**admin(world), "Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"] == "bad_request"
    # what the decoder refuses otherwise than as a syntax error is named too (the body)
    for unreadable in (b'{"reason": "\xff"}', b"[" * 5000 + b"]" * 5000, b'{"n": ' + b"9" * 5000 + b"}"):
        refused = world.client.post(
            RUNS, content=unreadable, headers={**admin(world), "Content-Type": "application/json"}
        )
        assert refused.status_code == 400 and refused.json().get("field") == "body", refused.text
    huge = {"job_definition_id": ACME_JOB, "reason": "x" * 1000, "params": {f"p{i}": "v" * 1000 for i in range(1200)}}
    too_big = world.client.post(RUNS, json=huge, headers=admin(world))
    assert too_big.status_code == 413 and too_big.json()["error"] == "payload_too_large"

    def unsized() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"job_definition_id": "acme-job", "reason": "'
        yield from (b"x" * 1000 for _ in range(2000))
        yield b'"}'

    streamed = world.client.post(RUNS, content=unsized(), headers={**admin(world), "Content-Type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["error"] == "payload_too_large"
    assert count(world.engine, "job_runs") == 0


def test_list_filters_and_pages_without_repeats(world: World) -> None:
    made = [world.new_run(n=str(i)).job_run_id for i in range(5)]
    world.new_run(job="shared-job")
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"job_definition_id": ACME_JOB, "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = world.client.get(RUNS, params=params, headers=admin(world)).json()
        seen += [r["job_run_id"] for r in page["items"]]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    assert sorted(seen) == sorted(made) and len(seen) == len(set(seen))
    scheduled = world.client.get(RUNS, params={"status": "SCHEDULED"}, headers=admin(world)).json()["items"]
    assert len(scheduled) == 6
    none = world.client.get(RUNS, params={"status": "COMPLETED"}, headers=admin(world)).json()["items"]
    assert none == []
    forged = world.client.get(RUNS, params={"cursor": "AAAA"}, headers=admin(world))
    assert forged.status_code == 400 and forged.json()["field"] == "cursor"
    garbled = world.client.get(RUNS, params={"cursor": "!!!"}, headers=admin(world))
    assert garbled.status_code == 422 and garbled.json()["field"] == "cursor"
    naive = world.client.get(RUNS, params={"created_from": "2026-01-01T00:00:00"}, headers=admin(world))
    assert naive.status_code == 400 and naive.json()["field"] == "created_from"


@pytest.mark.parametrize("number", ["2026", "1700000000", "1e9", "-5", " 12.5 "])
@pytest.mark.parametrize(
    ("path", "field"),
    [(RUNS, "created_from"), (RUNS, "created_to"), ("/api/v1/audit", "at_from"), ("/api/v1/evidence", "from")],
)
def test_a_bare_number_is_not_an_instant(world: World, path: str, field: str, number: str) -> None:
    """Read as seconds since 1970, ``created_from=2026`` meant a moment in 1970: refused."""
    refused = world.client.get(path, params={field: number}, headers=admin(world))
    assert refused.status_code == 422 and refused.json()["field"] == field
    assert "ISO 8601" in refused.json()["message"]
    written = world.client.get(path, params={field: "2026-01-01T00:00:00Z"}, headers=admin(world))
    assert written.status_code != 422 or written.json()["field"] != field, written.text  # the instant itself is taken


def test_cancel_is_for_pending_runs_and_stop_for_running_ones(world: World) -> None:
    running = world.running_run()  # claims every due run, so the pending one is made after
    pending = world.new_run()
    assert world.client.post(f"{RUNS}/{pending.job_run_id}/stop", headers=admin(world)).status_code == 409
    wrong = world.client.post(f"{RUNS}/{running.job_run_id}/cancel", headers=admin(world))
    assert wrong.status_code == 409 and "stop" in wrong.json()["message"]
    cancelled = world.client.post(f"{RUNS}/{pending.job_run_id}/cancel", json={"reason": "dup"}, headers=admin(world))
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    stopped = world.client.post(f"{RUNS}/{running.job_run_id}/stop", headers=admin(world))
    assert stopped.status_code == 202 and stopped.json()["stop_requested"] is True
    again = world.client.post(f"{RUNS}/{pending.job_run_id}/cancel", headers=admin(world))
    assert again.status_code == 409


def test_retry_contract(world: World) -> None:
    """Seed 001: 409 when not terminal; 201 first, then 200 with the same deterministic retry."""
    pending = world.new_run()
    assert world.client.post(f"{RUNS}/{pending.job_run_id}/retry", headers=admin(world)).status_code == 409
    done = world.terminal_run()
    first = world.client.post(f"{RUNS}/{done.job_run_id}/retry", headers=admin(world))
    second = world.client.post(f"{RUNS}/{done.job_run_id}/retry", headers=admin(world))
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["run"]["job_run_id"] == second.json()["run"]["job_run_id"] != done.job_run_id
    assert count(world.engine, "job_runs") == 3


def test_run_detail_has_every_transition_in_order(world: World) -> None:
    run = world.terminal_run()
    detail = world.client.get(f"{RUNS}/{run.job_run_id}", headers=world.headers("acme", Role.CONSUMER)).json()
    assert [t["to_status"] for t in detail["transitions"]] == ["CREATED", "SCHEDULED", "CANCELLED"]
    assert [t["sequence"] for t in detail["transitions"]] == [1, 2, 3]
    assert detail["run"]["status"] == "CANCELLED" and detail["attempts"] == []


def test_log_tail_and_range(world: World) -> None:
    run = world.new_run()
    h = admin(world)
    assert world.client.get(f"{RUNS}/{run.job_run_id}/log", headers=h).status_code == 404  # no log yet
    world.log_for(run, "".join(f"line {i}\n" for i in range(1, 101)))
    tail = world.client.get(f"{RUNS}/{run.job_run_id}/log", params={"tail": 2}, headers=h)
    assert tail.text == "line 99\nline 100\n"
    part = world.client.get(f"{RUNS}/{run.job_run_id}/log", params={"offset": 7, "limit": 7}, headers=h)
    assert part.text == "line 2\n" and part.headers["X-Log-End"] == "14"
    # found by a review: tail with offset read the tail and ignored the offset, silently
    for both in ({"tail": 3, "offset": 1}, {"tail": 3, "limit": 5}, {"tail": 3, "offset": 0}):
        refused = world.client.get(f"{RUNS}/{run.job_run_id}/log", params=both, headers=h)
        assert refused.status_code == 400 and refused.json()["field"] == "tail", refused.text


def test_artifact_download_never_leaves_the_run_folder(world: World, tmp_path: Path) -> None:
    run = world.terminal_run()
    h = admin(world)
    assert world.client.get(f"{RUNS}/{run.job_run_id}/artifact", headers=h).status_code == 404
    path = world.artifact_for(run, b"the report")
    got = world.client.get(f"{RUNS}/{run.job_run_id}/artifact", headers=h)
    assert got.status_code == 200 and got.content == b"the report" and got.headers["X-Artifact-SHA256"]
    # A recorded path that points outside the run's folder (a symlink or a tampered row) is not served.
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    path.unlink()
    path.symlink_to(secret)
    refused = world.client.get(f"{RUNS}/{run.job_run_id}/artifact", headers=h)
    assert refused.status_code == 404 and "not yours" not in refused.text


def test_the_daily_quota_refuses_with_429_and_stores_nothing(engine_with_quota: World) -> None:
    w = engine_with_quota
    for _ in range(2):
        assert w.client.post(RUNS, json={"job_definition_id": ACME_JOB}, headers=admin(w)).status_code == 201
    refused = w.client.post(RUNS, json={"job_definition_id": ACME_JOB}, headers=admin(w))
    assert refused.status_code == 429 and refused.json()["error"] == "quota_exceeded"
    assert count(w.engine, "job_runs") == 2
    usage = w.client.get("/api/v1/quotas/usage", headers=w.headers("acme", Role.CONSUMER)).json()
    assert (usage["used"], usage["limit"], usage["tenant_id"]) == (2, 2, "acme")
    other = w.client.get("/api/v1/quotas/usage", headers=w.headers("other", Role.CONSUMER)).json()
    assert other["used"] == 0  # no count leaks across tenants


@pytest.mark.parametrize(
    ("route", "used", "allowed"),
    [
        ("/api/v1/workflows", 1, False),  # two steps on top of one run: three
        ("/api/v1/workflows", 0, True),  # two steps: exactly the quota
        (RUNS, 0, False),  # the workflow fired as a job: its run and its two steps
    ],
)
def test_a_workflow_counts_every_step_against_the_daily_quota(
    engine_with_quota: World, route: str, used: int, allowed: bool
) -> None:
    """Found by a review: a workflow start counted one run against the quota and then made one
    a step, taking a tenant at 29 of 30 to 31 (a hundred steps, 129). Its steps count, and a
    start that would go past the quota is refused whole: nothing stored."""
    w = engine_with_quota
    steps = [{"id": "one", "job": ACME_JOB, "params": {"n": "1"}}, {"id": "two", "job": ACME_JOB, "params": {"n": "2"}}]
    define(w.engine, job_definition_id="acme-two", tenant_id="acme", handler=None, workflow={"steps": steps})
    for _ in range(used):
        assert w.client.post(RUNS, json={"job_definition_id": ACME_JOB}, headers=admin(w)).status_code == 201
    before = (count(w.engine, "job_runs"), count(w.engine, "workflow_runs"), count(w.engine, "audit_log"))
    answer = w.client.post(route, json={"job_definition_id": "acme-two"}, headers=admin(w))
    if allowed:
        assert answer.status_code == 201, answer.text
        return
    assert answer.status_code == 429 and answer.json()["error"] == "quota_exceeded", answer.text
    made = 2 if route == RUNS else 1  # fired as a job, its own run besides
    assert f"would create {made + 1}" in answer.json()["message"]
    assert (count(w.engine, "job_runs"), count(w.engine, "workflow_runs"), count(w.engine, "audit_log")) == before


def test_seed_schedule_and_cancel_contract(world: World) -> None:
    body = {
        "job_definition_id": ACME_JOB,
        "scope": {"environment": "production", "region": "eu-north-1", "tenant_id": "acme", "eco_number": "ECO-A1"},
        "trigger": {"trigger_type": "manual", "requested_by": "auditor@example.com", "reason": "sample"},
    }
    made = world.client.post("/api/v1/schedule", json=body, headers=admin(world))
    assert made.status_code == 200, made.text
    out = made.json()
    assert set(out) == {"status", "job_run_id", "config_snapshot_id", "scheduled_for"} and out["status"] == "scheduled"
    elsewhere = {**body, "scope": {"tenant_id": "other"}}
    foreign = world.client.post("/api/v1/schedule", json=elsewhere, headers=admin(world))
    assert foreign.status_code == 403 and foreign.json() == {
        "error": "tenant_claim_mismatch",
        "message": "the tenant comes from your credential; this names another tenant",
        "field": "scope.tenant_id",
    }
    cancel = {"job_run_id": out["job_run_id"], "reason": "superseded", "requested_by": "ops@example.com"}
    done = world.client.post("/api/v1/cancel", json=cancel, headers=admin(world))
    assert done.json() == {"status": "cancelled", "job_run_id": out["job_run_id"], "audit_required": True}
    detail = world.client.get(f"{RUNS}/{out['job_run_id']}", headers=admin(world)).json()
    assert detail["run"]["scope"]["eco_number"] == "ECO-A1"


def test_a_refused_param_names_the_request_field_and_the_definition_in_the_message(world: World) -> None:
    refused = world.client.post(RUNS, json={"job_definition_id": ACME_JOB, "params": {"n": "x"}}, headers=admin(world))
    body = refused.json()
    assert refused.status_code == 422 and body["field"] == "params.n" and ACME_JOB in body["message"]


@pytest.fixture
def ceilinged(database_url: str, tmp_path: Path) -> Iterator[World]:
    """A world whose scheduler policy caps an activator's runs at low priority."""
    from tests.api.conftest import build_world
    from tests.helpers import make_config

    from jobgate.service.engine import Engine
    from jobgate.store.sqlstore import Store

    policy = tmp_path / "policy.yaml"
    policy.write_text("policy_id: P\nversion: 1\npriority: {id: SP-P, max: critical, by_role: {activator: low}}\n")
    store = Store(database_url)
    w = build_world(Engine(store, make_config(tmp_path, policy=str(policy))))
    with w.client:
        yield w
    store.dispose()


def test_a_retry_meets_the_priority_ceiling_of_the_askers_role(ceilinged: World) -> None:
    """A retry is judged with the caller's role, as a submit is: an activator whose runs are
    capped below the definition's priority cannot get one by retrying (it once could)."""
    w = ceilinged
    done = w.terminal_run(by=w.actor("acme", Role.ACTIVATOR))  # made by the engine, with no role
    refused = w.client.post(f"{RUNS}/{done.job_run_id}/retry", headers=w.headers("acme", Role.ACTIVATOR))
    assert refused.status_code == 403 and count(w.engine, "job_runs") == 1
    assert w.client.post(f"{RUNS}/{done.job_run_id}/retry", headers=admin(w)).status_code == 201


def test_a_log_read_slice_after_slice_cuts_no_character(world: World) -> None:
    """Found by a review: a character at a slice's boundary (a 1 MiB read) came back as two
    replacement characters when a pager read the log slice after slice."""
    run = world.new_run()
    text = "€" * 5000 + "\n"
    world.log_for(run, text)
    read, offset = "", 0
    while True:
        part = world.client.get(
            f"/api/v1/runs/{run.job_run_id}/log", params={"offset": offset, "limit": 1001}, headers=admin(world)
        )
        assert part.status_code == 200
        read += part.text
        offset = int(part.headers["X-Log-End"])
        if offset >= int(part.headers["X-Log-Size"]):
            break
    assert read == text


def test_concurrent_requests_never_take_a_tenant_past_its_daily_quota(engine_with_quota: World) -> None:
    """Found by a regression review: the quota was counted in a read before the creating
    transaction, so requests arriving together each saw room (ten at once at a quota of five
    were all created). Counting and storing are one step of the tenant's, across processes on
    PostgreSQL (an advisory lock): of six at once at a quota of two, two are created."""
    import threading

    from jobgate.core.errors import QuotaExceededError
    from jobgate.core.models import Scope
    from jobgate.service import manual

    w = engine_with_quota
    start = threading.Barrier(6)
    made: list[str] = []
    refused: list[Exception] = []

    def ask(i: int) -> None:
        start.wait(10)
        try:
            result = manual.submit_manual(
                w.engine, scope=Scope("acme"), actor="ada", job_definition_id=ACME_JOB,
                params={"n": str(i)}, reason=None, idempotency_key=None,
            )  # fmt: skip
            made.append(result.run.job_run_id)
        except QuotaExceededError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert (len(made), len(refused)) == (2, 4)
    assert count(w.engine, "job_runs") == 2
