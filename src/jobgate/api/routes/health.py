"""Liveness, readiness and Prometheus metrics.

``/healthz`` answers as long as the process serves HTTP (anonymous, no database call), so a
supervisor restarts only a wedged process. ``/readyz`` (anonymous, no tenant data) says
whether this node should get traffic: database reachable, schema current, and every loop it
runs alive. ``/metrics`` needs a token: its run counts (the seed 000 §50 set and the open
runs) are the caller's tenant's, read from the database so every node reports the same truth,
beside this process's HTTP figures.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from jobgate.api.access import OPERATE, PUBLIC, WholeTenant, allow
from jobgate.api.metrics import TenantRuns
from jobgate.api.server_state import ServerState, server_state
from jobgate.buildinfo import build_info
from jobgate.service import doctor
from jobgate.store.errors import DatabaseFileReplaced
from jobgate.telemetry.metrics import SchedulerMetrics
from jobgate.views.schemas import CheckOut, HealthOut, ReadyOut

router = APIRouter(tags=["health"])

State = Annotated[ServerState, Depends(server_state)]
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
LOOP_FAILING_AFTER = 3  # failed passes in a row that make a live loop amber on /readyz
READY_SECONDS = 5.0  # /readyz answers red after this long without the database's answer


@router.get("/healthz", response_model=HealthOut, responses={503: {"model": HealthOut}})
@allow(PUBLIC)
async def healthz(state: State) -> HealthOut | JSONResponse:
    """Alive, and whether the pub/sub subscriber holds its connection (no database call). On
    the event loop itself, not the thread pool: requests waiting on a stalled database hold
    every pool thread, and a liveness probe queued behind them made a supervisor restart a
    process that was only waiting (found by a review). Not alive (503) once the SQLite file it
    opened was removed or replaced: only a restart cures that (one stat, no database call)."""
    try:
        state.engine.store.check_file()
    except DatabaseFileReplaced:
        body = HealthOut(status="database file removed or replaced: restart", pubsub=state.pubsub())
        return JSONResponse(body.model_dump(mode="json"), status_code=503)
    return HealthOut(status="ok", pubsub=state.pubsub())


class BuildInfoOut(BaseModel):
    name: str
    version: str
    schema_revision: str = Field(alias="schema", description="the database schema this build needs")
    python: str


@router.get("/api/v1/buildinfo", response_model=BuildInfoOut, response_model_by_alias=True)
@allow(PUBLIC)
def buildinfo() -> BuildInfoOut:
    """This build: version, the schema it needs, its Python (anonymous; nothing about the deployment)."""
    return BuildInfoOut.model_validate(build_info())


@router.get("/buildinfo.json", response_model=BuildInfoOut, response_model_by_alias=True)
@allow(PUBLIC)
def buildinfo_json() -> BuildInfoOut:
    """``/api/v1/buildinfo`` at the path seed 001 §5.4 names."""
    return buildinfo()


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut}})
@allow(PUBLIC)
async def readyz(state: State) -> JSONResponse:
    try:  # a database that accepts connections and never answers is not ready: say so, in time
        checks = await asyncio.wait_for(run_in_threadpool(_readiness, state), timeout=READY_SECONDS)
    except TimeoutError:
        detail = f"no answer within {READY_SECONDS:g} s"
        checks = [CheckOut(name="database", status=doctor.Level.RED.value, detail=detail)]
    ready = all(c.status != doctor.Level.RED.value for c in checks)
    body = ReadyOut(ready=ready, checks=checks).model_dump(mode="json")
    return JSONResponse(body, status_code=200 if ready else 503)


def _readiness(state: ServerState) -> list[CheckOut]:
    try:
        with state.engine.store.read() as tx:
            revision = tx.schema_revision()
            failing = tx.schedules_failing_count()
        schema = doctor.judge_schema(revision)
        out = [CheckOut(name="database", status="green", detail="reachable")]
        out.append(CheckOut(name=schema.name, status=schema.level.value, detail=schema.detail))
        # Amber, not red: the node serves, and its other schedules fire. A count only (anonymous).
        detail = f"{failing} failing (see jobgate doctor)" if failing else "none failing"
        out.append(CheckOut(name="schedules", status="amber" if failing else "green", detail=detail))
    except Exception as exc:
        return [CheckOut(name="database", status="red", detail=f"unreachable: {type(exc).__name__}")]
    if state.stopping.is_set():
        out.append(CheckOut(name="shutdown", status="red", detail="shutting down"))
    failing_by_loop = state.loops_failing()
    for name, alive in sorted(state.loops().items()):
        in_a_row = failing_by_loop.get(name, 0)
        if not alive:
            out.append(CheckOut(name=name, status="red", detail="stopped"))
        elif in_a_row >= LOOP_FAILING_AFTER:  # alive, and every pass fails: nothing it does is done
            detail = f"alive, its last {in_a_row} passes failed (see the server log)"
            out.append(CheckOut(name=name, status="amber", detail=detail))
        else:
            out.append(CheckOut(name=name, status="green", detail="alive"))
    return out


@router.get("/metrics", response_class=Response, responses={200: {"content": {PROMETHEUS_TEXT: {}}}})
@allow(OPERATE)
def metrics(caller: WholeTenant, state: State) -> Response:
    scrape = CollectorRegistry()
    scrape.register(SchedulerMetrics(state.engine, caller.tenant_id))
    scrape.register(TenantRuns(state.engine, caller.tenant_id))
    scrape.register(state.http_metrics.for_tenant(caller.tenant_id))
    text = generate_latest(scrape)
    return Response(text, media_type=PROMETHEUS_TEXT)
