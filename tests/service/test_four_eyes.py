"""Four eyes on content, per person, and approvals pinned to what was reviewed (Found 5-8 of the
governance issue): appliers never approve their own version where a second person is due,
approving names the digest reviewed, requests run exactly the version their test saw, retries
run their source run's version, and the history of approvals keeps every approver."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers import count, define, make_config

from jobgate.core.errors import ConflictError, GovernanceRefusal
from jobgate.core.governance import Person
from jobgate.core.records import AuditFilter
from jobgate.definitions import parse_definition
from jobgate.service import approvals, audit, control, requests
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store


def apply_as(engine: Engine, person: str, **fields: object) -> str:
    doc: dict[str, object] = {"job_class": "MAINTENANCE_JOB", "handler": "engine_handlers:succeed"}
    doc.update(fields)
    engine.apply_definitions([parse_definition(doc, "test", engine.config)], applied_by=person)
    return str(doc["job_definition_id"])


def approvals_count(engine: Engine) -> int:
    return count(engine, "definition_approvals")


@pytest.fixture
def four_eyes(database_url: str, tmp_path: Path) -> Engine:
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, governance={"four_eyes": True}))
    yield engine  # type: ignore[misc]
    store.dispose()


def test_with_four_eyes_the_applier_never_approves_and_another_person_does(four_eyes: Engine) -> None:
    job = apply_as(four_eyes, "alice", job_definition_id="ledger-close")
    with pytest.raises(GovernanceRefusal) as refused:
        approvals.approve(four_eyes, "default", job, actor="alice")
    assert (refused.value.code, refused.value.rule) == ("four_eyes", "applier_cannot_approve")
    minted = Person("mallory", ("alice",))  # a token alice minted is alice's other hand
    with pytest.raises(GovernanceRefusal):
        approvals.approve(four_eyes, "default", job, actor="mallory", approver=minted)
    assert approvals_count(four_eyes) == 0
    entries = audit.search(four_eyes, AuditFilter(tenant_id="default", action="definition.approval_refused"))
    assert [e.event.actor for e in entries] == ["alice", "mallory"]
    approvals.approve(four_eyes, "default", job, actor="bob")
    assert approvals.status(four_eyes, "default", job).matches


def test_a_body_that_is_a_program_always_needs_a_second_person(engine: Engine) -> None:
    job = apply_as(engine, "alice", job_definition_id="adhoc-script", handler=None, runner="py", body="print(1)")
    with pytest.raises(GovernanceRefusal) as refused:
        approvals.approve(engine, "default", job, actor="alice")  # four_eyes is off: still refused
    assert refused.value.rule == "applier_cannot_approve" and approvals_count(engine) == 0
    approvals.approve(engine, "default", job, actor="bob")


def test_a_runner_that_says_its_body_is_data_needs_no_second_person(database_url: str, tmp_path: Path) -> None:
    runners = {"copy": {"binary": "python3", "args": ["-c", "pass", "{{tmpfile}}"], "executes_body": False}}
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, runners=runners))
    try:
        job = apply_as(engine, "alice", job_definition_id="scenario", handler=None, runner="copy", body="a: 1")
        approvals.approve(engine, "default", job, actor="alice")
    finally:
        store.dispose()


def test_approval_names_the_reviewed_digest_and_nothing_else_is_approved(engine: Engine) -> None:
    job = define(engine, approve=False, job_definition_id="export")
    reviewed = approvals.status(engine, "default", job).current_digest
    define(engine, approve=False, job_definition_id="export", description="edited after the review")
    with pytest.raises(ConflictError) as stale:
        approvals.approve(engine, "default", job, actor="root", digest=reviewed)
    current = approvals.status(engine, "default", job).current_digest
    assert reviewed in stale.value.message and current in stale.value.message
    with pytest.raises(ConflictError):
        approvals.approve(engine, "default", job, actor="root", digest=current, code_digest="sha256:" + "0" * 64)
    assert approvals_count(engine) == 0
    made = approvals.approve(engine, "default", job, actor="root", digest=current)
    assert made.version == 2 and made.code_digest is not None


def test_approving_a_digest_again_keeps_the_first_approver(engine: Engine) -> None:
    job = define(engine, approve=False)
    first = approvals.approve(engine, "default", job, actor="ada", note="CR-1")
    second = approvals.approve(engine, "default", job, actor="bea", note="CR-2")
    history = approvals.status(engine, "default", job).history
    assert [(a.approved_by, a.note) for a in history] == [("ada", "CR-1"), ("bea", "CR-2")]
    assert first.approval_id < second.approval_id and all(a.active for a in history)
    approvals.revoke(engine, "default", job, actor="root")
    assert not any(a.active for a in approvals.status(engine, "default", job).history)


def test_a_request_is_never_approved_by_its_proposer_or_their_minted_tokens(engine: Engine) -> None:
    job = define(engine)
    req = requests.propose(
        engine, tenant_id="default", requester="carol", job_definition_id=job, params={}, title="t", reason="r"
    )
    for approver in (Person("carol"), Person("carol-bot", ("carol",))):
        with pytest.raises(GovernanceRefusal) as refused:
            requests.approve(engine, "default", req.request_id, actor=approver.name, approver=approver)
        assert refused.value.code == "four_eyes"
    minted_req = requests.propose(
        engine,
        tenant_id="default",
        requester="dave-bot",
        requester_lineage=("dave",),
        job_definition_id=job,
        params={},
        title="t",
        reason="r",
    )
    with pytest.raises(GovernanceRefusal):  # dave minted the proposer's token
        requests.approve(engine, "default", minted_req.request_id, actor="dave")
    assert count(engine, "job_runs") == 0
    done = requests.approve(engine, "default", req.request_id, actor="dave")
    assert done.status == "approved" and done.job_run_id is not None


def test_a_request_runs_exactly_the_version_its_test_saw(engine: Engine) -> None:
    job = define(engine, job_definition_id="payroll")
    req = requests.propose(
        engine, tenant_id="default", requester="carol", job_definition_id=job, params={}, title="t", reason="r"
    )
    assert req.version == 1
    define(engine, job_definition_id="payroll", description="v2, approved too")
    with pytest.raises(ConflictError) as changed:
        requests.approve(engine, "default", req.request_id, actor="dave")
    assert "test it again" in changed.value.message and count(engine, "job_runs") == 0
    (refused,) = audit.search(engine, AuditFilter(tenant_id="default", action="request.refused"))
    assert refused.event.actor == "dave" and refused.event.target_id == req.request_id
    assert refused.event.reason == "definition_changed"
    assert refused.event.payload["request_saw"]["version"] == 1 and refused.event.payload["current"]["version"] == 2
    assert requests.get(engine, "default", req.request_id).status == "pending"
    tested, verdict = requests.test(engine, "default", req.request_id, actor="dave")
    assert verdict.admissible and tested.version == 2
    define(engine, job_definition_id="payroll", description="v3, applied after the test")
    with pytest.raises(ConflictError):
        requests.approve(engine, "default", req.request_id, actor="dave")
    requests.test(engine, "default", req.request_id, actor="dave")
    done = requests.approve(engine, "default", req.request_id, actor="dave")
    with engine.store.read() as tx:
        run = tx.run_get(str(done.job_run_id))
    assert run is not None and run.definition_version == 3 and run.reviewed_by == "dave"


def test_a_retry_runs_the_source_runs_version(engine: Engine) -> None:
    job = define(engine, job_definition_id="report")
    source = engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run
    control.cancel_run(engine, source.job_run_id, actor="ops")
    define(engine, job_definition_id="report", description="v2")
    retry, created = control.retry_run(engine, source.job_run_id, actor="ops")
    assert created and (retry.definition_version, retry.definition_digest) == (1, source.definition_digest)


def test_a_retry_of_a_version_no_longer_approved_is_refused(engine: Engine) -> None:
    job = define(engine, job_definition_id="report")
    source = engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada").run
    control.cancel_run(engine, source.job_run_id, actor="ops")
    approvals.revoke(engine, "default", job, actor="root")
    define(engine, job_definition_id="report", description="v2, approved")
    with pytest.raises(GovernanceRefusal) as refused:
        control.retry_run(engine, source.job_run_id, actor="ops")
    assert refused.value.code == "definition_not_approved" and count(engine, "job_runs") == 1


def test_a_workflow_fired_as_a_run_with_an_unapproved_step_stores_nothing(engine: Engine) -> None:
    step = define(engine, approve=False, job_definition_id="unapproved-step")
    flow = define(engine, handler=None, job_definition_id="flow", workflow={"steps": [{"id": "a", "job": step}]})
    with pytest.raises(GovernanceRefusal) as refused:
        engine.submit(SubmitRequest(flow, requested_by="ada"), actor="ada")
    assert refused.value.code == "definition_not_approved"
    assert count(engine, "job_runs") == 0 and count(engine, "workflow_runs") == 0
    entries = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused", target_id=flow))
    assert [e.event.reason for e in entries] == ["definition_not_approved"]
