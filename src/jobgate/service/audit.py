"""Writing to and reading the audit log (the chain rules live in ``core.audit``).

Material actions are recorded in the same transaction as the change they describe, so the
record and the change commit together or not at all. Refusals — where by definition nothing
else is written — are recorded in a transaction of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobgate.core.audit import AuditEntry, AuditEvent
from jobgate.service.engine import Engine
from jobgate.store.sql.governance import AuditFilter
from jobgate.store.sqlstore import StoreTx

__all__ = ["AuditFilter", "event", "record", "record_now", "search"]


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


def record_now(engine: Engine, *events: AuditEvent) -> list[AuditEntry]:
    """Append in a transaction of its own (a refusal: nothing else is written)."""
    with engine.store.write() as tx:
        return tx.audit_append(list(events))


def search(engine: Engine, f: AuditFilter) -> list[AuditEntry]:
    with engine.store.read(tenant_id=f.tenant_id) as tx:
        return tx.audit_list(f)
