"""Definitions: list, read, versions, and apply (admin).

Apply takes definition documents as JSON (the same fields as the YAML files) and stores all
or none, exactly like ``jobgate apply``. The tenant is the token's: a document naming another
tenant is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from jobgate.api import pagination
from jobgate.api.access import ADMIN, GOVERNANCE_READ, READ, allow, principal
from jobgate.api.errors import Forbidden, TenantClaimMismatch
from jobgate.api.routes.runs import ensure_may_use
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import GovernanceRefusal, NotFoundError, ValidationError
from jobgate.definitions import parse_definition
from jobgate.definitions.schema import names_raw_handler
from jobgate.service import approvals
from jobgate.service.tokens import Principal
from jobgate.views.schemas import (
    AppliedOut,
    ApprovalOut,
    ApprovalStatusOut,
    ApproveIn,
    DefinitionDetailOut,
    DefinitionOut,
    DefinitionsApplyIn,
    Page,
    RevokedOut,
)

router = APIRouter(prefix="/api/v1", tags=["definitions"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


@router.get("/definitions", response_model=Page[DefinitionOut])
@allow(READ)
def list_definitions(
    caller: Caller,
    state: State,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> Page[DefinitionOut]:
    """The current version of each definition the token may use."""
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = [d for d in tx.definitions_list(caller.tenant_id) if caller.may_use(d.job_definition_id)]
    page, next_cursor = pagination.page_in_memory(found, lambda d: d.job_definition_id, cursor=cursor, limit=limit)
    return Page[DefinitionOut](items=[DefinitionOut.of(d) for d in page], next_cursor=next_cursor)


@router.get("/definitions/{job_definition_id}", response_model=DefinitionDetailOut)
@allow(READ)
def get_definition(job_definition_id: str, caller: Caller, state: State) -> DefinitionDetailOut:
    """The current version, with its content (what its digest covers)."""
    ensure_may_use(caller, job_definition_id)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = tx.definition_get(caller.tenant_id, job_definition_id)
    if found is None:
        raise NotFoundError(f"no job definition {job_definition_id!r}", field="job_definition_id")
    return DefinitionDetailOut.of(found)


@router.get("/definitions/{job_definition_id}/versions", response_model=list[DefinitionOut])
@allow(READ)
def definition_versions(job_definition_id: str, caller: Caller, state: State) -> list[DefinitionOut]:
    ensure_may_use(caller, job_definition_id)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        versions = tx.definition_versions(caller.tenant_id, job_definition_id)
    if not versions:
        raise NotFoundError(f"no job definition {job_definition_id!r}", field="job_definition_id")
    return [DefinitionOut.of(v) for v in versions]


@router.post("/definitions", response_model=list[AppliedOut])
@allow(ADMIN)
def apply_definitions(body: DefinitionsApplyIn, caller: Caller, state: State) -> list[AppliedOut]:
    """Store every definition or none; an unchanged one keeps its version (``created`` false)."""
    loaded = []
    for i, document in enumerate(body.definitions):
        tenant = document.get("tenant_id")
        if tenant is not None and tenant != caller.tenant_id:  # ``enforce`` refused it already; kept as a wall
            raise TenantClaimMismatch(field=f"definitions[{i}].tenant_id")
        job = document.get("job_definition_id")
        if isinstance(job, str) and not caller.may_use(job):
            raise Forbidden("this token may not change that definition", field=f"definitions[{i}].job_definition_id")
        _code_inside_the_deployment(document.get("code"), f"definitions[{i}].code")
        if names_raw_handler(document):
            # Code to import is the operator's choice, made in files on the server; over the
            # API a definition names a target or runner the configuration already declares.
            raise ValidationError(
                "the API accepts definitions that name a configured target_engine_meid or runner; "
                "a definition with a raw handler is applied from files by the operator (jobgate apply)",
                field=f"definitions[{i}].handler",
            )
        try:
            loaded.append(parse_definition(document, f"definitions[{i}]", state.engine.config))
        except ValidationError as exc:
            named = job if isinstance(job, str) and job else f"definitions[{i}]"
            approvals.record_load_refusal(state.engine, caller.tenant_id, exc, actor=caller.actor, target=named)
            where = f"definitions[{i}]"
            raise ValidationError(exc.message, field=f"{where}.{exc.field}" if exc.field else where) from None
        _ensure_may_run_steps(caller, document, f"definitions[{i}].workflow")
    applied = state.engine.apply_definitions(
        loaded, tenant_id=caller.tenant_id, applied_by=caller.actor, applied_lineage=caller.minted_by
    )
    return [
        AppliedOut(
            job_definition_id=a.job_definition_id,
            version=a.version,
            digest=a.digest,
            created=a.created,
            reverted=a.reverted,
        )
        for a in applied
    ]


def _code_inside_the_deployment(code: Any, field: str) -> None:
    """Over the API, a definition's ``code:`` files are named inside the deployment's folder:
    relative, no ``..``. An absolute path let an admin learn whether any file of the server
    exists, and its SHA-256 once approved (found by a review); the operator names others in
    files on the host (``jobgate apply``). Packages and distributions are named, not pathed."""
    if not isinstance(code, list):
        return
    for j, entry in enumerate(code):
        if not isinstance(entry, str) or entry.partition(":")[0] in ("package", "distribution"):
            continue
        path = PurePosixPath(entry)
        if path.is_absolute() or ".." in path.parts or "\\" in entry:
            raise ValidationError(
                "over the API a code path is relative to the deployment's folder, without '..'", field=f"{field}[{j}]"
            )


@router.post("/definitions/{job_definition_id}/approve", response_model=ApprovalOut)
@allow(ADMIN)
def approve_definition(job_definition_id: str, body: ApproveIn, caller: Caller, state: State) -> ApprovalOut:
    """Approve the definition's current content and the code it executes, as jobgate holds and
    reads them. ``digest`` is the content digest you reviewed (and ``code_digest``, optionally,
    the code digest): a different current value is 409 naming both, and nothing is approved.
    Four eyes: the principal who applied the version (or minted, or was minted by, its
    applier's credential) may not approve it when ``governance.four_eyes`` is on or its runner
    executes its body as code (403 ``four_eyes``)."""
    ensure_may_use(caller, job_definition_id)
    approval = approvals.approve(
        state.engine,
        caller.tenant_id,
        job_definition_id,
        actor=caller.actor,
        note=body.note,
        digest=body.digest,
        code_digest=body.code_digest,
        approver=caller.person,
        limit=caller.jobs,
    )
    return ApprovalOut.of(approval)


@router.get("/definitions/{job_definition_id}/approval", response_model=ApprovalStatusOut)
@allow(GOVERNANCE_READ)
def definition_approval(job_definition_id: str, caller: Caller, state: State) -> ApprovalStatusOut:
    """Who approved what, and whether the current content and the code this server reads for
    it still match (``matches``; ``changed`` names what differs: ``content``, or code parts)."""
    ensure_may_use(caller, job_definition_id)
    st = approvals.status(state.engine, caller.tenant_id, job_definition_id)
    return ApprovalStatusOut(
        job_definition_id=job_definition_id,
        current_version=st.current_version,
        current_digest=st.current_digest,
        current_code_digest=None if st.code is None else st.code.digest,
        code_problem=st.code_problem,
        approved=st.approved,
        matches=st.matches,
        changed=st.changed,
        approval=None if st.approval is None else ApprovalOut.of(st.approval),
        history=[ApprovalOut.of(a) for a in st.history],
    )


@router.delete("/definitions/{job_definition_id}/approval", response_model=RevokedOut)
@allow(ADMIN)
def revoke_approval(
    job_definition_id: str,
    caller: Caller,
    state: State,
    reason: Annotated[str | None, Query(max_length=approvals.MAX_REVOKE_REASON)] = None,
) -> RevokedOut:
    """Revoke: new triggers are refused, runs not yet started are cancelled (409 if none active)."""
    ensure_may_use(caller, job_definition_id)
    done = approvals.revoke(state.engine, caller.tenant_id, job_definition_id, actor=caller.actor, reason=reason)
    return RevokedOut(
        job_definition_id=job_definition_id,
        revoked_digests=[a.digest for a in done.revoked],
        cancelled_runs=done.cancelled_runs,
    )


def _ensure_may_run_steps(caller: Principal, content: Mapping[str, Any], field: str) -> None:
    """A token limited to some definitions writes no workflow that runs others (403 naming the
    step's job; approving one is refused by ``approvals.approve`` itself)."""
    try:
        approvals.steps_within(content, caller.jobs)
    except GovernanceRefusal as exc:
        raise Forbidden(exc.message, field=field) from None
