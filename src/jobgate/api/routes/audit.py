"""The audit log, read by auditors and admins of the tenant (chain order, filters, paging)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from jobgate.api import pagination
from jobgate.api.access import AUDIT, WholeTenant, allow, principal
from jobgate.api.server_state import ServerState, server_state
from jobgate.evidence import anchors, sinks
from jobgate.evidence import keys as evidence_keys
from jobgate.service import audit
from jobgate.service.tokens import Principal
from jobgate.views.schemas import AuditEntryOut, Page

router = APIRouter(prefix="/api/v1", tags=["audit"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}$"


@router.get("/audit", response_model=Page[AuditEntryOut])
@allow(AUDIT)
def list_audit(
    caller: WholeTenant,
    state: State,
    actor: Annotated[str | None, Query(max_length=200)] = None,
    action: Annotated[str | None, Query(pattern=NAME)] = None,
    target_type: Annotated[str | None, Query(pattern=NAME)] = None,
    target_id: Annotated[str | None, Query(max_length=200)] = None,
    at_from: pagination.Instant = None,
    at_to: pagination.Instant = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$", description="the last seq seen")] = None,
) -> Page[AuditEntryOut]:
    """The tenant's entries in chain order; ``next_cursor`` is the last position returned."""
    f = audit.AuditFilter(
        tenant_id=caller.tenant_id,
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=target_id,
        at_from=pagination.aware(at_from, "at_from"),
        at_to=pagination.aware(at_to, "at_to"),
        after_seq=int(cursor or 0),
        limit=limit + 1,
    )
    found = audit.search(state.engine, f)
    page = found[:limit]
    next_cursor = str(page[-1].seq) if len(found) > limit else None
    return Page[AuditEntryOut](items=[AuditEntryOut.of(e) for e in page], next_cursor=next_cursor)


class VerificationOut(BaseModel):
    tenant_id: str
    entries: int
    anchors: int
    ok: bool
    first_bad_seq: int | None
    problem: str | None
    unsigned_anchors: int = 0  # accepted unsigned: made before the evidence key existed
    signatures_checked: bool = True  # False: the deployment has no evidence key


@router.get("/audit/verify", response_model=VerificationOut)
@allow(AUDIT)
def verify_audit(caller: WholeTenant, state: State) -> VerificationOut:
    """Recompute the tenant's chain, head and anchors, against the sink's copies (a file, or an
    HTTP sink read back); a sink that cannot be read fails the verification (it says so)."""
    sink = sinks.sink_for(state.engine.config)
    try:
        witnessed = sink.records()
    except sinks.SinkUnreadable as exc:
        with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
            head, _ = tx.audit_head(caller.tenant_id)
        return VerificationOut(
            tenant_id=caller.tenant_id, entries=head, anchors=0, ok=False, first_bad_seq=None, problem=exc.message
        )
    keys = evidence_keys.trusted_keys(state.engine.config)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        result = anchors.verify_configured(
            tx, state.engine.config, caller.tenant_id, sink_records=witnessed, now=state.engine.clock.now()
        )
    return VerificationOut(**result.__dict__, signatures_checked=bool(keys))


class EvidenceKeyOut(BaseModel):
    key_id: str
    algorithm: str
    public_key: str  # base64 of the raw 32-byte Ed25519 public key
    status: str  # current | trusted (a rotated key whose anchors still verify)


@router.get("/audit/keys", response_model=list[EvidenceKeyOut])
@allow(AUDIT)
def evidence_keys_published(caller: WholeTenant, state: State) -> list[EvidenceKeyOut]:
    """The public evidence keys anchors and evidence bundles are signed with: check an anchor's
    ``signature`` (Ed25519 over ``evidence.anchors.anchor_message``) or a bundle's ``manifest.sig``."""
    del caller
    return [EvidenceKeyOut(**k) for k in evidence_keys.published(state.engine.config)]


class RecordFindingOut(BaseModel):
    kind: str
    record_id: str
    problem: str
    part: str | None
    column: str | None
    message: str


class RecordsVerificationOut(BaseModel):
    tenant_id: str
    ok: bool
    checked: dict[str, int]
    batches: int
    pending: int  # seals not chained yet: the next batch chains them
    findings: list[RecordFindingOut]  # the first 100 records that differ from their seals


@router.get("/audit/verify/records", response_model=RecordsVerificationOut)
@allow(AUDIT)
def verify_records(caller: WholeTenant, state: State) -> RecordsVerificationOut:
    """Recompute every sealed record of the tenant (runs, workflow runs, definitions, snapshots,
    approvals, tokens, schedules and their changes, requests, safe-mode periods) from its rows
    against its latest seal, and every batch of seals against its audit entry's root; the
    findings name each record that differs, the part and, where known, the column."""
    (report,) = audit.verify_records(state.engine, [caller.tenant_id])
    return RecordsVerificationOut(
        tenant_id=report.tenant_id,
        ok=report.ok,
        checked=report.checked,
        batches=report.batches,
        pending=report.pending,
        findings=[
            RecordFindingOut(
                kind=f.kind, record_id=f.record_id, problem=f.problem, part=f.part, column=f.column, message=f.message()
            )
            for f in report.findings
        ],
    )
