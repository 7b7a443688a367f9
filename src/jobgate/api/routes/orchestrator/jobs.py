"""Seed 004 jobs: recent jobs, one job with its log, its artifact, cancel and stop.

A job is a run. Cancel is for a job not yet started and stop for a running one, each 409 in
the other state (the seed's rule, and jobgate's); an activator acts on its own jobs only, an
admin (or operator) on any of its tenant's, by the same rule as ``/api/v1/runs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi.responses import StreamingResponse

from jobgate.api.access import READ, RUN_CONTROL, allow, check_run_access, principal
from jobgate.api.routes.orchestrator.fields import seed_names
from jobgate.api.routes.orchestrator.paths import PREFIX
from jobgate.api.routes.runs import run_artifact, visible_run
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import NotFoundError
from jobgate.core.models import JobRun
from jobgate.service import control, run_files
from jobgate.service.tokens import Principal
from jobgate.store.base import RunFilter
from jobgate.store.sqlstore import StoreTx
from jobgate.views.orchestrator import JobDetailOut, JobOut
from jobgate.views.schemas import RunActionIn

router = APIRouter(prefix=PREFIX, tags=["orchestrator compatibility"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]
RECENT_JOBS = 100  # the seed's "recent jobs (100)"
JobId = Annotated[str, Path(min_length=1, max_length=200, description="the job's id (a run id)")]


def _runner(tx: StoreTx, run: JobRun, seen: dict[tuple[str, int], str | None]) -> str | None:
    """The runner named by the definition version the run is bound to: what really ran it,
    whatever the definition says today."""
    key = (run.job_definition_id, run.definition_version)
    if key not in seen:
        stored = tx.definition_get(run.tenant_id, run.job_definition_id, run.definition_version)
        runner = None if stored is None else stored.content.get("runner")
        seen[key] = runner if isinstance(runner, str) else None
    return seen[key]


def jobs_out(state: ServerState, runs: Sequence[JobRun]) -> list[JobOut]:
    """The seed's view of each run, read in one transaction."""
    seen: dict[tuple[str, int], str | None] = {}
    with state.engine.store.read() as tx:
        return [JobOut.of(r, _runner(tx, r, seen), control.cancellation(tx, r)) for r in runs]


def job_out(state: ServerState, run: JobRun) -> JobOut:
    (out,) = jobs_out(state, [run])
    return out


@router.get("/jobs", response_model=list[JobOut])
@allow(READ)
def list_jobs(caller: Caller, state: State) -> list[JobOut]:
    """The tenant's 100 most recent jobs (of the scenarios the token may use), newest first."""
    wanted = RunFilter(tenant_id=caller.tenant_id, limit=RECENT_JOBS, job_definition_ids=caller.jobs)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        runs = tx.runs_list(wanted)
    return jobs_out(state, runs)


@router.get("/jobs/{job_id}", response_model=JobDetailOut)
@allow(READ)
def get_job(job_id: JobId, caller: Caller, state: State) -> JobDetailOut:
    """The job's status and its log: its last lines when it is long (the whole log is at
    ``/api/v1/runs/{id}/log``); empty before the job wrote one."""
    with seed_names(job_run_id="id"):
        run = visible_run(state, caller, job_id)
    try:
        part = run_files.read_log(state.engine.config, run, tail_lines=run_files.MAX_TAIL_LINES)
        log, truncated = part.text, part.offset > 0
    except NotFoundError:  # not started yet, or it wrote nothing
        log, truncated = "", False
    return JobDetailOut(**job_out(state, run).model_dump(), log=log, log_truncated=truncated)


@router.get(
    "/jobs/{job_id}/artifact",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the artifact's bytes"}},
)
@allow(READ)
def job_artifact(job_id: JobId, caller: Caller, state: State) -> StreamingResponse:
    """The job's output file under its original name (404 when it produced none)."""
    with seed_names(job_run_id="id"):
        return run_artifact(job_id, caller, state)


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
@allow(RUN_CONTROL)
def cancel_job(job_id: JobId, caller: Caller, state: State, body: RunActionIn | None = None) -> JobOut:
    """Abort a pending job: it never runs (409 once it started: stop it instead)."""
    reason = None if body is None else body.reason
    with seed_names(job_run_id="id"):
        run = visible_run(state, caller, job_id)
        check_run_access(RUN_CONTROL, caller, run)
        done = control.cancel_run(state.engine, job_id, actor=caller.actor, reason=reason, tenant_id=caller.tenant_id)
    return job_out(state, done)


@router.post("/jobs/{job_id}/stop", status_code=202, response_model=JobOut)
@allow(RUN_CONTROL)
def stop_job(job_id: JobId, caller: Caller, state: State, body: RunActionIn | None = None) -> JobOut:
    """Stop a running job: SIGTERM, then a kill after the grace period. 202: the job is
    ``cancelled`` (with ``cancelled_by``) once its worker sees the exit (409 while pending)."""
    reason = None if body is None else body.reason
    with seed_names(job_run_id="id"):
        run = visible_run(state, caller, job_id)
        check_run_access(RUN_CONTROL, caller, run)
        done = control.stop_run(state.engine, job_id, actor=caller.actor, reason=reason, tenant_id=caller.tenant_id)
    return job_out(state, done)
