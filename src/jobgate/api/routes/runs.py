"""Runs: create (manual trigger), list, read, cancel, stop, retry, lineage, log, artifact.

The retry and lineage routes are also served under ``/api/v1/scheduler/runs/...`` (seed 001's
paths); the scheduler retry path accepts only runs of an existing schedule.

Every read and write is scoped to the caller's tenant, and to the token's definitions when
it has a list: another tenant's run, or a run of a definition the token may not use, answers
404 exactly like a missing one. Activators act only on the runs they asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import PlainTextResponse, StreamingResponse

from jobgate.api import pagination
from jobgate.api.access import READ, RUN, RUN_CONTROL, allow, check_run_access, principal
from jobgate.api.errors import BadRequest
from jobgate.api.responses import json_reply, repeated
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import NotFoundError
from jobgate.core.lineage import RETRY_EDGE
from jobgate.core.models import JobRun, Scope
from jobgate.core.states import RunStatus
from jobgate.service import control, manual, retries, run_files
from jobgate.service.absent import no_run
from jobgate.service.tokens import Principal
from jobgate.store.base import RunFilter
from jobgate.views.runs import run_detail_view
from jobgate.views.schemas import (
    Page,
    RunActionIn,
    RunCreatedOut,
    RunCreateIn,
    RunDetailOut,
    RunEdgeOut,
    RunLineageOut,
    RunOut,
    retired_edge,
)

router = APIRouter(prefix="/api/v1", tags=["runs"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


def visible_run(state: ServerState, caller: Principal, job_run_id: str) -> JobRun:
    """The run if the caller may see it; otherwise the same 404 as a missing run."""
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        run = tx.run_get(job_run_id, caller.tenant_id)
        if run is None:
            raise no_run(tx, job_run_id, caller.tenant_id, may_see=caller.may_use)
    if not caller.may_use(run.job_definition_id):
        raise NotFoundError(f"no run {job_run_id!r}", field="job_run_id")
    return run


def ensure_may_use(caller: Principal, job_definition_id: str) -> None:
    if not caller.may_use(job_definition_id):
        raise NotFoundError(f"no job definition {job_definition_id!r}", field="job_definition_id")


@router.post("/runs", status_code=201, response_model=RunCreatedOut, responses=repeated(RunCreatedOut))
@allow(RUN)
def create_run(
    body: RunCreateIn,
    caller: Caller,
    state: State,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    traceparent: Annotated[str | None, Header()] = None,
) -> Response:
    """A manual run. With ``Idempotency-Key`` a repeat returns the same run (200); the same key
    with a different request is 409."""
    ensure_may_use(caller, body.job_definition_id)
    result = manual.submit_manual(
        state.engine,
        scope=Scope(tenant_id=caller.tenant_id),
        actor=caller.actor,
        job_definition_id=body.job_definition_id,
        params=body.params,
        reason=body.reason,
        idempotency_key=idempotency_key,
        role=caller.role.value,
        traceparent=traceparent,
    )
    out = RunCreatedOut(created=result.created, run=RunOut.of(result.run))
    return json_reply(out, status_code=201 if result.created else 200)


@router.get("/runs", response_model=Page[RunOut])
@allow(READ)
def list_runs(
    caller: Caller,
    state: State,
    status: Annotated[list[RunStatus] | None, Query(description="repeat for several")] = None,
    job_definition_id: Annotated[str | None, Query(max_length=200)] = None,
    job_class: Annotated[str | None, Query(max_length=64)] = None,
    trigger_type: Annotated[str | None, Query(max_length=32)] = None,
    created_from: pagination.Instant = None,
    created_to: pagination.Instant = None,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> Page[RunOut]:
    before = pagination.decode_time_key(cursor)
    wanted = RunFilter(
        tenant_id=caller.tenant_id,
        statuses=tuple(status or ()),
        job_definition_id=job_definition_id,
        job_class=job_class,
        trigger_type=trigger_type,
        created_from=pagination.aware(created_from, "created_from"),
        created_to=pagination.aware(created_to, "created_to"),
        limit=limit + 1,
        before=before,
        job_definition_ids=caller.jobs,
    )
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = tx.runs_list(wanted)
    page, more = found[:limit], len(found) > limit
    next_cursor = pagination.encode_time_key(page[-1].created_at, page[-1].job_run_id) if more else None
    return Page[RunOut](items=[RunOut.of(r) for r in page], next_cursor=next_cursor)


@router.get("/runs/{job_run_id}", response_model=RunDetailOut)
@allow(READ)
def get_run(job_run_id: str, caller: Caller, state: State) -> RunDetailOut:
    """The run with every transition, its attempts, its open dead letter and its progress."""
    visible_run(state, caller, job_run_id)
    return run_detail_view(state.engine, job_run_id, caller.tenant_id)


@router.post("/runs/{job_run_id}/cancel", response_model=RunOut)
@allow(RUN_CONTROL)
def cancel_run(job_run_id: str, caller: Caller, state: State, body: RunActionIn | None = None) -> RunOut:
    """Cancel a pending run; a running one is 409 (stop it instead)."""
    run = visible_run(state, caller, job_run_id)
    check_run_access(RUN_CONTROL, caller, run)
    reason = None if body is None else body.reason
    done = control.cancel_run(state.engine, job_run_id, actor=caller.actor, reason=reason, tenant_id=caller.tenant_id)
    return RunOut.of(done)


@router.post("/runs/{job_run_id}/stop", status_code=202, response_model=RunOut)
@allow(RUN_CONTROL)
def stop_run(job_run_id: str, caller: Caller, state: State, body: RunActionIn | None = None) -> RunOut:
    """Stop a running run: its worker sends SIGTERM, then kills after the grace period. 202:
    the run lands in CANCELLED when the worker sees the exit. A pending run is 409."""
    run = visible_run(state, caller, job_run_id)
    check_run_access(RUN_CONTROL, caller, run)
    reason = None if body is None else body.reason
    done = control.stop_run(state.engine, job_run_id, actor=caller.actor, reason=reason, tenant_id=caller.tenant_id)
    return RunOut.of(done)


@router.post(
    "/runs/{job_run_id}/retry", status_code=201, response_model=RunCreatedOut, responses=repeated(RunCreatedOut)
)
@allow(RUN_CONTROL)
def retry_run(job_run_id: str, response: Response, caller: Caller, state: State) -> RunCreatedOut:
    """Seed 001 retry contract: a terminal run is retried at most once; 201 with the new run the
    first time, 200 with the same retry afterwards (or to a concurrent request that lost), 404
    for an unknown run, 409 when the run is not terminal, 400 when its definition is gone or
    retired. A refusal stores nothing."""
    return _retry(job_run_id, response, caller, state, require_schedule=False)


@router.post(
    "/scheduler/runs/{job_run_id}/retry",
    status_code=201,
    response_model=RunCreatedOut,
    responses=repeated(RunCreatedOut),
)
@allow(RUN_CONTROL)
def retry_scheduled_run(job_run_id: str, response: Response, caller: Caller, state: State) -> RunCreatedOut:
    """The seed's scheduler path of the retry contract: as ``/runs/{id}/retry``, and 400
    (``schedule_id``) when the run belongs to no schedule or its schedule no longer exists."""
    return _retry(job_run_id, response, caller, state, require_schedule=True)


def _retry(
    job_run_id: str, response: Response, caller: Caller, state: State, *, require_schedule: bool
) -> RunCreatedOut:
    run = visible_run(state, caller, job_run_id)
    check_run_access(RUN_CONTROL, caller, run)
    retry, created = manual.retry_once(
        state.engine,
        job_run_id,
        actor=caller.actor,
        tenant_id=caller.tenant_id,
        role=caller.role.value,
        require_schedule=require_schedule,
    )
    if not created:
        response.status_code = 200
    return RunCreatedOut(created=created, run=RunOut.of(retry))


@router.get("/runs/{job_run_id}/children", response_model=RunLineageOut)
@allow(READ)
def run_children(job_run_id: str, caller: Caller, state: State) -> RunLineageOut:
    """The runs that retry this run (edges derived only from ``retry_of``), oldest first."""
    return _lineage(job_run_id, caller, state, "children")


@router.get("/runs/{job_run_id}/parents", response_model=RunLineageOut)
@allow(READ)
def run_parents(job_run_id: str, caller: Caller, state: State) -> RunLineageOut:
    """The run this run retries, if any (its ``retry_of``)."""
    return _lineage(job_run_id, caller, state, "parents")


@router.get("/scheduler/runs/{job_run_id}/children", response_model=RunLineageOut)
@allow(READ)
def scheduler_run_children(job_run_id: str, caller: Caller, state: State) -> RunLineageOut:
    """The seed's path of ``/runs/{id}/children``."""
    return _lineage(job_run_id, caller, state, "children")


@router.get("/scheduler/runs/{job_run_id}/parents", response_model=RunLineageOut)
@allow(READ)
def scheduler_run_parents(job_run_id: str, caller: Caller, state: State) -> RunLineageOut:
    """The seed's path of ``/runs/{id}/parents``."""
    return _lineage(job_run_id, caller, state, "parents")


def _lineage(job_run_id: str, caller: Caller, state: State, direction: str) -> RunLineageOut:
    """Tenant-scoped, and limited to the definitions the token may use: a run (or an edge's
    other end) the caller may not see is a 404 (or not listed)."""
    visible_run(state, caller, job_run_id)
    found = retries.lineage(state.engine, job_run_id, caller.tenant_id)
    ends = found.parents if direction == "parents" else found.children
    edges = [RunEdgeOut(kind=RETRY_EDGE, run=RunOut.of(r)) for r in ends if caller.may_use(r.job_definition_id)]
    gone = found.retired_parents if direction == "parents" else []
    retired = [retired_edge(g) for g in gone if caller.may_use(g.job_definition_id)]
    return RunLineageOut(job_run_id=job_run_id, direction=direction, edges=edges, retired=retired)


@router.get("/runs/{job_run_id}/log", response_class=PlainTextResponse)
@allow(READ)
def run_log(
    job_run_id: str,
    caller: Caller,
    state: State,
    tail: Annotated[int | None, Query(ge=1, le=run_files.MAX_TAIL_LINES)] = None,
    offset: Annotated[int | None, Query(ge=0)] = None,
    limit: Annotated[int | None, Query(ge=1, le=run_files.MAX_READ)] = None,
) -> PlainTextResponse:
    """The run's log as text: the last ``tail`` lines, or ``limit`` bytes from ``offset``.
    ``X-Log-End`` is the offset to ask for next; ``X-Log-Size`` the file's size. ``tail`` with
    ``offset`` or ``limit`` is refused (400): one of them would be ignored."""
    if tail is not None and (offset is not None or limit is not None):
        raise BadRequest("tail reads the last lines; offset and limit read bytes: give one or the other", field="tail")
    offset = 0 if offset is None else offset
    limit = run_files.MAX_READ if limit is None else limit
    run = visible_run(state, caller, job_run_id)
    part = run_files.read_log(state.engine.config, run, tail_lines=tail, offset=offset, limit=limit)
    headers = {"X-Log-Offset": str(part.offset), "X-Log-End": str(part.end), "X-Log-Size": str(part.size)}
    return PlainTextResponse(part.text, headers=headers)


@router.get(
    "/runs/{job_run_id}/artifact",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the artifact's bytes"}},
)
@allow(READ)
def run_artifact(job_run_id: str, caller: Caller, state: State) -> StreamingResponse:
    """The run's artifact (404 when it recorded none); ``X-Artifact-SHA256`` is the digest
    recorded when the run finished. Streamed from the descriptor that was checked."""
    run = visible_run(state, caller, job_run_id)
    fh, size, name = run_files.open_artifact(state.engine.config, run)

    def chunks() -> Iterator[bytes]:
        with fh:
            while block := fh.read(1 << 16):
                yield block

    headers = {
        "X-Artifact-SHA256": run.artifact_sha256 or "",
        "Content-Length": str(size),
        "Content-Disposition": f'attachment; filename="{_safe_filename(name)}"',
    }
    return StreamingResponse(chunks(), media_type="application/octet-stream", headers=headers)


def _safe_filename(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:200] or "artifact"
