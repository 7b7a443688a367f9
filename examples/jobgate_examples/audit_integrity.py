"""Audit Integrity (seed 000 §8, §48-49): verify jobgate's audit chain, detect conflicts in the
evidence kept outside the database, anchor a critical proof, report the status.

``verify_chain`` and ``detect_conflicts`` are independent and run in parallel. The chain is
verified with jobgate's own check (``jobgate.evidence.anchors.verify_tenant``: every entry's hash and
link, the head, every anchor against the sink's copy); a broken chain fails the step and the
step's ``on_failure: escalate`` hands the workflow to a human. ``anchor_proof`` runs only when
no conflict was found (its ``when``): it anchors the chain's head entry directly, in the
transaction that completes its run, so the anchor exists exactly once.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from jobgate import ExecutionContext, NonRetryableError
from jobgate.core import merkle
from jobgate.evidence import anchors, sinks
from jobgate.evidence.keys import signer_for, trusted_keys
from jobgate.governance.code import host_job
from jobgate.service.host import Host
from jobgate.store.sqlstore import StoreTx
from jobgate_examples.common import get_json, home, param, safe_id, write_json


def _host(ctx: ExecutionContext, host: Host) -> tuple[Any, Any, str]:
    """The steps read jobgate's own database: they are host jobs, trusted by the examples'
    configuration (``worker.trusted_handlers``)."""
    return host.engine, host.config, str(ctx.payload.scope.get("tenant_id") or "default")


def _witnessed(config: Any) -> list[dict[str, Any]] | None:
    sink = sinks.sink_for(config)
    return sink.records() if isinstance(sink, sinks.FileSink) else None


@host_job
def verify_chain(ctx: ExecutionContext, host: Host) -> dict[str, Any]:
    engine, config, tenant = _host(ctx, host)
    with engine.store.read(tenant_id=tenant) as tx:
        result = anchors.verify_tenant(tx, tenant, sink_records=_witnessed(config), keys=trusted_keys(config) or None)
        head_seq, head_hash = tx.audit_head(tenant)
    if not result.ok:
        raise NonRetryableError(
            f"audit chain of {tenant} fails at entry {result.first_bad_seq}: {result.problem}",
            error_code="AUDIT_CHAIN_BROKEN",
        )
    return {"entries": result.entries, "anchors": result.anchors, "head_seq": head_seq, "head_hash": head_hash}


@host_job
def detect_conflicts(ctx: ExecutionContext, host: Host) -> dict[str, Any]:
    """Two copies that disagree: an anchor sequence with two different chains in the sink (a
    fork), a broken link in the DAL ledger, one artifact anchored with two different hashes."""
    _engine, config, tenant = _host(ctx, host)
    found: list[str] = []
    chains: dict[int, set[str]] = defaultdict(set)
    for record in _witnessed(config) or []:
        if record["tenant_id"] == tenant:
            chains[int(record["anchor_seq"])].add(record["chain"])
    found += [
        f"anchor {seq} has {len(c)} different chains in the sink" for seq, c in sorted(chains.items()) if len(c) > 1
    ]
    ledger = get_json(ctx, "/dal/ledger", "read the DAL ledger")
    found += [f"DAL ledger: {p}" for p in ledger["problems"]]
    hashes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in ledger["entries"]:
        hashes[(e["artifact_type"], e["artifact_id"])].add(e["artifact_hash"])
    found += [
        f"DAL ledger: {t} {a} anchored with {len(h)} hashes" for (t, a), h in sorted(hashes.items()) if len(h) > 1
    ]
    for line in found:
        ctx.log(f"conflict: {line}")
    return {"conflicts": len(found), "clean": not found, "ledger_entries": len(ledger["entries"])}


@host_job
def anchor_proof(ctx: ExecutionContext, host: Host) -> dict[str, Any]:
    """Anchor the verified head entry (a one-leaf tree) to the evidence sink, exactly once."""
    _engine, config, tenant = _host(ctx, host)
    seq, head_hash = int(param(ctx, "head_seq")), param(ctx, "head_hash")

    def effect(tx: StoreTx) -> None:
        entries = tx.anchors.entries(tenant, seq, seq)
        if not entries or entries[0].entry_hash != head_hash:
            raise RuntimeError(f"audit entry {seq} is not the one verified")
        made = anchors.anchor_direct(
            tx, entries[0], now=datetime.now(UTC), sink=sinks.sink_for(config), signer=signer_for(config)
        )
        ctx.log(f"anchored entry {seq} as anchor {made.anchor_seq} ({made.root})")

    host.on_complete(ctx, effect)
    return {"anchored_seq": seq, "root": merkle.root([head_hash])}


@host_job
def report(ctx: ExecutionContext, host: Host) -> dict[str, Any]:
    """Verify again, now with the new anchor, check the head entry's proof against the anchored
    root, and write the report."""
    engine, config, tenant = _host(ctx, host)
    seq, head_hash = int(param(ctx, "head_seq")), param(ctx, "head_hash")
    with engine.store.read(tenant_id=tenant) as tx:
        result = anchors.verify_tenant(tx, tenant, sink_records=_witnessed(config), keys=trusted_keys(config) or None)
        held = tx.anchors.of(tenant)
    direct = [a for a in held if a.mode == "direct" and a.first_seq == seq == a.last_seq]
    proven = bool(direct) and merkle.verify(head_hash, [], direct[-1].root)
    conflicts = int(param(ctx, "conflicts"))
    if not result.ok:
        status = "CHAIN_BROKEN"
    elif conflicts:
        status = "CONFLICTS_FOUND"
    else:
        status = "VERIFIED_AND_ANCHORED" if proven else "VERIFIED_NOT_ANCHORED"
    body = {
        "tenant_id": tenant,
        "status": status,
        "entries": result.entries,
        "anchors": result.anchors,
        "conflicts": conflicts,
        "head_seq": seq,
        "head_anchor": None if not direct else anchors.record_of(direct[-1]),
    }
    write_json(home(ctx) / "audit" / f"report-{safe_id(param(ctx, 'report_id'), 'report_id')}.json", body)
    return {"status": status, "anchors": result.anchors}
