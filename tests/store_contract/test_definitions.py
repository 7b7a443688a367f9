"""Definition versions, their lifecycle heads and configuration snapshots, on both backends.

The contract: a version is stored once per distinct digest and never rewritten (but for a new
signature over the same content); the head names the current version and the lifecycle status;
every read is scoped to one tenant; snapshots are immutable and stored once per id.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.store_contract.support import T0

from jobgate.core.canonical import digest
from jobgate.core.encoding import to_us
from jobgate.core.models import ConfigSnapshot, DefinitionStatus
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.store.base import DefinitionPut, DefinitionPutResult
from jobgate.store.sqlstore import StoreTx

ACTIVE = DefinitionStatus.ACTIVE


def _content(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"job_definition_id": job_id, "job_class": "MAINTENANCE_JOB", **fields}


def _put(
    tx: StoreTx,
    job_id: str,
    content: dict[str, Any],
    *,
    tenant: str = "default",
    status: DefinitionStatus = ACTIVE,
    now: Any = T0,
    digest_of: dict[str, Any] | None = None,
) -> DefinitionPutResult:
    return tx.definition_put(
        DefinitionPut(
            tenant_id=tenant,
            job_definition_id=job_id,
            digest=digest(digest_of if digest_of is not None else content),
            content=content,
            job_code=job_id.upper(),
            job_class="MAINTENANCE_JOB",
            status=status,
            source=f"{job_id}.yaml",
            now=now,
            applied_by="alice",
            applied_lineage=("root",),
        )
    )


def test_definition_put_stores_a_first_version_and_says_it_created_it(engine: Engine) -> None:
    content = _content("nightly", priority="high")
    with engine.store.write() as tx:
        result = _put(tx, "nightly", content)
    stored = result.definition
    assert result.created
    assert (stored.tenant_id, stored.job_definition_id, stored.version) == ("default", "nightly", 1)
    assert (stored.digest, stored.content, stored.job_code, stored.job_class) == (
        digest(content), content, "NIGHTLY", "MAINTENANCE_JOB",
    )  # fmt: skip
    assert (stored.status, stored.is_current, stored.source, stored.created_at) == (ACTIVE, True, "nightly.yaml", T0)
    assert (stored.applied_by, stored.applied_lineage) == ("alice", ("root",))
    with engine.store.read() as tx:
        assert tx.definition_get("default", "nightly") == stored


def test_definition_put_of_the_current_digest_makes_no_version_but_takes_the_status(engine: Engine) -> None:
    content = _content("nightly")
    with engine.store.write() as tx:
        first = _put(tx, "nightly", content)
        again = _put(tx, "nightly", content, status=DefinitionStatus.SUSPENDED, now=T0 + timedelta(hours=1))
    assert not again.created
    assert again.definition.version == first.definition.version == 1
    assert again.definition.created_at == T0  # the version is the one stored first
    assert again.definition.status is DefinitionStatus.SUSPENDED
    with engine.store.read() as tx:
        assert len(tx.definition_versions("default", "nightly")) == 1
        stored = tx.definition_get("default", "nightly")
    assert stored is not None and stored.status is DefinitionStatus.SUSPENDED


def test_a_new_digest_becomes_the_next_version_and_the_current_one(engine: Engine) -> None:
    with engine.store.write() as tx:
        _put(tx, "nightly", _content("nightly", priority="low"))
        second = _put(tx, "nightly", _content("nightly", priority="high"), now=T0 + timedelta(seconds=1))
    assert second.created and second.definition.version == 2 and second.definition.is_current
    with engine.store.read() as tx:
        current = tx.definition_get("default", "nightly")
        old = tx.definition_get("default", "nightly", 1)
        missing = tx.definition_get("default", "nightly", 3)
    assert current is not None and current.version == 2 and current.content["priority"] == "high"
    assert old is not None and (old.version, old.is_current, old.content["priority"]) == (1, False, "low")
    assert missing is None


def test_reapplying_an_earlier_digest_points_the_head_back_at_that_version(engine: Engine) -> None:
    v1, v2 = _content("nightly", priority="low"), _content("nightly", priority="high")
    with engine.store.write() as tx:
        _put(tx, "nightly", v1)
        _put(tx, "nightly", v2, now=T0 + timedelta(seconds=1))
        back = _put(tx, "nightly", v1, now=T0 + timedelta(seconds=2))
    # The digest is unique per definition: the content stored before is current again, as it was.
    assert not back.created
    assert (back.definition.version, back.definition.is_current, back.definition.created_at) == (1, True, T0)
    with engine.store.read() as tx:
        versions = tx.definition_versions("default", "nightly")
    assert [(v.version, v.is_current) for v in versions] == [(1, True), (2, False)]


def test_a_new_signature_over_the_current_content_is_kept_in_the_same_version(engine: Engine) -> None:
    unsigned = _content("nightly")
    with engine.store.write() as tx:
        _put(tx, "nightly", {**unsigned, "signature": "sig-1"}, digest_of=unsigned)
        resigned = _put(tx, "nightly", {**unsigned, "signature": "sig-2"}, digest_of=unsigned)
    assert not resigned.created
    assert resigned.definition.version == 1 and resigned.definition.content["signature"] == "sig-2"
    with engine.store.read() as tx:
        stored = tx.definition_get("default", "nightly")
    assert stored is not None and stored.content["signature"] == "sig-2"
    # sealed again (a key rotation is a change jobgate makes), and the rules allow that change
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))


def test_a_re_signed_version_changed_beyond_its_signature_is_not_one_jobgate_seals(engine: Engine) -> None:
    unsigned = _content("nightly")
    with engine.store.write() as tx:
        _put(tx, "nightly", {**unsigned, "signature": "sig-1"}, digest_of=unsigned)
        _put(tx, "nightly", {**unsigned, "owner": "mallory", "signature": "sig-2"}, digest_of=unsigned)
    findings = [f for r in audit.verify_records(engine, ["default"]) for f in r.findings]
    assert [(f.kind, f.problem, f.column) for f in findings] == [("definition", "resealed", "content")]


def test_definition_reads_are_scoped_to_their_tenant(engine: Engine) -> None:
    with engine.store.write() as tx:
        _put(tx, "nightly", _content("nightly", owner="a"), tenant="tenant-a")
        _put(tx, "nightly", _content("nightly", owner="b"), tenant="tenant-b")
    with engine.store.read() as tx:
        a = tx.definition_get("tenant-a", "nightly")
        assert tx.definition_get("tenant-c", "nightly") is None
        assert tx.definition_get("tenant-a", "unknown") is None
        assert tx.definitions_list("tenant-c") == []
        assert tx.definition_versions("tenant-c", "nightly") == []
    assert a is not None and a.content["owner"] == "a"


def test_definitions_list_gives_the_current_version_of_each_definition_by_id(engine: Engine) -> None:
    with engine.store.write() as tx:
        _put(tx, "zeta", _content("zeta"))
        _put(tx, "alpha", _content("alpha", priority="low"))
        _put(tx, "alpha", _content("alpha", priority="high"))
        _put(tx, "other", _content("other"), tenant="tenant-b")
    with engine.store.read() as tx:
        listed = tx.definitions_list("default")
    assert [(d.job_definition_id, d.version, d.is_current) for d in listed] == [("alpha", 2, True), ("zeta", 1, True)]


def test_definition_versions_lists_every_version_oldest_first(engine: Engine) -> None:
    with engine.store.write() as tx:
        for i in range(3):
            _put(tx, "nightly", _content("nightly", n=i), now=T0 + timedelta(seconds=i))
        tx.definition_set_status("default", "nightly", DefinitionStatus.RETIRED, T0)
    with engine.store.read() as tx:
        versions = tx.definition_versions("default", "nightly")
        assert tx.definition_versions("default", "unknown") == []
    assert [v.version for v in versions] == [1, 2, 3]
    assert [v.content["n"] for v in versions] == [0, 1, 2]
    assert [v.is_current for v in versions] == [False, False, True]
    assert {v.status for v in versions} == {DefinitionStatus.RETIRED}  # the head's status, on each


def test_definition_set_status_moves_the_lifecycle_only_of_a_known_definition(engine: Engine) -> None:
    content = _content("nightly")
    with engine.store.write() as tx:
        _put(tx, "nightly", content)
        assert tx.definition_set_status("default", "nightly", DefinitionStatus.SUSPENDED, T0)
        assert not tx.definition_set_status("default", "unknown", DefinitionStatus.SUSPENDED, T0)
        assert not tx.definition_set_status("tenant-b", "nightly", DefinitionStatus.SUSPENDED, T0)
    with engine.store.read() as tx:
        stored = tx.definition_get("default", "nightly")
        assert tx.definitions_fingerprint()[0] == 1  # no version was added
    assert stored is not None
    assert (stored.status, stored.version, stored.content) == (DefinitionStatus.SUSPENDED, 1, content)


def test_definitions_mentioning_finds_versions_with_the_key_at_the_top_level(engine: Engine) -> None:
    with engine.store.write() as tx:
        _put(tx, "with-key", _content("with-key", permissions=["net"]))
        _put(tx, "nested", _content("nested", params={"permissions": "x"}))
        _put(tx, "as-value", _content("as-value", note='"permissions"'))
        _put(tx, "other-tenant", _content("other-tenant", permissions=[]), tenant="tenant-b")
    with engine.store.read() as tx:
        found = tx.definitions_mentioning("permissions")
        assert tx.definitions_mentioning("no_such_key") == []
    by_id = {(tenant, doc["job_definition_id"]): (d, doc) for tenant, d, doc in found}
    assert set(by_id) == {("default", "with-key"), ("tenant-b", "other-tenant")}
    d, doc = by_id[("default", "with-key")]
    assert d == digest(_content("with-key", permissions=["net"])) and doc["permissions"] == ["net"]


def test_definitions_fingerprint_moves_when_and_only_when_a_version_is_added(engine: Engine) -> None:
    later = T0 + timedelta(minutes=5)
    with engine.store.read() as tx:
        assert tx.definitions_fingerprint() == (0, 0)
    with engine.store.write() as tx:
        _put(tx, "nightly", _content("nightly"))
    with engine.store.read() as tx:
        first = tx.definitions_fingerprint()
    with engine.store.write() as tx:
        _put(tx, "nightly", _content("nightly"), now=later)  # the same digest: nothing stored
    with engine.store.read() as tx:
        assert tx.definitions_fingerprint() == first == (1, to_us(T0))
    with engine.store.write() as tx:
        _put(tx, "nightly", _content("nightly", priority="high"), now=later)
    with engine.store.read() as tx:
        assert tx.definitions_fingerprint() == (2, to_us(later))


def test_a_snapshot_is_stored_once_and_never_rewritten(engine: Engine) -> None:
    snapshot = ConfigSnapshot("snap-1", "sha256:aa", "default", {"profile": {"k": 1}}, "tenant-a")
    with engine.store.write() as tx:
        tx.snapshot_put(snapshot, T0)
        tx.snapshot_put(ConfigSnapshot("snap-1", "sha256:bb", "other", {"changed": True}, "tenant-b"), T0)
    with engine.store.read() as tx:
        assert tx.snapshot_get("snap-1") == snapshot
        assert tx.snapshot_get("snap-unknown") is None


def test_a_snapshot_seen_stored_is_not_written_again(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every submission binds a snapshot; once a committed transaction stored (or found) it,
    the store skips the insert and the encoding of its content."""
    from jobgate.store.sql import definitions as rows

    writes: list[str] = []
    real = rows.snapshot_put

    def counted(conn: Any, snapshot: ConfigSnapshot, now: int) -> bool:
        writes.append(snapshot.config_snapshot_id)
        return real(conn, snapshot, now)

    monkeypatch.setattr(rows, "snapshot_put", counted)
    snapshot = ConfigSnapshot("snap-3", "sha256:cc", "default", {"profile": {"k": 3}}, "tenant-a")
    for _ in range(3):
        with engine.store.write() as tx:
            tx.snapshot_put(snapshot, T0)
            tx.snapshot_put(snapshot, T0)
    assert writes == ["snap-3"]
    with engine.store.write() as tx:  # another tenant's snapshot of that id is its own question
        tx.snapshot_put(ConfigSnapshot("snap-3", "sha256:cc", "default", {}, "tenant-b"), T0)
    assert writes == ["snap-3", "snap-3"]


def test_a_snapshot_put_by_a_rolled_back_transaction_is_stored_by_the_next(engine: Engine) -> None:
    snapshot = ConfigSnapshot("snap-4", "sha256:dd", "default", {"profile": {"k": 4}}, "tenant-a")
    with pytest.raises(RuntimeError), engine.store.write() as tx:
        tx.snapshot_put(snapshot, T0)
        raise RuntimeError("the submission failed after binding it")
    with engine.store.read() as tx:
        assert tx.snapshot_get("snap-4") is None
    with engine.store.write() as tx:
        tx.snapshot_put(snapshot, T0)
    with engine.store.read() as tx:
        assert tx.snapshot_get("snap-4") == snapshot
