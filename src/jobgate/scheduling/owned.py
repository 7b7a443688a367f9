"""The schedule a definition keeps: its ``trigger_type`` with a ``schedule_expression`` (seed 000
§12, §15) is a schedule like any other, owned by the definition.

A definition says ``trigger_type: cron`` and ``schedule_expression: "0 2 * * *"`` and expects
to run at 02:00; storing it without a schedule (as once happened) is a definition that never
fires, silently. ``owned_schedule`` turns the definition into that schedule (pure); the engine
stores it with each new version, in the version's transaction, and removes it when a version
no longer declares one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobgate.core.models import JobDefinition, TriggerType
from jobgate.scheduling.intervals import interval_seconds
from jobgate.scheduling.model import MisfirePolicy, Schedule, ScheduleKind, check_schedule

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_KINDS = {
    TriggerType.CRON: ScheduleKind.CRON,
    TriggerType.INTERVAL: ScheduleKind.INTERVAL,
    TriggerType.BATCH_WINDOW: ScheduleKind.BATCH_WINDOW,
}


def owned_schedule_id(job_definition_id: str) -> str:
    """The definition's own schedule is named after it (``:`` is not a schedule-id character)."""
    return job_definition_id.replace(":", ".")


def owned_kind(definition: JobDefinition) -> ScheduleKind | None:
    """The kind of schedule ``definition``'s trigger type keeps, if any."""
    return _KINDS.get(definition.trigger_type)


def first_anchor(definition: JobDefinition, now: datetime) -> datetime:
    """Where a new schedule of ``definition`` counts from: ``now``, or the epoch for a batch
    window (its windows fall on the same grid wherever it is applied)."""
    return _EPOCH if owned_kind(definition) is ScheduleKind.BATCH_WINDOW else now


def owned_schedule(
    definition: JobDefinition,
    *,
    tenant_id: str,
    anchor: datetime,
    timezone: str,
    misfire: str,
) -> Schedule | None:
    """The schedule ``definition`` declares, or None. ``anchor``: where an interval or a batch
    window's grid counts from, the kept schedule's on a new version (so its rhythm does not move:
    a grid an earlier change of window length re-anchored stays where it is), else ``now`` for
    an interval (a batch window's grid then starts at the epoch); ``timezone`` and ``misfire``:
    the configured defaults for what the definition does not say."""
    content = definition.content
    expression = content.get("schedule_expression")
    kind = owned_kind(definition)
    if kind is None or not isinstance(expression, str):
        return None
    zone = content.get("schedule_timezone")
    policy = content.get("schedule_misfire")
    every = None if kind is ScheduleKind.CRON else timedelta(seconds=interval_seconds(expression) or 0)
    schedule = Schedule(
        schedule_id=owned_schedule_id(definition.job_definition_id),
        job_definition_id=definition.job_definition_id,
        kind=kind,
        anchor=anchor,
        timezone=zone if isinstance(zone, str) else timezone,
        cron=expression if kind is ScheduleKind.CRON else None,
        every=every,
        misfire=MisfirePolicy(policy if isinstance(policy, str) else misfire),
        tenant_id=tenant_id,
    )
    return check_schedule(schedule)
