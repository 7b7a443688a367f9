"""Writing to and reading the audit log (the chain rules live in ``core.audit``).

Material actions are recorded in the same transaction as the change they describe, so the
record and the change commit together or not at all. Refusals — where by definition nothing
else is written — are recorded in a transaction of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from jobgate.core.audit import AuditEntry, AuditEvent
from jobgate.core.records import AuditFilter, Batch, RecordsReport
from jobgate.evidence import anchors, sinks
from jobgate.evidence.keys import signer_for
from jobgate.service.engine import Engine
from jobgate.store.errors import SealWritersBusy
from jobgate.store.sqlstore import StoreTx

__all__ = [
    "AuditFilter",
    "event",
    "record",
    "record_now",
    "record_run_ends",
    "seal_pending",
    "search",
    "verify_records",
]


def event(
    tenant_id: str,
    actor: str,
    action: str,
    target_type: str,
    target_id: str,
    at: datetime,
    *,
    reason: str | None = None,
    payload: Mapping[str, Any] | None = None,
) -> AuditEvent:
    return AuditEvent(tenant_id, actor, action, target_type, target_id, at, reason, dict(payload or {}))


def record(tx: StoreTx, *events: AuditEvent) -> list[AuditEntry]:
    """Append inside the caller's write transaction."""
    return tx.audit_append(list(events))


def record_run_ends(
    engine: Engine, tx: StoreTx, events: Sequence[AuditEvent], *, anchored: Callable[[str], bool], now: datetime
) -> list[AuditEntry]:
    """Append the audit entries of material run ends, and anchor at once, in the same
    transaction, each end of a run whose definition is ``dal_anchor_required`` (seed 000 §12:
    its job events require anchoring): a one-leaf anchor, signed and written to the sink, as a
    critical artifact is (seed §48), rather than at the end of its window. ``anchored(run_id)``
    says which runs; a sink that cannot be written fails the transaction (fail closed)."""
    entries = tx.audit_append(list(events))
    direct = [e for e in entries if e.event.target_type == "run" and anchored(e.event.target_id)]
    if direct:
        sink, signer = sinks.sink_for(engine.config), signer_for(engine.config)
        for entry in direct:
            anchors.anchor_direct(tx, entry, now=now, sink=sink, signer=signer)
    return entries


def record_now(engine: Engine, *events: AuditEvent) -> list[AuditEntry]:
    """Append in a transaction of its own (a refusal: nothing else is written)."""
    with engine.store.write() as tx:
        return tx.audit_append(list(events))


def seal_pending(
    engine: Engine, now: datetime, tenant_id: str | None = None, *, patience: timedelta = timedelta(0)
) -> list[Batch]:
    """Chain every seal not yet chained into its tenant's audit log (``core.seals``): one
    ``records.sealed`` entry per tenant with seals waiting, its Merkle root over them.

    While a transaction writing seals stays open (a slow completion, a paused worker) the batch
    cannot fix its horizon and is put off (``SealWritersBusy``): tried again, a moment apart,
    for ``patience`` (a command waiting for its batch), then raised (the leader's next round
    tries again; nothing is lost, the seals wait)."""
    deadline = time.monotonic() + patience.total_seconds()
    while True:
        try:
            with engine.store.write() as tx:
                tenants = [tenant_id] if tenant_id else tx.seals_pending_tenants()
                return [b for t in tenants for b in tx.seals_chain(t, now)]
        except SealWritersBusy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)  # the writers go on meanwhile: the batch queues for 0.1 s at a time


def verify_records(engine: Engine, tenants: list[str] | None = None) -> list[RecordsReport]:
    """Recompute every sealed record of each tenant against its latest seal, and each batch of
    seals against the root its audit entry chained (read-only). ``None``: every tenant with a
    chain, seals or sealed records, also one whose audit chain is gone."""
    with engine.store.read() as tx:  # every tenant's rows: when the deployment's log began
        if tenants is None:
            tenants = sorted(set(tx.audit_tenants()) | set(tx.seals_tenants()))
        began = tx.audit_log_began()
    out = []
    for t in tenants:
        with engine.store.read(tenant_id=t) as tx:
            out.append(tx.seals_verify(t, began))
    return out


def search(engine: Engine, f: AuditFilter) -> list[AuditEntry]:
    with engine.store.read(tenant_id=f.tenant_id) as tx:
        return tx.audit_list(f)
