"""The console's overview and runs pages.

Each page reads through the same handler as the API route it mirrors (``api.routes``), with
the same rule, so what a page shows is exactly what that caller's API call would return —
tenant, role and definition limits included — and each form posts to a console route that
calls the same service function as the API's, after the same checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse

from jobgate.api import pagination
from jobgate.api.access import OPERATE, READ, RUN_CONTROL, allow, console, may_act_on
from jobgate.api.forms import form_of
from jobgate.api.routes import admin as admin_routes
from jobgate.api.routes import operations as operation_routes
from jobgate.api.routes import runs as run_routes
from jobgate.api.routes import sla as sla_routes
from jobgate.api.routes import stream as stream_routes
from jobgate.console import chart
from jobgate.console.pages import act, allowed, caller_of, form_instant, render, state_of
from jobgate.core.errors import JobgateError, NotFoundError
from jobgate.core.models import JobRun
from jobgate.core.runs import bound_of
from jobgate.core.sla import Phase
from jobgate.core.states import TERMINAL, RunStatus
from jobgate.service import run_files
from jobgate.service.tokens import Principal
from jobgate.views.runs import run_detail_view
from jobgate.views.schemas import RunActionIn, RunOut

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
@allow(READ)
@console
def overview(request: Request) -> HTMLResponse:
    """What needs a look now: open runs (held ones with their reasons), the last 24 hours, SLA
    breaches, failing schedules, the evidence backlog and the workers — each as the caller's
    API calls would show it (a token limited to definitions counts only theirs)."""
    caller, state = caller_of(request), state_of(request)
    engine = state.engine
    since = chart.window_start(engine.clock.now())
    created_since = since - engine.config.worker.maximum_run_age - chart.HOUR  # the rescuer's pass: an hour's slack
    with engine.store.read(tenant_id=caller.tenant_id) as tx:
        open_counts = tx.runs_open_counts(caller.tenant_id, caller.jobs)
        held = tx.runs_held_counts(caller.tenant_id, caller.jobs)
        ended = tx.runs_ended_by_bucket(caller.tenant_id, since, chart.HOUR, created_since, caller.jobs)
        unanchored = tx.oldest_unanchored(caller.tenant_id) if caller.jobs is None else []
    by_status: dict[str, int] = {s.value: 0 for s in RunStatus if s not in TERMINAL}
    for (status, _job_class), n in open_counts.items():
        by_status[status] = by_status.get(status, 0) + n
    held_by_reason: dict[str, int] = {}
    for (reason, _job_class), n in held.items():
        held_by_reason[reason or "unknown"] = held_by_reason.get(reason or "unknown", 0) + n
    breaches = sla_routes.list_sla_breaches(caller, state, phase=Phase.BREACH, limit=10)
    schedules = operation_routes.list_schedules(caller, state, limit=pagination.MAX_LIMIT).items
    return render(
        request,
        "overview.html",
        open_counts=sorted(by_status.items()),
        held=sorted(held_by_reason.items()),
        chart=chart.throughput_chart(ended, since),
        outcomes=chart.OUTCOMES,
        breaches=breaches.items,
        more_breaches=breaches.next_cursor is not None,
        failing=[s for s in schedules if s.state == "failing"],
        show_evidence=caller.jobs is None,
        unanchored=min((at for _, at in unanchored), default=None),
        workers=admin_routes.list_workers(state, caller),
    )


FILTERS = ("status", "job_definition_id", "job_class", "trigger_type", "created_from", "created_to")


@router.get("/runs", response_class=HTMLResponse)
@allow(READ)
@console
def runs_page(
    request: Request,
    status: Annotated[str, Query(max_length=32)] = "",
    job_definition_id: Annotated[str, Query(max_length=200)] = "",
    job_class: Annotated[str, Query(max_length=64)] = "",
    trigger_type: Annotated[str, Query(max_length=32)] = "",
    created_from: Annotated[str, Query(max_length=40)] = "",
    created_to: Annotated[str, Query(max_length=40)] = "",
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> HTMLResponse:
    """The API's run list with its filters (the period's bounds as the form's UTC date and time)."""
    caller, state = caller_of(request), state_of(request)
    chosen = {
        k: v
        for k, v in zip(
            FILTERS, (status, job_definition_id, job_class, trigger_type, created_from, created_to), strict=True
        )
        if v
    }
    statuses = [s.value for s in RunStatus]
    message, found = None, None
    try:
        found = run_routes.list_runs(
            caller,
            state,
            status=[RunStatus(status)] if status else None,
            job_definition_id=job_definition_id or None,
            job_class=job_class or None,
            trigger_type=trigger_type or None,
            created_from=form_instant(created_from, "created_from"),
            created_to=form_instant(created_to, "created_to"),
            limit=50,
            cursor=cursor,
        )
    except ValueError:  # not one of the statuses
        message = f"status: not one of {', '.join(statuses)}"
    except JobgateError as exc:
        message = f"{exc.field}: {exc.message}" if exc.field else exc.message
    next_url = None
    if found is not None and found.next_cursor:
        next_url = "/runs?" + urlencode({**chosen, "cursor": found.next_cursor})
    return render(
        request,
        "runs.html",
        status=200 if message is None else 422,
        runs=[] if found is None else found.items,
        statuses=statuses,
        chosen=chosen,
        message=message,
        next_url=next_url,
    )


@dataclass(frozen=True)
class RunAction:
    name: str  # the path's last segment: /runs/{id}/{name}
    label: str
    explains: str
    takes_reason: bool


CANCEL = RunAction("cancel", "Cancel run", "Cancel this run before it starts", True)
STOP = RunAction("stop", "Stop run", "Stop this run: its worker ends it, then it is cancelled", True)
RETRY = RunAction("retry", "Retry run", "Run it again, once, as a new run bound to the same request", False)
REQUEUE = RunAction("requeue", "Requeue run", "One more attempt after review, under the same key", False)


def run_actions(caller: Principal, run: JobRun) -> list[RunAction]:
    """What the caller may do to ``run`` now: the API's rules (role and ownership, the state
    each action needs); the server checks them again when the form arrives."""
    found = []
    if may_act_on(RUN_CONTROL, caller, run):
        if run.status.is_pending and run.status is not RunStatus.DISPATCHED:
            found.append(CANCEL)
        if run.status is RunStatus.RUNNING:
            found.append(STOP)
        if run.status.is_terminal:
            found.append(RETRY)
    if allowed(OPERATE, caller) and run.status in (RunStatus.DEAD_LETTERED, RunStatus.ESCALATED):
        found.append(REQUEUE)
    return found


def _run_page(request: Request, job_run_id: str, *, message: str | None = None, status: int = 200) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    run = run_routes.visible_run(state, caller, job_run_id)
    detail = run_detail_view(state.engine, job_run_id, caller.tenant_id)
    try:
        log = run_routes.run_log(job_run_id, caller, state, tail=run_files.MAX_TAIL_LINES)
        log_text, log_end = bytes(log.body).decode("utf-8", errors="replace"), log.headers["X-Log-End"]
    except NotFoundError:  # no log written yet: the script reads it from the start once there is one
        log_text, log_end = "", "0"
    return render(
        request,
        "run.html",
        status=status,
        run=detail.run,
        bound=bound_of(detail.transitions[0].detail if detail.transitions else None),
        progress=detail.progress,
        progress_message=detail.progress_message,
        transitions=detail.transitions,
        attempts=detail.attempts,
        actions=run_actions(caller, run),
        message=message,
        log_text=log_text,
        log_end=log_end,
    )


@router.get("/runs/{job_run_id}", response_class=HTMLResponse)
@allow(READ)
@console
def run_page(request: Request, job_run_id: str) -> HTMLResponse:
    return _run_page(request, job_run_id)


@router.get("/runs/{job_run_id}/log", response_class=PlainTextResponse)
@allow(READ)
@console
def run_log(
    request: Request,
    job_run_id: str,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> PlainTextResponse:
    """The API's log read (``X-Log-End`` says where to read next), for the run page's script."""
    return run_routes.run_log(job_run_id, caller_of(request), state_of(request), tail=None, offset=offset)


@router.get("/runs/{job_run_id}/artifact", response_class=StreamingResponse)
@allow(READ)
@console
def run_artifact(request: Request, job_run_id: str) -> StreamingResponse:
    """The API's artifact download (its recorded SHA-256 in ``X-Artifact-SHA256``)."""
    return run_routes.run_artifact(job_run_id, caller_of(request), state_of(request))


@router.get("/runs/{job_run_id}/events", response_class=StreamingResponse)
@allow(READ)
@console
async def run_events(
    request: Request,
    job_run_id: str,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,  # checked by the stream (400)
) -> StreamingResponse:
    """The API's event stream of the run (``api.routes.stream``), for the run page's script:
    the same events, limits and re-checks, the caller from the session."""
    return await stream_routes.stream_run(job_run_id, request, caller_of(request), state_of(request), last_event_id)


async def _act_on_run(
    request: Request, job_run_id: str, handler: Callable[[RunActionIn], RunOut], what: str
) -> Response:
    """One of the run page's forms (its CSRF token checked before this runs): the API handler
    with the form's reason; then the run's page — a retry's lands on the new run."""
    # Whole, as the API takes it: a longer one is refused naming the field, never cut short.
    reason = (await form_of(request)).get("reason", "").strip() or None
    return await act(
        lambda: handler(RunActionIn.model_validate({"reason": reason})),
        done=lambda done: f"/runs/{done.job_run_id}",
        again=lambda message, status: _run_page(request, job_run_id, message=message, status=status),
        what=what,
    )


@router.post("/runs/{job_run_id}/cancel")
@allow(RUN_CONTROL)
@console
async def cancel(request: Request, job_run_id: str) -> Response:
    caller, state = caller_of(request), state_of(request)
    return await _act_on_run(
        request, job_run_id, lambda body: run_routes.cancel_run(job_run_id, caller, state, body), "Not cancelled"
    )


@router.post("/runs/{job_run_id}/stop")
@allow(RUN_CONTROL)
@console
async def stop(request: Request, job_run_id: str) -> Response:
    caller, state = caller_of(request), state_of(request)
    return await _act_on_run(
        request, job_run_id, lambda body: run_routes.stop_run(job_run_id, caller, state, body), "Not stopped"
    )


@router.post("/runs/{job_run_id}/retry")
@allow(RUN_CONTROL)
@console
async def retry(request: Request, job_run_id: str) -> Response:
    caller, state = caller_of(request), state_of(request)
    return await _act_on_run(
        request, job_run_id, lambda _: run_routes.retry_run(job_run_id, Response(), caller, state).run, "Not retried"
    )


@router.post("/runs/{job_run_id}/requeue")
@allow(OPERATE)
@console
async def requeue(request: Request, job_run_id: str) -> Response:
    caller, state = caller_of(request), state_of(request)
    return await _act_on_run(
        request, job_run_id, lambda _: operation_routes.requeue_dead_letter(job_run_id, caller, state), "Not requeued"
    )
