"""The audit log's entries and the hash chain that makes changing them evident (seed 000 §49).

Each tenant has one chain. An entry's hash covers its content — tenant, position, time,
actor, action, target, reason, payload — and the previous entry's hash, so changing,
removing, inserting or reordering any entry changes every hash after it. The first entry
follows ``GENESIS``. The hash is the canonical-JSON digest (``core.canonical``) of that
content, so anyone can recompute it from an export with a few lines in any language.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from jobgate.core.canonical import digest, isoformat_utc

GENESIS = "sha256:" + "0" * 64


@dataclass(frozen=True)
class AuditEvent:
    """What happened, before it has a place in the chain."""

    tenant_id: str
    actor: str
    action: str  # e.g. "definition.approved", "run.refused", "request.approved"
    target_type: str  # "definition", "run", "request", "token", "safe_mode", ...
    target_id: str
    at: datetime
    reason: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Acting:
    """The principal a request acts as and the credential it presented (``token:<id>``,
    ``oidc:<issuer>``), with the provider's display name: set for each API request."""

    actor: str
    credential: str
    display_name: str | None = None


# The caller of the request being served (``api.access``), None outside a request.
ACTING: ContextVar[Acting | None] = ContextVar("jobgate_acting", default=None)


def attributed(event: AuditEvent, acting: Acting | None) -> AuditEvent:
    """``event`` with the credential its actor acted through (payload ``via``), when the actor
    is the caller of the request being served: the record then says not only who, but through
    which credential and under which displayed name. Events of anyone else (the scheduler, a
    worker, the system) are left as they are."""
    if acting is None or event.actor != acting.actor or "via" in event.payload:
        return event
    via = {"credential": acting.credential}
    if acting.display_name:
        via["display_name"] = acting.display_name
    return replace(event, payload={**event.payload, "via": via})


@dataclass(frozen=True)
class AuditEntry:
    """An event placed in its tenant's chain: ``seq`` from 1, linked by ``prev_hash``."""

    event: AuditEvent
    seq: int
    prev_hash: str
    entry_hash: str


def entry_content(event: AuditEvent, seq: int, prev_hash: str) -> dict[str, Any]:
    return {
        "tenant_id": event.tenant_id,
        "seq": seq,
        "at": isoformat_utc(event.at),
        "actor": event.actor,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "reason": event.reason,
        "payload": dict(event.payload),
        "prev_hash": prev_hash,
    }


def entry_hash(event: AuditEvent, seq: int, prev_hash: str) -> str:
    return digest(entry_content(event, seq, prev_hash))


def chain(events: Sequence[AuditEvent], seq: int, head_hash: str) -> list[AuditEntry]:
    """Place ``events`` after the entry ``seq`` whose hash is ``head_hash``."""
    out: list[AuditEntry] = []
    for event in events:
        seq += 1
        h = entry_hash(event, seq, head_hash)
        out.append(AuditEntry(event, seq, head_hash, h))
        head_hash = h
    return out


def first_broken(entries: Sequence[AuditEntry], start_hash: str = GENESIS, start_seq: int = 0) -> int | None:
    """Index of the first entry that does not follow from the one before it (its position,
    link or hash), or None when the whole sequence verifies."""
    prev, seq = start_hash, start_seq
    for i, e in enumerate(entries):
        seq += 1
        if e.seq != seq or e.prev_hash != prev or entry_hash(e.event, e.seq, e.prev_hash) != e.entry_hash:
            return i
        prev = e.entry_hash
    return None
