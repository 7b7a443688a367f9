"""The audit chain and its anchors (``tx.anchors``), on both backends.

The contract: each tenant has one hash chain, positions from 1 without gaps or forks, each entry
linked to the one before (``core.audit``); an entry is never back-dated before the chain's last
entry or the last anchored window; the filtered list is in chain order; an anchor takes one
position once; the unanchored head of each chain is reported; holding a chain's head makes other
appends wait.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.store_contract.support import T0, other_thread_waits

from jobgate.core.audit import GENESIS, AuditEvent, first_broken
from jobgate.core.records import Anchor, AuditFilter
from jobgate.service.engine import Engine

MINUTE = timedelta(minutes=1)


def _event(n: int, *, tenant: str = "default", at: Any = None, **kw: Any) -> AuditEvent:
    fields: dict[str, Any] = {"actor": "ada", "action": "run.cancelled", "target_type": "run", "target_id": f"R{n}"}
    fields.update(kw)
    return AuditEvent(tenant, at=T0 + n * MINUTE if at is None else at, payload={"n": n}, **fields)


def _anchor(seq: int, first: int, last: int, *, mode: str = "batch", end: Any = T0, tenant: str = "default") -> Anchor:
    return Anchor(
        tenant, seq, mode, end - MINUTE, end, first, last, last - first + 1, f"sha256:root{seq}", f"sha256:c{seq - 1}",
        f"sha256:c{seq}", end, "file", "key-1", "sig", None,
    )  # fmt: skip


def test_audit_append_chains_each_tenants_entries_from_genesis(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.audit_head("default") == (0, GENESIS)
        first = tx.audit_append([_event(1), _event(2, tenant="tenant-b"), _event(3)])
        second = tx.audit_append([_event(4)])
        assert tx.audit_append([]) == []
        head = tx.audit_head("default")
        chain = tx.audit_list(AuditFilter("default"))
    mine = [e for e in first if e.event.tenant_id == "default"] + second
    assert [e.seq for e in mine] == [1, 2, 3]
    assert [e.seq for e in first if e.event.tenant_id == "tenant-b"] == [1]
    assert mine[0].prev_hash == GENESIS and first_broken(mine) is None
    assert head == (3, mine[-1].entry_hash)
    assert chain == mine
    assert [e.event for e in chain] == [_event(1), _event(3), _event(4)]


def test_an_entry_is_never_recorded_before_the_chains_last_entry_or_anchor(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.audit_append([_event(10)])
        (late,) = tx.audit_append([_event(1)])  # its transaction committed late
        assert tx.anchors.put(_anchor(1, 1, 2, end=T0 + 20 * MINUTE))
        (after_anchor,) = tx.audit_append([_event(15)])
        (in_order,) = tx.audit_append([_event(30)])
        batch = tx.audit_append([_event(40), _event(35)])  # within one call, too
    assert [e.event.at for e in batch] == [T0 + 40 * MINUTE, T0 + 40 * MINUTE]
    assert late.event.at == T0 + 10 * MINUTE
    assert after_anchor.event.at == T0 + 20 * MINUTE
    assert in_order.event == _event(30)


def test_audit_list_filters_in_chain_order_and_pages_by_position(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.audit_append(
            [
                _event(1),
                _event(2, actor="bob"),
                _event(3, action="definition.approved", target_type="definition", target_id="nightly"),
                _event(4),
                _event(5, tenant="tenant-b"),
            ]
        )

    def seqs(**kw: Any) -> list[int]:
        with engine.store.read() as tx:
            return [e.seq for e in tx.audit_list(AuditFilter("default", **kw))]

    assert seqs() == [1, 2, 3, 4]
    assert seqs(actor="bob") == [2]
    assert seqs(action="definition.approved") == [3]
    assert seqs(target_type="run") == [1, 2, 4]
    assert seqs(target_id="R4") == [4]
    assert seqs(at_from=T0 + 2 * MINUTE, at_to=T0 + 4 * MINUTE) == [2, 3]
    assert seqs(after_seq=2) == [3, 4]
    assert seqs(after_seq=1, limit=2) == [2, 3]
    with engine.store.read() as tx:
        assert tx.audit_list(AuditFilter("tenant-c")) == []


def test_audit_tenants_are_those_with_a_chain_or_an_anchor(engine: Engine) -> None:
    with engine.store.write() as tx:
        assert tx.audit_tenants() == []
        tx.audit_append([_event(1, tenant="tenant-b"), _event(1)])
        tx.anchors.put(_anchor(1, 1, 1, tenant="tenant-c"))
        assert tx.audit_tenants() == ["default", "tenant-b", "tenant-c"]


def test_an_anchor_takes_its_position_once(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.audit_append([_event(n) for n in range(1, 6)])
        assert tx.anchors.last("default") is None and tx.anchors.of("default") == []
        assert tx.anchors.put(_anchor(1, 1, 3))
        assert not tx.anchors.put(_anchor(1, 1, 4))  # another anchorer won position 1
        assert tx.anchors.put(_anchor(2, 4, 4, mode="direct"))
        assert tx.anchors.put(_anchor(1, 1, 2, tenant="tenant-b"))
        assert tx.anchors.of("default") == [_anchor(1, 1, 3), _anchor(2, 4, 4, mode="direct")]
        assert tx.anchors.last("default") == _anchor(2, 4, 4, mode="direct")
        assert tx.anchors.last("default", "batch") == _anchor(1, 1, 3)
        assert tx.anchors.last("default", "other") is None


def test_the_keys_that_signed_anchors_are_counted_by_id_across_tenants(engine: Engine) -> None:
    """What a key rotation asks before a new key is made (``jobgate keys evidence --create``)."""
    from dataclasses import replace

    with engine.store.write() as tx:
        assert tx.anchors.signers() == {}
        tx.audit_append([_event(n) for n in range(1, 4)])
        tx.audit_append([_event(1, tenant="tenant-b")])
        tx.anchors.put(_anchor(1, 1, 1))
        tx.anchors.put(replace(_anchor(2, 2, 2, mode="direct"), key_id="key-2"))
        tx.anchors.put(replace(_anchor(3, 3, 3, mode="direct"), key_id=None, signature=None))  # unsigned
        tx.anchors.put(_anchor(1, 1, 1, tenant="tenant-b"))
        assert tx.anchors.signers() == {"key-1": 2, "key-2": 1}  # "key-3" signed nothing: not there


def test_the_entries_an_anchor_covers_are_read_by_position_and_time(engine: Engine) -> None:
    with engine.store.write() as tx:
        entries = tx.audit_append([_event(n) for n in range(1, 6)])
        tx.audit_append([_event(1, tenant="tenant-b")])
        assert tx.anchors.entries("default", 2, 4) == entries[1:4]
        assert tx.anchors.entries("default", 6, 9) == []
        assert tx.anchors.first_after("default", 2) == entries[2]
        assert tx.anchors.first_after("default", 5) is None
        # The last position after 1 of an entry written before minute 4 (entries 2 and 3).
        assert tx.anchors.last_before("default", 1, T0 + 4 * MINUTE) == 3
        assert tx.anchors.last_before("default", 3, T0 + 4 * MINUTE) is None
        assert tx.anchors.last_before("tenant-c", 0, T0 + 9 * MINUTE) is None


def test_oldest_unanchored_reports_the_first_entry_no_anchor_covers(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.audit_append([_event(n) for n in range(1, 6)])
        tx.audit_append([_event(7, tenant="tenant-b")])
        assert tx.oldest_unanchored(None) == [("default", T0 + MINUTE), ("tenant-b", T0 + 7 * MINUTE)]
        tx.anchors.put(_anchor(1, 1, 2, end=T0 + 2 * MINUTE))
        tx.anchors.put(_anchor(2, 3, 3, mode="direct"))  # entry 3 was anchored on its own
        assert tx.oldest_unanchored("default") == [("default", T0 + 4 * MINUTE)]
        tx.anchors.put(_anchor(3, 4, 5, end=T0 + 5 * MINUTE))
        assert tx.oldest_unanchored("default") == []
        assert tx.oldest_unanchored("tenant-c") == []


def test_holding_a_chains_head_makes_other_appends_wait(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.audit_append([_event(1)])
    other_thread_waits(
        engine.store, lambda tx: tx.anchors.head_lock("default"), lambda tx: tx.audit_append([_event(2)])
    )
    with engine.store.write() as tx:
        tx.anchors.head_lock("tenant-new")  # a chain with no entry yet can be held too
        assert tx.audit_head("default")[0] == 2
