"""The four-eyes request workflow end to end through the API, and each of its refusals."""

from __future__ import annotations

from tests.api.conftest import ACME_JOB, SHARED_JOB, World
from tests.helpers import count, define

from jobgate.core.records import AuditFilter
from jobgate.core.tokens import Role
from jobgate.service import audit, tokens

API = "/api/v1"


def propose(w: World, role: Role = Role.CONSUMER, job: str = ACME_JOB) -> dict[str, object]:
    body = {"job_definition_id": job, "params": {"n": "7"}, "title": "month end", "reason": "close the books"}
    made = w.client.post(f"{API}/requests", json=body, headers=w.headers("acme", role))
    assert made.status_code == 201, made.text
    out: dict[str, object] = made.json()
    return out


def actions(w: World, request_id: str) -> list[str]:
    return [e.event.action for e in audit.search(w.engine, AuditFilter(tenant_id="acme", target_id=request_id))]


def test_propose_test_approve_creates_the_run_and_links_it(world: World) -> None:
    req = propose(world)
    rid = str(req["request_id"])
    assert req["status"] == "pending" and count(world.engine, "job_runs") == 0
    op = world.headers("acme", Role.OPERATOR)
    tested = world.client.post(f"{API}/requests/{rid}/test", headers=op).json()
    assert tested["admissible"] is True and count(world.engine, "job_runs") == 0  # a dry run runs nothing
    approved = world.client.post(f"{API}/requests/{rid}/approve", json={"note": "ok"}, headers=op).json()
    assert approved["status"] == "approved" and approved["decided_by"] == world.actor("acme", Role.OPERATOR)
    run = world.client.get(f"{API}/runs/{approved['job_run_id']}", headers=op).json()["run"]
    assert run["params"] == {"n": "7"} and run["reviewed_by"] == world.actor("acme", Role.OPERATOR)
    # asked for by the proposer (found by a review: the approver was recorded as both)
    assert run["requested_by"] == world.actor("acme", Role.CONSUMER) == req["requested_by"]
    assert actions(world, rid) == ["request.submitted", "request.tested", "request.approved"]
    again = world.client.post(f"{API}/requests/{rid}/approve", headers=op)
    assert again.status_code == 409 and count(world.engine, "job_runs") == 1


def test_the_proposer_can_never_approve_its_own_request(world: World) -> None:
    rid = str(propose(world, Role.OPERATOR)["request_id"])
    refused = world.client.post(f"{API}/requests/{rid}/approve", headers=world.headers("acme", Role.OPERATOR))
    assert refused.status_code == 403 and refused.json()["error"] == "four_eyes"
    assert count(world.engine, "job_runs") == 0
    assert world.client.get(f"{API}/requests/{rid}", headers=world.headers("acme", Role.ADMIN)).json()["status"] == (
        "pending"
    )
    assert actions(world, rid) == ["request.submitted", "request.refused"]


def test_reject_needs_a_note_and_ends_the_request(world: World) -> None:
    rid = str(propose(world)["request_id"])
    admin = world.headers("acme", Role.ADMIN)
    assert world.client.post(f"{API}/requests/{rid}/reject", json={"note": ""}, headers=admin).status_code == 422
    rejected = world.client.post(f"{API}/requests/{rid}/reject", json={"note": "wrong period"}, headers=admin).json()
    assert (rejected["status"], rejected["decision_note"]) == ("rejected", "wrong period")
    assert world.client.post(f"{API}/requests/{rid}/approve", headers=admin).status_code == 409
    assert count(world.engine, "job_runs") == 0


def test_a_dry_run_names_every_refusal_and_approval_is_gated_again(world: World) -> None:
    define(
        world.engine,
        job_definition_id="unreviewed",
        tenant_id="acme",
        params=[{"name": "n", "pattern": "[0-9]{1,6}"}],
        approve=False,
    )
    rid = str(propose(world, job="unreviewed")["request_id"])
    admin = world.headers("acme", Role.ADMIN)
    tested = world.client.post(f"{API}/requests/{rid}/test", headers=admin).json()
    assert tested["admissible"] is False
    assert [c["check"] for c in tested["checks"]] == ["definition_not_approved"]
    refused = world.client.post(f"{API}/requests/{rid}/approve", headers=admin)
    assert refused.status_code == 403 and refused.json()["error"] == "definition_not_approved"
    assert count(world.engine, "job_runs") == 0
    assert world.client.get(f"{API}/requests/{rid}", headers=admin).json()["status"] == "pending"


def test_consumers_see_only_their_own_requests(world: World) -> None:
    mine = str(propose(world)["request_id"])
    other = tokens.create(world.engine, tenant_id="acme", role="consumer", actor="t")
    theirs = {"Authorization": f"Bearer {other.token}"}
    assert world.client.get(f"{API}/requests/{mine}", headers=theirs).status_code == 404
    assert world.client.get(f"{API}/requests", headers=theirs).json()["items"] == []
    own = world.client.get(f"{API}/requests", headers=world.headers("acme", Role.CONSUMER)).json()["items"]
    assert [r["request_id"] for r in own] == [mine]
    listed = world.client.get(f"{API}/requests", headers=world.headers("acme", Role.OPERATOR)).json()["items"]
    assert [r["request_id"] for r in listed] == [mine]


def test_a_proposal_that_could_never_run_is_refused_at_once(world: World) -> None:
    body = {"job_definition_id": ACME_JOB, "params": {"n": "seven"}, "title": "t", "reason": "r"}
    refused = world.client.post(f"{API}/requests", json=body, headers=world.headers("acme", Role.CONSUMER))
    assert refused.status_code == 422 and refused.json()["field"] == "params.n"
    assert count(world.engine, "run_requests") == 0


def test_define_approve_run_edit_refused_reapprove_through_the_api(world: World) -> None:
    """A definition whose body is a program: the admin who applied it never approves it; a second
    person does, naming the digest they reviewed; an edit needs approving again."""
    admin = world.headers("acme", Role.ADMIN)
    second = tokens.create(world.engine, tenant_id="acme", role="admin", actor="root", principal="reviewer")
    reviewer = {"Authorization": f"Bearer {second.token}"}
    doc = {"job_definition_id": "etl-export", "job_class": "MAINTENANCE_JOB", "runner": "py", "body": "print(1)"}
    assert world.client.post(f"{API}/definitions", json={"definitions": [doc]}, headers=admin).status_code == 200
    digest = world.digest("etl-export")
    run = {"job_definition_id": "etl-export"}
    refused = world.client.post(f"{API}/runs", json=run, headers=admin)
    assert refused.status_code == 403 and refused.json()["error"] == "definition_not_approved"
    approve = f"{API}/definitions/etl-export/approve"
    own = world.client.post(approve, json={"digest": digest}, headers=admin)
    assert own.status_code == 403 and own.json()["error"] == "four_eyes", own.json()
    assert world.client.post(approve, json={"note": "CR-1"}, headers=reviewer).status_code == 422  # no digest
    wrong = world.client.post(approve, json={"digest": "sha256:" + "0" * 64}, headers=reviewer)
    assert wrong.status_code == 409 and digest in wrong.json()["message"]
    assert world.client.post(approve, json={"digest": digest, "note": "CR-1"}, headers=reviewer).status_code == 200
    assert world.client.post(f"{API}/runs", json=run, headers=admin).status_code == 201
    edited = {**doc, "body": "print(2)"}
    assert world.client.post(f"{API}/definitions", json={"definitions": [edited]}, headers=admin).status_code == 200
    status = world.client.get(f"{API}/definitions/etl-export/approval", headers=admin).json()
    assert (status["current_version"], status["approved"], len(status["history"])) == (2, False, 1)
    assert (status["matches"], status["changed"]) == (False, ["content"])
    assert world.client.post(f"{API}/runs", json=run, headers=admin).status_code == 403
    stale = world.client.post(approve, json={"digest": digest}, headers=reviewer)  # reviewed v1, v2 is current
    assert stale.status_code == 409 and digest in stale.json()["message"]
    approved = world.client.post(approve, json={"digest": world.digest("etl-export")}, headers=reviewer)
    assert approved.status_code == 200 and approved.json()["code_digest"].startswith("sha256:")
    assert world.client.post(f"{API}/runs", json=run, headers=admin).status_code == 201
    revoked = world.client.delete(f"{API}/definitions/etl-export/approval", headers=admin).json()
    assert len(revoked["cancelled_runs"]) == 2  # every approval revoked: neither run had started
    assert world.client.post(f"{API}/runs", json=run, headers=admin).status_code == 403
    assert count(world.engine, "job_runs") == 2


def test_a_limited_token_pages_through_its_own_definitions_requests(world: World) -> None:
    """Found by a review: the list was cut to ``limit`` before the requests of definitions a
    limited token may not use were dropped, and had no cursor: a page of newer requests for
    other definitions hid every one of its own, for good. Filtered in the query, paged by cursor."""
    shared = str(propose(world, job=SHARED_JOB)["request_id"])
    newer = [str(propose(world)["request_id"]) for _ in range(3)]
    limited = tokens.create(world.engine, tenant_id="acme", role="operator", actor="t", jobs=[SHARED_JOB])
    page = world.client.get(f"{API}/requests?limit=1", headers={"Authorization": f"Bearer {limited.token}"}).json()
    assert [r["request_id"] for r in page["items"]] == [shared]
    seen: list[str] = []
    cursor = None
    op = world.headers("acme", Role.OPERATOR)
    for _ in range(4):
        query = "" if cursor is None else f"&cursor={cursor}"
        page = world.client.get(f"{API}/requests?limit=2{query}", headers=op).json()
        seen += [r["request_id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([shared, *newer]) and len(seen) == 4  # each once, none skipped
    assert world.client.get(f"{API}/requests?cursor=x", headers=op).status_code == 400
