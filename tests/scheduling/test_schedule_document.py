"""A schedule's document (what the API shows and the audit log keeps) reads back as the same
schedule, for every kind: a document read from ``GET /schedules`` can be posted again as it is.
A ``kind`` that disagrees with the rest of the document is refused naming it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jobgate.core.errors import ValidationError
from jobgate.scheduling.model import ScheduleKind, schedule_document
from jobgate.service.schedules import schedule_from_document

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
DOCS: dict[ScheduleKind, dict[str, Any]] = {
    ScheduleKind.CRON: {"cron": "5 2 * * 1-5", "timezone": "Europe/Dublin"},
    ScheduleKind.INTERVAL: {"every_seconds": 90},
    ScheduleKind.ADAPTIVE: {"every_seconds": 60, "adaptive": True, "min_every_seconds": 30, "max_every_seconds": 600},
    ScheduleKind.BATCH_WINDOW: {"window_seconds": 3600},
    ScheduleKind.EVENT: {"event_type": "file.arrived", "payload_params": ["path"]},
    ScheduleKind.QUEUE: {"event_type": "work.item", "queue": True},
    ScheduleKind.POLICY: {"condition": "backlog > 10"},
    ScheduleKind.ALERT: {"condition": "errors > 3", "alert": True},
    ScheduleKind.CONFIGURATION: {"config_profile": "prod", "watch": ["threshold"]},
    ScheduleKind.SAFE_MODE: {"safe_mode": True, "every_seconds": 300},
}


def test_every_kind_is_covered() -> None:
    assert set(DOCS) == set(ScheduleKind)


@pytest.mark.parametrize("kind", list(DOCS), ids=str)
def test_a_document_reads_back_as_the_same_schedule(kind: ScheduleKind) -> None:
    timed = {"misfire": "skip", "max_catchup": 7} if kind.timed else {}
    doc = {"id": f"s-{kind.value}", "job": "j", "params": {"n": "1"}, **timed, **DOCS[kind]}
    schedule = schedule_from_document(doc, now=NOW)
    assert schedule.kind is kind
    shown = schedule_document(schedule)
    assert shown["kind"] == kind.value
    again = schedule_from_document(shown, now=NOW)
    assert again == schedule
    assert schedule_document(again) == shown


def test_a_kind_that_disagrees_is_refused_naming_it() -> None:
    shown = schedule_document(schedule_from_document({"id": "s", "job": "j", "every_seconds": 60}, now=NOW))
    with pytest.raises(ValidationError) as refused:
        schedule_from_document({**shown, "kind": "cron"}, now=NOW)
    assert refused.value.field == "kind" and "interval" in refused.value.message
