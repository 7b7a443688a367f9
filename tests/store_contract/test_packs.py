"""The pack registry (seed 001 §6), on both backends: one identity per tenant (a second put of
it stores nothing), blobs by digest, each tenant's packs its own, and the snapshot the export
reads (every pack and blob of a tenant, from one statement)."""

from __future__ import annotations

import hashlib

from tests.store_contract.support import T0

from jobgate.core.packs import PackRecord, PackRef
from jobgate.service.engine import Engine


def _record(tenant: str, pack_id: str, version: str, content: bytes) -> tuple[PackRecord, dict[str, bytes]]:
    blob = "sha256:" + hashlib.sha256(content).hexdigest()
    manifest = {"definitions": [blob]}
    return PackRecord(tenant, PackRef(pack_id, version), blob, manifest, "publish", T0, "ada"), {blob: content}


def test_a_pack_identity_is_stored_once_with_its_blobs_per_tenant(engine: Engine) -> None:
    first, blobs = _record("acme", "billing", "1.0.0", b'{"job_definition_id": "a"}')
    other, other_blobs = _record("acme", "billing", "1.0.0", b'{"job_definition_id": "b"}')
    theirs, their_blobs = _record("beta", "billing", "1.0.0", b'{"job_definition_id": "c"}')
    with engine.store.write() as tx:
        assert tx.packs.put(first, blobs)
        assert not tx.packs.put(other, other_blobs)  # the same identity: nothing stored
        assert tx.packs.put(theirs, their_blobs)  # another tenant's identity of its own
    with engine.store.read() as tx:
        assert tx.packs.get("acme", PackRef("billing", "1.0.0")) == first
        assert tx.packs.get("acme", PackRef("billing", "2.0.0")) is None
        assert tx.packs.of("acme") == [first]
        snapshot = tx.packs.snapshot("acme")
    assert snapshot.packs == [first] and snapshot.blobs == blobs  # not beta's, not the refused one's
