"""Schedules, event ingestion and dead letters: the operator's surface.

Schedules are added from the same document form as the seed files and ``jobgate schedules
add`` (``id``, ``job``, one of ``cron``/``every_seconds``/...); the tenant is the token's.
Events are de-duplicated by their source event id: posting the same event again fires
nothing new and returns the runs the first delivery made.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field

from jobgate.api import pagination
from jobgate.api.access import OPERATE, READ, allow, principal
from jobgate.api.errors import TenantClaimMismatch
from jobgate.api.responses import repeated
from jobgate.api.routes.runs import ensure_may_use, visible_run
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import NotFoundError, ValidationError
from jobgate.scheduling.model import schedule_document
from jobgate.scheduling.plan import MissReason
from jobgate.scheduling.records import StoredSchedule
from jobgate.service import control, schedules, triggers
from jobgate.service.submission import EventOrigin
from jobgate.service.tokens import Principal
from jobgate.views.schemas import (
    DeadLetterOut,
    EventFireOut,
    EventIn,
    EventOut,
    MissOut,
    Page,
    Request,
    RunOut,
    ScheduleChangedOut,
    ScheduleCreateIn,
    ScheduleItemOut,
)

router = APIRouter(prefix="/api/v1", tags=["operations"])

Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ServerState, Depends(server_state)]


def schedule_out(item: StoredSchedule, warnings: list[str] | None = None) -> ScheduleItemOut:
    s = item.schedule
    return ScheduleItemOut(
        schedule_id=s.schedule_id,
        job_definition_id=s.job_definition_id,
        kind=s.kind.value,
        paused=s.paused,
        state=item.state,
        owner="definition" if item.source == schedules.DEFINITION_SOURCE else item.source,
        failures=item.failures,
        last_error=item.last_error,
        retry_at=item.retry_at,
        document=schedule_document(s),
        watermark=item.watermark,
        created_at=item.created_at,
        updated_at=item.updated_at,
        warnings=warnings or [],
    )


@router.get("/schedules", response_model=Page[ScheduleItemOut])
@allow(READ)
def list_schedules(
    caller: Caller,
    state: State,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> Page[ScheduleItemOut]:
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = [i for i in tx.schedules_list(caller.tenant_id) if caller.may_use(i.schedule.job_definition_id)]
    page, next_cursor = pagination.page_in_memory(found, lambda i: i.schedule.schedule_id, cursor=cursor, limit=limit)
    return Page[ScheduleItemOut](items=[schedule_out(i) for i in page], next_cursor=next_cursor)


@router.post("/schedules", status_code=201, response_model=ScheduleItemOut, responses=repeated(ScheduleItemOut))
@allow(OPERATE)
def add_schedule(body: ScheduleCreateIn, response: Response, caller: Caller, state: State) -> ScheduleItemOut:
    """Create or replace a schedule (201 created, 200 replaced)."""
    doc = dict(body.schedule)
    if doc.get("tenant") not in (None, caller.tenant_id):
        raise TenantClaimMismatch(field="schedule.tenant")
    doc["tenant"] = caller.tenant_id
    now = state.engine.clock.now()
    schedule = schedules.schedule_from_document(doc, now=now, source="api")
    ensure_may_use(caller, schedule.job_definition_id)
    if caller.jobs is not None:  # replacing a schedule of a definition the token may not use
        with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
            existing = tx.schedule_get(caller.tenant_id, schedule.schedule_id)
        if existing is not None and not caller.may_use(existing.schedule.job_definition_id):
            raise NotFoundError(f"no schedule {schedule.schedule_id!r} you may replace", field="schedule.id")
    warnings: list[str] = []
    (created,) = schedules.put_schedules(
        state.engine, [schedule], source="api", now=now, actor=caller.actor,
        allow_pending=body.allow_pending, warnings=warnings,
    )  # fmt: skip
    if created is not schedules.PutOutcome.CREATED:
        response.status_code = 200
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        stored = tx.schedule_get(caller.tenant_id, schedule.schedule_id)
    assert stored is not None
    return schedule_out(stored, warnings)


@router.get("/schedules/{schedule_id}/misses", response_model=Page[MissOut])
@allow(READ)
def schedule_misses(
    schedule_id: str,
    caller: Caller,
    state: State,
    reason: Annotated[MissReason | None, Query(description="only misses for this reason")] = None,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> Page[MissOut]:
    """The slots the schedule owed and did not fire, oldest first, with why."""
    visible_schedule(state, caller, schedule_id)
    last = pagination.decode_time_key(cursor)
    after = None if last is None else last[0]
    page = schedules.misses(
        state.engine, caller.tenant_id, schedule_id, reason=None if reason is None else reason.value,
        after=after, limit=limit + 1,
    )  # fmt: skip
    more = len(page) > limit
    page = page[:limit]
    items = [MissOut(fire_at=m.fire_at, reason=m.reason, recorded_at=m.recorded_at) for m in page]
    return Page[MissOut](
        items=items, next_cursor=pagination.encode_time_key(page[-1].fire_at, schedule_id) if more else None
    )


def visible_schedule(state: ServerState, caller: Principal, schedule_id: str) -> StoredSchedule:
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = tx.schedule_get(caller.tenant_id, schedule_id)
    if found is None or not caller.may_use(found.schedule.job_definition_id):
        raise NotFoundError(f"no schedule {schedule_id!r}", field="schedule_id")
    return found


@router.post("/schedules/{schedule_id}/enable", response_model=ScheduleChangedOut)
@allow(OPERATE)
def enable_schedule(schedule_id: str, caller: Caller, state: State) -> ScheduleChangedOut:
    """Resume; ``changed`` is false when it was already enabled (nothing recorded)."""
    visible_schedule(state, caller, schedule_id)
    now = state.engine.clock.now()
    changed = schedules.set_paused(state.engine, caller.tenant_id, schedule_id, False, now=now, actor=caller.actor)
    return ScheduleChangedOut(schedule_id=schedule_id, changed=changed)


@router.post("/schedules/{schedule_id}/disable", response_model=ScheduleChangedOut)
@allow(OPERATE)
def disable_schedule(schedule_id: str, caller: Caller, state: State) -> ScheduleChangedOut:
    """Pause; ``changed`` is false when it was already disabled (nothing recorded)."""
    visible_schedule(state, caller, schedule_id)
    now = state.engine.clock.now()
    changed = schedules.set_paused(state.engine, caller.tenant_id, schedule_id, True, now=now, actor=caller.actor)
    return ScheduleChangedOut(schedule_id=schedule_id, changed=changed)


@router.delete("/schedules/{schedule_id}", status_code=204, response_class=Response)
@allow(OPERATE)
def delete_schedule(schedule_id: str, caller: Caller, state: State) -> Response:
    visible_schedule(state, caller, schedule_id)
    schedules.delete(state.engine, caller.tenant_id, schedule_id, now=state.engine.clock.now(), actor=caller.actor)
    return Response(status_code=204)


def _event_identity(body: EventIn) -> tuple[str, EventOrigin]:
    """The event's id (``event_id``, or the seed §18 ``trigger_id``) and its origin."""
    if body.event_id is not None and body.trigger_id is not None and body.event_id != body.trigger_id:
        raise ValidationError("event_id and trigger_id name different events: give one", field="trigger_id")
    event_id = body.event_id or body.trigger_id
    if event_id is None:
        raise ValidationError("required: the source's id of this event (event_id or trigger_id)", field="event_id")
    context = dict(body.policy_context)
    if body.created_at is not None:
        if body.created_at.tzinfo is None:
            raise ValidationError("needs a UTC offset (e.g. 2026-06-25T18:00:00Z)", field="created_at")
        context["source_created_at"] = isoformat_utc(body.created_at)
    origin = EventOrigin(body.source_engine_meid, body.source_engine_cmi, body.signal_id, body.eco_number, context)
    return event_id, origin


@router.post("/events", response_model=EventOut)
@allow(OPERATE)
def post_event(body: EventIn, caller: Caller, state: State) -> EventOut:
    """Fire every schedule of the tenant subscribed to ``event_type``. The source event id is
    part of each run's key: a redelivered event finds the runs the first delivery made."""
    event_id, origin = _event_identity(body)
    fired = triggers.emit_event(
        state.engine,
        event_type=body.event_type,
        event_id=event_id,
        data=body.data,
        tenant_id=caller.tenant_id,
        actor=caller.actor,
        only_definitions=caller.jobs,
        origin=origin,
        quota=True,
    )
    return EventOut(
        event_type=body.event_type,
        event_id=event_id,
        fired=[
            EventFireOut(
                schedule_id=f.schedule_id,
                job_definition_id=f.job_definition_id,
                job_run_id=f.job_run_id,
                created=f.created,
                refused=f.refused,
            )
            for f in fired
        ],
    )


@router.get("/dead-letters", response_model=Page[DeadLetterOut])
@allow(OPERATE)
def list_dead_letters(
    caller: Caller,
    state: State,
    include_resolved: bool = False,
    limit: Annotated[int, Query(ge=1, le=pagination.MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(max_length=400, pattern=pagination.CURSOR_PATTERN)] = None,
) -> Page[DeadLetterOut]:
    before = pagination.decode_time_key(cursor)
    with state.engine.store.read(tenant_id=caller.tenant_id) as tx:
        found = tx.dead_letters_list(caller.tenant_id, open_only=not include_resolved, limit=limit + 1, before=before)
        page, more = found[:limit], len(found) > limit
        next_cursor = pagination.encode_time_key(page[-1].created_at, page[-1].dead_letter_id) if more else None
        if caller.jobs is not None:  # a page may come out short; the cursor still moves on
            runs = {r.job_run_id: r for r in tx.runs_get([d.job_run_id for d in page])}
            page = [d for d in page if d.job_run_id in runs and caller.may_use(runs[d.job_run_id].job_definition_id)]
    return Page[DeadLetterOut](items=[DeadLetterOut.of(d) for d in page], next_cursor=next_cursor)


class CloseLetterIn(Request):
    note: str = Field(min_length=1, max_length=control.MAX_CLOSE_NOTE, description="why nothing more is to run")


@router.post("/dead-letters/{job_run_id}/close", response_model=DeadLetterOut)
@allow(OPERATE)
def close_dead_letter(job_run_id: str, body: CloseLetterIn, caller: Caller, state: State) -> DeadLetterOut:
    """Close the run's open dead letter without another attempt (its workflow ended and acted on
    the failure, the work was done by hand): resolved naming who and why, audited
    (``run.dead_letter_closed``); 409 when it has none open."""
    visible_run(state, caller, job_run_id)
    closed = control.close_dead_letter(
        state.engine, job_run_id, actor=caller.actor, note=body.note, tenant_id=caller.tenant_id
    )
    return DeadLetterOut.of(closed)


@router.post("/dead-letters/{job_run_id}/requeue", response_model=RunOut)
@allow(OPERATE)
def requeue_dead_letter(job_run_id: str, caller: Caller, state: State) -> RunOut:
    """One more attempt for a dead-lettered or escalated run, same idempotency key; 409 otherwise."""
    visible_run(state, caller, job_run_id)
    return RunOut.of(control.requeue_run(state.engine, job_run_id, actor=caller.actor, tenant_id=caller.tenant_id))
