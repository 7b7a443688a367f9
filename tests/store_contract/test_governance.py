"""Governance records: definition approvals, four-eyes run requests, API tokens, safe mode and
licensed slots, on both backends.

The contract: approvals are history (every approval a new row, a revocation closes every active
one of its digest); a request is decided once, by compare-and-set on ``pending``, and tested only
while pending; a token is revoked once, by its tenant; safe mode has at most one open period per
tenant, numbered in order; a licensed slot is held from a run's creation until it ends. Every read
is scoped to its tenant.
"""

from __future__ import annotations

from datetime import timedelta

from tests.store_contract.support import T0, apply, completion, make, running

from jobgate.core.models import DefinitionStatus
from jobgate.core.records import Approval, RunRequest, StoredToken
from jobgate.service.engine import Engine
from jobgate.store.base import DefinitionPut
from jobgate.store.sqlstore import StoreTx


def _approval(job: str = "nightly", digest: str = "sha256:d1", *, tenant: str = "default", **kw: object) -> Approval:
    fields: dict[str, object] = {"version": 1, "approved_by": "admin", "approved_at": T0, "note": "looks right"}
    fields.update(kw)
    return Approval(tenant, job, digest, revoked_at=None, revoked_by=None, **fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- approvals


def test_approval_put_records_a_new_approval_each_time_with_its_id(engine: Engine) -> None:
    identity = {"handler": "jobs:run", "digest": "sha256:code"}
    with engine.store.write() as tx:
        first = tx.approval_put(_approval(code_digest="sha256:code", code_identity=identity))
        second = tx.approval_put(_approval(approved_by="other-admin"))
    assert second.approval_id > first.approval_id > 0
    assert first == _approval(code_digest="sha256:code", code_identity=identity, approval_id=first.approval_id)
    assert first.active
    with engine.store.read() as tx:
        assert tx.approval_by_id(first.approval_id) == first
        assert tx.approval_by_id(second.approval_id) == second
        assert tx.approval_by_id(second.approval_id + 100) is None
        assert tx.approvals_list("default", "nightly") == [first, second]


def test_approval_get_prefers_the_newest_active_approval_of_the_digest(engine: Engine) -> None:
    with engine.store.write() as tx:
        kept = tx.approval_put(_approval(approved_by="a"))
        tx.approval_put(_approval(digest="sha256:d2", approved_by="b"))
        tx.approval_put(_approval(tenant="tenant-b", approved_by="c"))
    with engine.store.read() as tx:
        assert tx.approval_get("default", "nightly", "sha256:d1") == kept
        assert tx.approval_get("default", "nightly", "sha256:other") is None
        assert tx.approval_get("tenant-c", "nightly", "sha256:d1") is None
    with engine.store.write() as tx:
        assert tx.approval_revoke("default", "nightly", "sha256:d1", "sec", T0 + timedelta(hours=1))
    with engine.store.read() as tx:
        revoked = tx.approval_get("default", "nightly", "sha256:d1")  # none active: the newest one
    assert revoked is not None and revoked.approval_id == kept.approval_id and not revoked.active
    with engine.store.write() as tx:
        again = tx.approval_put(_approval(approved_by="d"))
    with engine.store.read() as tx:
        assert tx.approval_get("default", "nightly", "sha256:d1") == again


def test_approval_revoke_closes_every_active_approval_of_the_digest_once(engine: Engine) -> None:
    at = T0 + timedelta(hours=1)
    with engine.store.write() as tx:
        tx.approval_put(_approval())
        tx.approval_put(_approval())
        other = tx.approval_put(_approval(digest="sha256:d2"))
        assert tx.approval_revoke("default", "nightly", "sha256:d1", "sec", at)
        assert not tx.approval_revoke("default", "nightly", "sha256:d1", "sec", at)
        assert not tx.approval_revoke("tenant-b", "nightly", "sha256:d2", "sec", at)
        listed = tx.approvals_list("default", "nightly")
    assert [(a.digest, a.revoked_at, a.revoked_by) for a in listed] == [
        ("sha256:d1", at, "sec"),
        ("sha256:d1", at, "sec"),
        ("sha256:d2", None, None),
    ]
    assert listed[2] == other


def test_approvals_active_names_the_keys_with_an_active_approval_and_its_code(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.approval_put(_approval(code_digest="sha256:code-1"))
        tx.approval_put(_approval(job="legacy", digest="sha256:l1"))  # approved before code identity
        tx.approval_put(_approval(job="gone", digest="sha256:g1"))
        tx.approval_revoke("default", "gone", "sha256:g1", "sec", T0)
        tx.approval_put(_approval(tenant="tenant-b", code_digest="sha256:code-b"))
    keys = [
        ("default", "nightly", "sha256:d1"),
        ("default", "legacy", "sha256:l1"),
        ("default", "gone", "sha256:g1"),
        ("default", "nightly", "sha256:unapproved"),
    ]
    with engine.store.read() as tx:
        active = tx.approvals_active(keys)
        assert tx.approvals_active([]) == {}
    assert active == {("default", "nightly", "sha256:d1"): "sha256:code-1", ("default", "legacy", "sha256:l1"): None}


def test_approvals_active_names_the_code_the_newest_active_approval_binds(engine: Engine) -> None:
    """Approving a digest again (its code changed) adds a row; the newest active one names the code."""
    key = ("default", "nightly", "sha256:d1")
    with engine.store.write() as tx:
        tx.approval_put(_approval(code_digest="sha256:code-1"))
        newest = tx.approval_put(_approval(code_digest="sha256:code-2"))
        assert tx.approvals_active([key]) == {key: "sha256:code-2"}
        assert tx.approval_get(*key) == newest


# ---------------------------------------------------------------------------- run requests


def _request(request_id: str, *, at: object = T0, tenant: str = "default", by: str = "bob") -> RunRequest:
    return RunRequest(
        request_id, tenant, "nightly", {"day": "monday"}, "Rerun", "missed", by, "pending", at,  # type: ignore[arg-type]
        digest="sha256:d1", version=1, requester_lineage=("root",),
    )  # fmt: skip


def test_a_run_request_is_stored_and_read_back_within_its_tenant(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.request_put(_request("RQ-1"))
    with engine.store.read() as tx:
        assert tx.request_get("default", "RQ-1") == _request("RQ-1")
        assert tx.request_get("tenant-b", "RQ-1") is None
        assert tx.request_get("default", "RQ-unknown") is None


def test_requests_list_is_newest_first_filters_and_pages(engine: Engine) -> None:
    with engine.store.write() as tx:
        for i in range(4):
            tx.request_put(_request(f"RQ-{i}", at=T0 + timedelta(seconds=i // 2), by="bob" if i % 2 else "eve"))
        tx.request_put(_request("RQ-other", tenant="tenant-b"))
        tx.request_decide("default", "RQ-3", status="rejected", by="ada", at=T0, note=None, job_run_id=None)

    def ids(**kw: object) -> list[str]:
        with engine.store.read() as tx:
            return [r.request_id for r in tx.requests_list("default", **kw)]  # type: ignore[arg-type]

    assert ids() == ["RQ-3", "RQ-2", "RQ-1", "RQ-0"]
    assert ids(status="pending") == ["RQ-2", "RQ-1", "RQ-0"]
    assert ids(requested_by="bob") == ["RQ-3", "RQ-1"]
    assert ids(limit=2) == ["RQ-3", "RQ-2"]
    assert ids(before=(T0 + timedelta(seconds=1), "RQ-2")) == ["RQ-1", "RQ-0"]
    assert ids(before=(T0, "RQ-1")) == ["RQ-0"]


def test_a_request_is_tested_while_pending_and_keeps_the_version_it_saw(engine: Engine) -> None:
    at = T0 + timedelta(minutes=1)
    with engine.store.write() as tx:
        tx.request_put(_request("RQ-1"))
        assert tx.request_tested("default", "RQ-1", "carol", at, {"admitted": True}, ("sha256:d2", 2))
        assert not tx.request_tested("tenant-b", "RQ-1", "carol", at, {"admitted": True})
        tested = tx.request_get("default", "RQ-1")
    assert tested is not None
    assert (tested.tested_at, tested.tested_by, tested.verdict) == (at, "carol", {"admitted": True})
    assert (tested.digest, tested.version, tested.status) == ("sha256:d2", 2, "pending")
    with engine.store.write() as tx:
        assert tx.request_tested("default", "RQ-1", "carol", at, {"admitted": False})  # unpinned: keeps the version
        assert tx.request_get("default", "RQ-1").version == 2  # type: ignore[union-attr]
        tx.request_decide("default", "RQ-1", status="approved", by="ada", at=at, note=None, job_run_id="TGJOBRUN-1")
        assert not tx.request_tested("default", "RQ-1", "carol", at, {"admitted": True})  # decided: not again


def test_a_request_is_decided_once(engine: Engine) -> None:
    at = T0 + timedelta(minutes=2)
    with engine.store.write() as tx:
        tx.request_put(_request("RQ-1"))
        assert tx.request_decide("default", "RQ-1", status="approved", by="ada", at=at, note="ok", job_run_id="R-1")
        assert not tx.request_decide("default", "RQ-1", status="rejected", by="eve", at=at, note="no", job_run_id=None)
        unknown = tx.request_decide("default", "RQ-9", status="rejected", by="eve", at=at, note=None, job_run_id=None)
        assert not unknown
        decided = tx.request_get("default", "RQ-1")
    assert decided is not None
    assert (decided.status, decided.decided_by, decided.decided_at, decided.decision_note, decided.job_run_id) == (
        "approved", "ada", at, "ok", "R-1",
    )  # fmt: skip


# ---------------------------------------------------------------------------- tokens


def _token(token_id: str, *, tenant: str = "default", at: object = T0, **kw: object) -> StoredToken:
    fields: dict[str, object] = {
        "role": "operator", "jobs": ("nightly",), "label": "ci", "secret_hash": f"hash-{token_id}",
        "created_by": "admin", "created_at": at, "expires_at": T0 + timedelta(days=30), "revoked_at": None,
        "revoked_by": None,
    }  # fmt: skip
    fields.update(kw)
    return StoredToken(token_id, tenant, **fields)  # type: ignore[arg-type]


def test_a_token_is_stored_and_found_by_its_id(engine: Engine) -> None:
    every_job = _token("tok-2", jobs=None, expires_at=None, principal="alice", minted_by=("root", "ops"))
    with engine.store.read() as tx:
        assert not tx.tokens_exist()
    with engine.store.write() as tx:
        tx.token_put(_token("tok-1"))
        tx.token_put(every_job)
    with engine.store.read() as tx:
        assert tx.tokens_exist()
        assert tx.token_get("tok-1") == _token("tok-1")
        assert tx.token_get("tok-2") == every_job
        assert tx.token_get("tok-unknown") is None
    with engine.store.write() as tx:  # read to act on its authority: the row held to the commit
        assert tx.token_get("tok-1", lock=True) == _token("tok-1")
        assert tx.token_get("tok-unknown", lock=True) is None


def test_tokens_list_gives_a_tenants_tokens_oldest_first(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.token_put(_token("tok-b", at=T0 + timedelta(seconds=2)))
        tx.token_put(_token("tok-a", at=T0 + timedelta(seconds=1)))
        tx.token_put(_token("tok-x", tenant="tenant-b", at=T0))
    with engine.store.read() as tx:
        assert [t.token_id for t in tx.tokens_list("default")] == ["tok-a", "tok-b"]
        assert [t.token_id for t in tx.tokens_list(None)] == ["tok-x", "tok-a", "tok-b"]
        assert tx.tokens_list("tenant-c") == []


def test_a_token_is_revoked_once_by_its_own_tenant(engine: Engine) -> None:
    at = T0 + timedelta(hours=1)
    with engine.store.write() as tx:
        tx.token_put(_token("tok-1"))
        assert not tx.token_revoke("tenant-b", "tok-1", "mallory", at)
        assert tx.token_revoke("default", "tok-1", "admin", at)
        assert not tx.token_revoke("default", "tok-1", "admin", at + timedelta(hours=1))
        assert not tx.token_revoke("default", "tok-unknown", "admin", at)
        revoked = tx.token_get("tok-1")
    assert revoked is not None and (revoked.revoked_at, revoked.revoked_by) == (at, "admin")


def test_an_ended_session_is_found_until_it_would_have_expired_then_forgotten(engine: Engine) -> None:
    """``session_end`` names a signed-out console session; a second end of it changes nothing,
    and each end drops the sessions that would have expired by then."""
    with engine.store.write(tenant_id="default") as tx:
        tx.session_end("default", "a" * 64, T0, T0 + timedelta(hours=8))
        tx.session_end("default", "a" * 64, T0 + timedelta(minutes=1), T0 + timedelta(hours=9))  # no-op
        tx.session_end("default", "b" * 64, T0, T0 + timedelta(minutes=5))
    with engine.store.read(tenant_id="default") as tx:
        assert tx.session_ended("a" * 64) and tx.session_ended("b" * 64) and not tx.session_ended("c" * 64)
    with engine.store.write(tenant_id="default") as tx:  # b's cookie has expired by now: its row goes
        tx.session_end("default", "c" * 64, T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    with engine.store.read(tenant_id="default") as tx:
        assert [tx.session_ended(x * 64) for x in "abc"] == [True, False, True]


# ---------------------------------------------------------------------------- safe mode


def test_safe_mode_has_one_open_period_per_tenant_numbered_in_order(engine: Engine) -> None:
    t1, t2, t3 = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2), T0 + timedelta(minutes=3)
    actions = {"profile_overrides": {"timeout": 5}}
    with engine.store.write() as tx:
        assert tx.safe_mode_current("default") is None
        assert tx.safe_mode_deactivate("default", "ada", "nothing on", T0) is None
        first = tx.safe_mode_activate("default", "ada", "incident", T0, actions)
        assert tx.safe_mode_activate("default", "bob", "again", t1) is None  # one is open already
        assert tx.safe_mode_current("default") == first
        assert tx.safe_mode_current("tenant-b") is None
        closed = tx.safe_mode_deactivate("default", "bob", "resolved", t2)
        assert tx.safe_mode_deactivate("default", "bob", "resolved", t2) is None
        assert tx.safe_mode_current("default") == closed
        second = tx.safe_mode_activate("default", "eve", "drill", t3)
    assert first is not None and closed is not None and second is not None
    assert (first.activation, first.activated_at, first.activated_by, first.actions, first.active) == (
        1, T0, "ada", actions, True,
    )  # fmt: skip
    assert (closed.activation, closed.deactivated_at, closed.deactivated_by, closed.deactivation_reason) == (
        1, t2, "bob", "resolved",
    )  # fmt: skip
    assert (closed.activated_at, closed.reason, closed.actions, closed.active) == (T0, "incident", actions, False)
    assert (second.activation, second.actions, second.active) == (2, {}, True)


def test_safe_mode_periods_lists_a_tenants_periods_oldest_first(engine: Engine) -> None:
    with engine.store.write() as tx:
        for i in range(3):
            tx.safe_mode_activate("default", "ada", f"incident {i}", T0 + timedelta(hours=2 * i))
            if i < 2:
                tx.safe_mode_deactivate("default", "ada", "over", T0 + timedelta(hours=2 * i + 1))
        tx.safe_mode_activate("tenant-b", "bob", "theirs", T0)
    with engine.store.read() as tx:
        periods = tx.safe_mode_periods("default")
        recent = tx.safe_mode_periods("default", ending_after=T0 + timedelta(hours=1))
        newest = tx.safe_mode_periods("default", limit=2)
        assert tx.safe_mode_periods("tenant-c") == []
    assert [p.activation for p in periods] == [1, 2, 3]
    assert [p.reason for p in periods] == ["incident 0", "incident 1", "incident 2"]
    assert [p.activation for p in recent] == [2, 3]  # period 1 closed at the bound, not after it
    assert [p.activation for p in newest] == [2, 3]


# ---------------------------------------------------------------------------- licensed slots


def _slots(tx: StoreTx) -> int:
    return tx.licence_slots_taken(T0)


def test_a_licensed_slot_is_held_from_creation_until_the_run_ends(engine: Engine) -> None:
    waiting = make(engine, 2)
    (busy,) = running(engine)
    with engine.store.write() as tx:
        assert _slots(tx) == 0
        tx.licence_slots_take([(r.job_run_id, r.tenant_id) for r in [*waiting, busy]], T0)
        tx.licence_slots_take([], T0)
        assert _slots(tx) == 3
    assert apply(engine, [completion(engine, busy)])
    with engine.store.write() as tx:
        assert _slots(tx) == 2


# ---------------------------------------------------------------------------- reads ahead


def _definition(tx: StoreTx, job: str) -> None:
    content = {"job_definition_id": job, "job_class": "MAINTENANCE_JOB"}
    tx.definition_put(
        DefinitionPut(
            tenant_id="default",
            job_definition_id=job,
            digest="sha256:d1",
            content=content,
            job_code=job.upper(),
            job_class="MAINTENANCE_JOB",
            status=DefinitionStatus.ACTIVE,
            source=f"{job}.yaml",
            now=T0,
            applied_by="alice",
            applied_lineage=("root",),
        )
    )


def test_read_ahead_answers_as_the_reads_it_stands_for_and_only_once(engine: Engine) -> None:
    """A submission's first reads asked together (one round trip on PostgreSQL) answer exactly
    what the reads would; each is handed out once, so a later read sees what committed since."""
    with engine.store.write() as tx:
        _definition(tx, "nightly")
        approved = tx.approval_put(_approval(code_digest="sha256:code"))
        tx.approval_put(_approval(digest="sha256:other"))
        tx.safe_mode_activate("default", "sec", "drill", T0)
    keys = [("default", "nightly", "sha256:d1"), ("default", "nightly", "sha256:gone")]
    with engine.store.write() as tx:
        plain = (tx.definition_get("default", "nightly"), tx.approvals_active(keys), tx.safe_mode_current("default"))
    assert plain[0] is not None and plain[0].job_definition_id == "nightly"
    assert plain[1] == {("default", "nightly", "sha256:d1"): approved.code_digest}
    with engine.store.write() as tx:
        tx.read_ahead("default", "nightly")
        ahead = (tx.definition_get("default", "nightly"), tx.approvals_active(keys), tx.safe_mode_current("default"))
        assert ahead == plain
        if engine.store.dialect != "postgresql":  # SQLite: one writer, nothing commits meanwhile
            return
        # handed out once: what another transaction commits now is seen by the next read
        with engine.store.write() as other:
            other.safe_mode_deactivate("default", "sec", "drill over", T0 + timedelta(minutes=1))
            other.approval_revoke("default", "nightly", "sha256:d1", "sec", T0 + timedelta(minutes=1))
        assert tx.approvals_active(keys) == {}  # READ COMMITTED: each statement sees the latest
        period = tx.safe_mode_current("default")
        assert period is not None and not period.active


def test_a_write_in_the_transaction_forgets_what_was_read_ahead(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.approval_put(_approval())
    key = [("default", "nightly", "sha256:d1")]
    with engine.store.write() as tx:
        tx.read_ahead("default", "nightly")
        assert tx.approval_revoke("default", "nightly", "sha256:d1", "sec", T0)
        assert tx.approvals_active(key) == {}  # the revocation, not the approval read before it
        tx.read_ahead("default", "nightly")
        tx.safe_mode_activate("default", "sec", "incident", T0)
        period = tx.safe_mode_current("default")
        assert period is not None and period.active
