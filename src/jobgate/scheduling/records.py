"""The schedule records the store keeps: a schedule with its state, its misses, its changes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from jobgate.scheduling.model import Schedule

PAUSED_UNAPPROVED = "unapproved"  # a pause reason: waiting for the definition's approval


OWNED_SOURCE = "definition"  # the ``source`` of a schedule its definition keeps (scheduling.owned)


@dataclass(frozen=True)
class StoredSchedule:
    schedule: Schedule
    watermark: datetime
    source: str
    created_at: datetime
    updated_at: datetime
    episode_open: bool = False  # policy and alert schedules
    episodes: int = 0
    config_digest_seen: str | None = None  # configuration schedules
    pause_reason: str | None = None  # ``unapproved``: resumes when its definition is approved
    failures: int = 0  # plans or fires that failed in a row
    last_error: str | None = None
    retry_at: datetime | None = None  # backing off until then

    @property
    def state(self) -> str:
        """``failing``, ``paused`` (with its reason), or ``active``."""
        if self.failures:
            return "failing"
        if self.schedule.paused:
            return f"paused: {self.pause_reason}" if self.pause_reason else "paused"
        return "active"


@dataclass(frozen=True)
class RecordedMiss:
    fire_at: datetime
    reason: str
    recorded_at: datetime


@dataclass(frozen=True)
class ScheduleChange:
    changed_at: datetime
    field: str
    old_value: str | None
    new_value: str
    accepted: bool
    source: str
    reason: str | None


_STATE_FIELDS = ("paused", "resumed")  # values "active" / "paused"
_DOCUMENT_FIELDS = ("created", "updated")  # values: the schedule's document, with its "paused"


def pause_switches(changes: Iterable[ScheduleChange]) -> list[tuple[datetime, bool, bool]]:
    """``(at, paused before, paused after)`` of every recorded change that set the schedule's
    pause state (a pause, a resume, an edit of its document), in order: what
    ``plan.pause_spans`` reads to find the spans it was paused in."""
    out: list[tuple[datetime, bool, bool]] = []
    for c in changes:
        if not c.accepted:
            continue
        if c.field in _STATE_FIELDS:
            out.append((c.changed_at, c.old_value == "paused", c.new_value == "paused"))
        elif c.field in _DOCUMENT_FIELDS:
            after = _paused_in(c.new_value)
            before = after if c.old_value is None else _paused_in(c.old_value)
            out.append((c.changed_at, before, after))
    return out


def _paused_in(document: str) -> bool:
    try:
        found = json.loads(document)
    except ValueError:
        return False
    return bool(found.get("paused")) if isinstance(found, dict) else False


def pause_after_edit(before: StoredSchedule | None, *, asked: bool, unapproved: bool) -> tuple[bool, str | None]:
    """Whether a schedule stored by an edit (or created) is paused, and why (its pause reason).

    Pausing and resuming are an operator's: an edit never resumes a schedule someone paused
    (a pause with any reason but ``unapproved``), whatever the edit's document says, and a
    definition's approval resumes only the schedules waiting for it (``unapproved``). An edit
    that asks for a pause is an operator's pause; a schedule whose definition is not approved
    waits for it; one that waited for an approval since given runs."""
    if before is not None and before.schedule.paused and before.pause_reason != PAUSED_UNAPPROVED:
        return True, before.pause_reason
    if asked:
        return True, None
    if unapproved:
        return True, PAUSED_UNAPPROVED
    return False, None
