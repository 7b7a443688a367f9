"""The console's schedules: each schedule's state, its next fires in its own timezone and in
UTC, the slots it missed and why, and pause / resume for the roles that may.

Reads and switches go through the API handlers they mirror (``api.routes.operations``); the
next fires are the scheduler's own plan (``scheduling.plan.next_fires``), from the later of
now and the schedule's watermark, so the page shows exactly what the leader will fire.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from jobgate.api.access import OPERATE, READ, allow, console
from jobgate.api.routes import operations as operation_routes
from jobgate.console.pages import act, allowed, caller_of, render, state_of
from jobgate.scheduling.plan import next_fires

router = APIRouter(include_in_schema=False)
NEXT = 5


@router.get("/schedules", response_class=HTMLResponse)
@allow(READ)
@console
def schedules_page(request: Request) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    items = operation_routes.list_schedules(caller, state, limit=500).items
    return render(request, "schedules.html", schedules=items)


@router.get("/schedules/{schedule_id}", response_class=HTMLResponse)
@allow(READ)
@console
def schedule_page(request: Request, schedule_id: str) -> HTMLResponse:
    return _schedule_page(request, schedule_id)


def _schedule_page(
    request: Request, schedule_id: str, *, message: str | None = None, status: int = 200
) -> HTMLResponse:
    caller, state = caller_of(request), state_of(request)
    stored = operation_routes.visible_schedule(state, caller, schedule_id)
    now = state.engine.clock.now()
    zone = stored.schedule.zone
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        period = tx.safe_mode_current(caller.tenant_id)  # a safe-mode schedule's fires: while it is on
    since = None if period is None else period.activated_at
    fires = [
        {"local": s.fire_at.astimezone(zone), "utc": s.fire_at, "window": s.window}
        for s in next_fires(stored.schedule, max(now, stored.watermark), NEXT, safe_mode_since=since)
    ]
    misses = operation_routes.schedule_misses(schedule_id, caller, state, reason=None, limit=50).items
    item = operation_routes.schedule_out(stored)  # the schedule itself: any of a tenant's, not one of its first 500
    return render(
        request,
        "schedule.html",
        status=status,
        message=message,
        item=item,
        zone=str(zone),
        fires=fires,
        misses=misses,
        may_switch=allowed(OPERATE, caller),
    )


async def _switch(request: Request, schedule_id: str, pause: bool) -> Response:
    caller, state = caller_of(request), state_of(request)
    handler = operation_routes.disable_schedule if pause else operation_routes.enable_schedule
    return await act(
        lambda: handler(schedule_id, caller, state),
        done=lambda _: f"/schedules/{schedule_id}",
        again=lambda message, status: _schedule_page(request, schedule_id, message=message, status=status),
        what="Not switched",
    )


@router.post("/schedules/{schedule_id}/pause")
@allow(OPERATE)
@console
async def pause(request: Request, schedule_id: str) -> Response:
    return await _switch(request, schedule_id, True)


@router.post("/schedules/{schedule_id}/resume")
@allow(OPERATE)
@console
async def resume(request: Request, schedule_id: str) -> Response:
    return await _switch(request, schedule_id, False)
