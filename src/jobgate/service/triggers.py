"""Event triggers: an event posted to jobgate fires the schedules that subscribe to its type.

The event never chooses what runs: it is matched by type against schedules an operator stored,
and from its data only the fields a schedule lists in ``payload_params`` reach the job, as
params the definition must declare (seed 004). The source event id is part of each run's
idempotency key, so an event delivered twice makes each run once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobgate.core.canonical import canonical_json
from jobgate.core.errors import JobgateError, ValidationError
from jobgate.core.models import Scope
from jobgate.scheduling import magic
from jobgate.scheduling.model import Schedule
from jobgate.scheduling.plan import Miss, MissReason
from jobgate.service.engine import Engine, SubmitRequest

log = logging.getLogger("jobgate.events")

MAX_EVENT_ID = 200


@dataclass(frozen=True)
class EventFire:
    schedule_id: str
    job_definition_id: str
    job_run_id: str | None
    created: bool
    refused: str | None = None  # why no run was made (paused, definition refused it)


def emit_event(
    engine: Engine,
    *,
    event_type: str,
    event_id: str,
    data: Mapping[str, Any],
    tenant_id: str,
    actor: str,
) -> list[EventFire]:
    """Fire every schedule of ``tenant_id`` subscribed to ``event_type``; one result per schedule."""
    if not event_id or len(event_id) > MAX_EVENT_ID or any(ord(c) < 32 for c in event_id):
        raise ValidationError(f"an event id of 1 to {MAX_EVENT_ID} printable characters", field="id")
    if not isinstance(data, Mapping):
        raise ValidationError("event data is a JSON object", field="data")
    try:
        canonical_json(dict(data))
    except ValueError as exc:
        raise ValidationError(str(exc), field="data") from None
    with engine.store.read() as tx:
        subscribed = [
            i.schedule
            for i in tx.schedules_list(tenant_id)
            if not i.schedule.kind.timed and i.schedule.event_type == event_type
        ]
    now = engine.clock.now()
    out: list[EventFire] = []
    for schedule in subscribed:
        if schedule.paused:
            _record(engine, schedule, Miss(schedule.schedule_id, now, MissReason.PAUSED))
            out.append(EventFire(schedule.schedule_id, schedule.job_definition_id, None, False, "paused"))
            continue
        try:
            result = engine.submit(_request(schedule, event_type, event_id, data, actor, now), actor=actor)
        except JobgateError as exc:
            log.warning("event %s %s: schedule %s refused: %s", event_type, event_id, schedule.schedule_id, exc)
            _record(engine, schedule, Miss(schedule.schedule_id, now, MissReason.REFUSED))
            out.append(EventFire(schedule.schedule_id, schedule.job_definition_id, None, False, str(exc)))
            continue
        out.append(EventFire(schedule.schedule_id, schedule.job_definition_id, result.run.job_run_id, result.created))
    log.info(
        "event %s %s: %d schedules, %d runs created",
        event_type,
        event_id,
        len(out),
        sum(f.created for f in out),
        extra={"action": "event_received", "event_type": event_type},
    )
    return out


def _request(
    schedule: Schedule, event_type: str, event_id: str, data: Mapping[str, Any], actor: str, now: datetime
) -> SubmitRequest:
    params = magic.render(schedule.params, now, schedule.zone, None)
    params.update({name: str(data[name]) for name in schedule.payload_params if name in data})
    return SubmitRequest(
        schedule.job_definition_id,
        trigger_type=schedule.kind.trigger_type,
        params=params,
        scope=Scope(tenant_id=schedule.tenant_id),
        requested_by=actor,
        reason=f"event {event_type} via schedule {schedule.schedule_id}",
        source_event_id=event_id,
        event_type=event_type,
        payload=dict(data),
    )


def _record(engine: Engine, schedule: Schedule, miss: Miss) -> None:
    with engine.store.write() as tx:
        tx.misses_record(schedule.tenant_id, [miss], miss.fire_at)
