"""Run progress as Server-Sent Events (seed 001 §5, seed 002).

A connection first gets the reconnect delay (``retry:``), a ``snapshot`` of the run, a
``queue`` snapshot (how long a pending run has waited) and a ``heartbeat``; then, on the poll
cadence, a ``state`` event for every persisted transition, ``progress`` when the handler
reports progress, a ``queue`` snapshot again on the queue-lag cadence while the run waits
(``server.stream_queue_lag_seconds``), a ``heartbeat`` on the heartbeat cadence, and finally ``terminal`` (or
``gone`` if the run disappears), after which the server closes the stream.

Only ``state`` events carry an id: the transition's sequence number in the run's history.
That history is append-only, so ``Last-Event-ID: n`` resumes exactly after the n-th
transition — nothing lost, nothing repeated (an id beyond the history is a 400). Snapshots,
progress and heartbeats describe the present rather than the history and are sent afresh on
every connection. It carries progress state, not logs (``GET /runs/{id}/log`` has those).

A stream is not a way around revocation or limits: the token is checked again at every
heartbeat (a revoked token's stream ends), a stream ends after ``server.stream_max_seconds``
(the client resumes where it was), and one token holds at most ``server.streams_per_token``
streams on a server (429 beyond).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from jobgate.api.access import READ, allow, caller_of_request, principal
from jobgate.api.errors import BadRequest, database_unavailable
from jobgate.api.routes.runs import visible_run
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import QuotaExceededError, refuse_bytes
from jobgate.core.models import JobRun, Transition
from jobgate.identity.errors import IdentityProviderUnavailable, TenantMissing
from jobgate.service import tokens
from jobgate.service.tokens import Principal
from jobgate.views.schemas import RunOut, TransitionOut

router = APIRouter(prefix="/api/v1", tags=["runs"])
log = logging.getLogger("jobgate.api.stream")

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


@dataclass(frozen=True)
class Observed:
    run: JobRun | None
    transitions: list[Transition]
    progress: tuple[float | None, str | None]
    now: datetime


def frame(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE frame; data is one line of JSON (so no frame can be split by a newline)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n"


def parse_last_event_id(value: str | None) -> int:
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit()) or len(value) > 12:  # not "٣": digits of ASCII
        raise BadRequest("the id of a state event this stream sent (a whole number)", field="Last-Event-ID")
    return int(value)


def _observe(state: ServerState, tenant_id: str, job_run_id: str) -> Observed:
    with state.engine.store.read(tenant_id=tenant_id) as tx:
        run = tx.run_get(job_run_id, tenant_id)
        transitions = tx.run_transitions(job_run_id) if run is not None else []
        progress = tx.run_progress_get(job_run_id) if run is not None else (None, None)
    return Observed(run, transitions, progress, state.engine.clock.now())


def _first_look(state: ServerState, caller: Principal, job_run_id: str) -> Observed:
    visible_run(state, caller, job_run_id)
    observed = _observe(state, caller.tenant_id, job_run_id)
    if observed.run is not None:  # a record no write made is refused before the stream starts
        refuse_bytes(vars(observed.run), f"run {job_run_id}")
        for i, t in enumerate(observed.transitions, start=1):
            refuse_bytes(vars(t), f"transition {i} of run {job_run_id}")
    return observed


def _queue(observed: Observed) -> dict[str, Any]:
    run = observed.run
    assert run is not None
    waiting = None
    if run.status.is_pending:
        waiting = max(0.0, (observed.now - run.due_at).total_seconds())
    return {"status": run.status.value, "due_at": run.due_at.isoformat(), "waiting_seconds": waiting}


async def run_events(
    state: ServerState, request: Request, caller: Principal, job_run_id: str, after: int, stream_id: int
) -> AsyncIterator[str]:
    try:
        async for chunk in _run_events(state, request, caller, job_run_id, after):
            yield chunk
    finally:
        state.close_stream(caller.holder, stream_id)


async def _still_allowed(state: ServerState, request: Request) -> bool:
    try:
        await run_in_threadpool(caller_of_request, state, request)
    except (tokens.Unauthenticated, TenantMissing, IdentityProviderUnavailable):
        return False  # a credential that cannot be checked now ends the stream: never fail open
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        return False  # the same when the database cannot say: the client reconnects later
    return True


async def _look(state: ServerState, caller: Principal, job_run_id: str) -> Observed | None:
    """The run now, or None while the database is unreachable or busy: a blip shorter than a
    heartbeat costs the stream nothing (the next poll looks again), and a longer one ends it at
    the heartbeat, whose credential check cannot be answered either."""
    try:
        return await run_in_threadpool(_observe, state, caller.tenant_id, job_run_id)
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        return None


def _say_away(job_run_id: str) -> None:
    """Once per outage and stream (a review's streams logged it at every poll)."""
    log.warning(
        "run stream of %s: the database is unavailable; looking again at each poll",
        job_run_id,
        extra={"action": "stream_database_unavailable", "job_run_id": job_run_id},
    )


async def _run_events(
    state: ServerState, request: Request, caller: Principal, job_run_id: str, after: int
) -> AsyncIterator[str]:
    settings = state.engine.config.server
    ends_at = time.monotonic() + settings.stream_max.total_seconds()
    poll = settings.stream_poll.total_seconds()
    beat = settings.stream_heartbeat.total_seconds()
    lag = settings.stream_queue_lag.total_seconds()
    yield f"retry: {int(settings.stream_retry.total_seconds() * 1000)}\n\n"
    first = await _look(state, caller, job_run_id)
    if first is None:
        _say_away(job_run_id)
        return  # the client reconnects after the retry delay, resuming where it was
    away = False
    observed = first
    if observed.run is None:
        yield frame("gone", {"job_run_id": job_run_id})
        return
    progress = observed.progress
    yield frame("snapshot", RunOut.of(observed.run).model_dump(mode="json"))
    yield frame("queue", _queue(observed))
    yield frame("heartbeat", {"at": observed.now.isoformat()})
    next_beat = time.monotonic() + beat
    next_lag = time.monotonic() + lag
    sent = after
    if progress != (None, None):
        yield frame("progress", {"fraction": progress[0], "message": progress[1]})
    while True:
        for seq, t in enumerate(observed.transitions[sent:], start=sent + 1):
            yield frame("state", TransitionOut.of(seq, t).model_dump(mode="json"), event_id=seq)
        sent = max(sent, len(observed.transitions))
        assert observed.run is not None
        if observed.run.status.is_terminal:
            yield frame("terminal", RunOut.of(observed.run).model_dump(mode="json"))
            return
        if observed.progress != progress:
            progress = observed.progress
            yield frame("progress", {"fraction": progress[0], "message": progress[1]})
        if observed.run.status.is_pending and time.monotonic() >= next_lag:
            yield frame("queue", _queue(observed))  # how long it has waited, on its own cadence
            next_lag = time.monotonic() + lag
        if time.monotonic() >= next_beat:
            if not await _still_allowed(state, request):
                return  # revoked or expired meanwhile: the reconnect gets its 401
            yield frame("heartbeat", {"at": state.engine.clock.now().isoformat()})
            next_beat = time.monotonic() + beat
        if time.monotonic() >= ends_at:
            return  # long enough: the client resumes with its last event id
        await asyncio.sleep(poll)
        if state.stopping.is_set() or await request.is_disconnected():
            return  # the client reconnects (to another node, or after the restart) with its last id
        latest = await _look(state, caller, job_run_id)
        if latest is None:
            if not away:
                _say_away(job_run_id)
            away = True
            continue  # nothing new to say; the heartbeat decides whether the stream goes on
        away = False
        observed = latest
        if observed.run is None:
            yield frame("gone", {"job_run_id": job_run_id})
            return


@router.get(
    "/runs/{job_run_id}/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "the run's events"}},
)
@router.get(  # seed 001 §5.1's path for the same stream
    "/scheduler/runs/{job_run_id}/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "the run's events"}},
)
@allow(READ)
async def stream_run(
    job_run_id: str,
    request: Request,
    caller: Caller,
    state: State,
    # Checked by ``parse_last_event_id``, not by a schema pattern: a malformed id is the 400 the
    # guide lists for malformed headers, naming it (a pattern here made it FastAPI's 422).
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="the id of the last state event received (0-12 digits)")
    ] = None,
) -> StreamingResponse:
    after = parse_last_event_id(last_event_id)
    observed = await run_in_threadpool(_first_look, state, caller, job_run_id)  # 404 before streaming
    if after > len(observed.transitions):
        raise BadRequest(
            f"beyond the run's history ({len(observed.transitions)} state events so far)", field="Last-Event-ID"
        )
    stream_id = state.open_stream(caller.holder)
    if stream_id is None:
        raise QuotaExceededError(
            f"this token holds {state.engine.config.server.streams_per_token} open streams already", field="stream"
        )
    return StreamingResponse(
        run_events(state, request, caller, job_run_id, after, stream_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
