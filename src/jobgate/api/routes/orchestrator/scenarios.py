"""Seed 004 scenarios: list, read, run, approve, the approval, and one scenario's results.

A scenario is a definition (a seed 004 scenario file is one kind of definition file); its
``sha256`` is the definition's content digest. Every handler calls the service the
``/api/v1`` route calls, under the same rule, so approval, trust gates, quotas and audit are
the same whichever face a caller uses.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Response

from jobgate.api.access import ADMIN, GOVERNANCE_READ, READ, RUN, allow, principal
from jobgate.api.responses import repeated
from jobgate.api.routes.orchestrator.fields import seed_names
from jobgate.api.routes.orchestrator.jobs import job_out
from jobgate.api.routes.orchestrator.paths import PREFIX
from jobgate.api.routes.runs import ensure_may_use
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import NotFoundError, ValidationError
from jobgate.core.models import Scope
from jobgate.service import approvals, manual
from jobgate.service.tokens import Principal
from jobgate.store.base import RunFilter, StoredDefinition
from jobgate.views.orchestrator import (
    JobOut,
    JobStartedOut,
    ScenarioApprovalOut,
    ScenarioApprovalStatusOut,
    ScenarioApproveIn,
    ScenarioDetailOut,
    ScenarioOut,
    ScenarioRunIn,
    job_status,
)
from jobgate.views.schemas import IDENTIFIER

router = APIRouter(prefix=PREFIX, tags=["orchestrator compatibility"])

Caller = Annotated[Principal, Depends(principal)]
# A scenario is named as a definition id is: anything else is 422 before any lookup.
Name = Annotated[str, Path(pattern=IDENTIFIER, description="the scenario's name")]
State = Annotated[ServerState, Depends(server_state)]
RESULTS_LIMIT = 100  # the seed's "recent jobs"


def _approved(state: ServerState, definitions: list[StoredDefinition]) -> dict[str, bool]:
    """Whether each definition's current content has an active approval (one query for all)."""
    keys = [(d.tenant_id, d.job_definition_id, d.digest) for d in definitions]
    with state.engine.store.read() as tx:
        active = tx.approvals_active(keys) if keys else {}
    return {d.job_definition_id: (d.tenant_id, d.job_definition_id, d.digest) in active for d in definitions}


def _scenario(state: ServerState, caller: Principal, name: str, field: str = "name") -> StoredDefinition:
    with seed_names(job_definition_id=field):
        ensure_may_use(caller, name)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = tx.definition_get(caller.tenant_id, name)
    if found is None:
        raise NotFoundError(f"no scenario {name!r}", field=field)
    return found


@router.get("/scenarios", response_model=list[ScenarioOut])
@allow(READ)
def list_scenarios(caller: Caller, state: State) -> list[ScenarioOut]:
    """Every scenario the token may use, with whether its loaded content is approved."""
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = [d for d in tx.definitions_list(caller.tenant_id) if caller.may_use(d.job_definition_id)]
    approved = _approved(state, found)
    return [ScenarioOut.of(d, approved[d.job_definition_id]) for d in found]


@router.get("/scenarios/{name}", response_model=ScenarioDetailOut)
@allow(READ)
def get_scenario(name: Name, caller: Caller, state: State) -> ScenarioDetailOut:
    """The scenario's definition: header fields, its text as loaded and what its digest covers."""
    found = _scenario(state, caller, name)
    return ScenarioDetailOut.of_detail(found, _approved(state, [found])[name])


@router.post("/scenarios/{name}/run", status_code=201, response_model=JobStartedOut, responses=repeated(JobStartedOut))
@allow(RUN)
def run_scenario(
    name: Name,
    caller: Caller,
    state: State,
    response: Response,
    body: ScenarioRunIn | None = None,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> JobStartedOut:
    """Run the scenario with ``params`` (403 unless its exact content is approved and every gate
    passes; nothing is stored then). With ``Idempotency-Key`` a repeat returns the same job."""
    ask = body or ScenarioRunIn()
    with seed_names(job_definition_id="name"):
        ensure_may_use(caller, name)
        result = manual.submit_manual(
            state.engine,
            scope=Scope(tenant_id=caller.tenant_id),
            actor=caller.actor,
            job_definition_id=name,
            params=ask.params,
            reason=ask.reason,
            idempotency_key=idempotency_key,
            role=caller.role.value,
        )
    if not result.created:
        response.status_code = 200
    return JobStartedOut(job_id=result.run.job_run_id, status=job_status(result.run.status), created=result.created)


@router.post("/scenarios/{name}/approve", response_model=ScenarioApprovalOut)
@allow(ADMIN)
def approve_scenario(
    name: Name, caller: Caller, state: State, body: ScenarioApproveIn | None = None
) -> ScenarioApprovalOut:
    """Approve the content jobgate has loaded now (and the code it runs): no checksum is taken
    from the caller, so only real loaded content can be blessed; a ``sha256`` sent with it pins
    what the reviewer saw (409 if the loaded content differs, nothing stored), and is required
    with four eyes. Four eyes applies as on ``/api/v1/definitions/{id}/approve``."""
    pinned = None if body is None or body.sha256 is None else "sha256:" + body.sha256.removeprefix("sha256:")
    if pinned is None and state.engine.config.governance.four_eyes:
        # The second person approves what they reviewed, not whatever is loaded when they click:
        # a version applied meanwhile passed as reviewed (found by a review).
        raise ValidationError("with four eyes, name the sha256 of the content you reviewed", field="sha256")
    with seed_names(job_definition_id="name", digest="sha256"):
        ensure_may_use(caller, name)
        a = approvals.approve(
            state.engine,
            caller.tenant_id,
            name,
            actor=caller.actor,
            approver=caller.person,
            digest=pinned,
            limit=caller.jobs,
        )
    return ScenarioApprovalOut.of(name, a)


@router.get("/scenarios/{name}/approval", response_model=ScenarioApprovalStatusOut)
@allow(GOVERNANCE_READ)
def scenario_approval(name: Name, caller: Caller, state: State) -> ScenarioApprovalStatusOut:
    """The approval on record and ``matches``: false when the loaded content or its code drifted."""
    with seed_names(job_definition_id="name"):
        ensure_may_use(caller, name)
        return ScenarioApprovalStatusOut.of(approvals.status(state.engine, caller.tenant_id, name))


@router.delete("/scenarios/{name}/approval", response_model=ScenarioApprovalStatusOut)
@allow(ADMIN)
def revoke_scenario_approval(
    name: Name, caller: Caller, state: State, reason: Annotated[str | None, Query(max_length=2000)] = None
) -> ScenarioApprovalStatusOut:
    """Revoke: new runs are refused and jobs not yet started are cancelled (409 if none active)."""
    with seed_names(job_definition_id="name"):
        ensure_may_use(caller, name)
        approvals.revoke(state.engine, caller.tenant_id, name, actor=caller.actor, reason=reason)
    return ScenarioApprovalStatusOut.of(approvals.status(state.engine, caller.tenant_id, name))


@router.get("/results/{scenario}", response_model=list[JobOut])
@allow(READ)
def scenario_results(scenario: Annotated[str, Path(pattern=IDENTIFIER)], caller: Caller, state: State) -> list[JobOut]:
    """The scenario's recent jobs (newest first, at most 100)."""
    _scenario(state, caller, scenario, field="scenario")
    wanted = RunFilter(tenant_id=caller.tenant_id, job_definition_id=scenario, limit=RESULTS_LIMIT)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        runs = tx.runs_list(wanted)
    return [job_out(state, r) for r in runs]
