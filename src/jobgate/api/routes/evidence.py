"""Evidence over HTTP for auditors and admins: an entry's inclusion proof in its signed anchor,
and the evidence bundle of a run, a workflow run, a definition or a period — the same zip as
``jobgate evidence export``, which ``jobgate evidence verify`` checks offline."""

from __future__ import annotations

import hashlib
from datetime import UTC
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel

from jobgate.api import pagination
from jobgate.api.access import AUDIT, WholeTenant, allow
from jobgate.api.server_state import ServerState, server_state
from jobgate.evidence import anchors
from jobgate.export.bundles import build_bundle
from jobgate.export.scope import ExportScope

router = APIRouter(prefix="/api/v1", tags=["audit"])

State = Annotated[ServerState, Depends(server_state)]
RECORD_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}$"
ZIP = "application/zip"


class InclusionProofOut(BaseModel):
    tenant_id: str
    seq: int
    entry_hash: str
    proof: list[list[str]]  # (side, sibling hash) from the leaf up to the root
    root: str
    anchor: dict[str, Any]  # the anchor's record, its signature included


@router.get("/audit/{seq}/proof", response_model=InclusionProofOut)
@allow(AUDIT)
def audit_proof(seq: int, caller: WholeTenant, state: State) -> InclusionProofOut:
    """The proof that entry ``seq`` of the caller's tenant is in an anchored Merkle root (its
    window's batch anchor, else a direct anchor of that entry); 404 while no anchor covers it."""
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        return InclusionProofOut(**anchors.proof_of(tx, caller.tenant_id, seq))


def _filename(scope: ExportScope) -> str:
    """The download's name, from the scope's checked identifiers only."""
    if scope.job_run_id:
        return f"evidence-run-{scope.job_run_id}.zip"
    if scope.workflow_run_id:
        return f"evidence-workflow-{scope.workflow_run_id}.zip"
    period = ""
    if scope.start and scope.end:  # in UTC, as the Z says (and as the manifest gives them)
        start, end = scope.start.astimezone(UTC), scope.end.astimezone(UTC)
        period = f"-{start:%Y%m%dT%H%M%SZ}-{end:%Y%m%dT%H%M%SZ}"
    if scope.job_definition_id:
        return f"evidence-definition-{scope.job_definition_id}{period}.zip"
    return f"evidence-period{period}.zip"


@router.get("/evidence", response_class=Response, responses={200: {"content": {ZIP: {}}}})
@allow(AUDIT)
def evidence_bundle(
    caller: WholeTenant,
    state: State,
    job_run_id: Annotated[str | None, Query(pattern=RECORD_ID)] = None,
    workflow_run_id: Annotated[str | None, Query(pattern=RECORD_ID)] = None,
    job_definition_id: Annotated[str | None, Query(pattern=RECORD_ID)] = None,
    start: Annotated[pagination.Instant, Query(alias="from", description="runs created at or after")] = None,
    end: Annotated[pagination.Instant, Query(alias="to", description="... and before")] = None,
) -> Response:
    """The signed evidence bundle of one run, one workflow run, a definition (within a period
    when ``from``/``to`` are given) or a period, in the caller's tenant: check it anywhere with
    ``jobgate evidence verify``. ``X-Bundle-SHA256`` is the zip's digest."""
    scope = ExportScope(
        tenant_id=caller.tenant_id,
        job_run_id=job_run_id,
        workflow_run_id=workflow_run_id,
        job_definition_id=job_definition_id,
        start=pagination.aware(start, "from"),
        end=pagination.aware(end, "to"),
    )
    data = build_bundle(state.engine, scope)
    return Response(
        data,
        media_type=ZIP,
        headers={
            "Content-Disposition": f'attachment; filename="{_filename(scope)}"',
            "X-Bundle-SHA256": hashlib.sha256(data).hexdigest(),
        },
    )
