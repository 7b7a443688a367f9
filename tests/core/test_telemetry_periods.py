"""Telemetry periods in UTC and the rollup's choice of periods to publish: pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobgate.core import periods
from jobgate.core.errors import ValidationError
from jobgate.core.periods import PeriodKind
from jobgate.core.records import PeriodCounts
from jobgate.telemetry.rollup import MAX_CATCHUP, due, figures


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "start", "end"),
    [
        ("2026-11-29", "2026-11-29", "2026-11-30"),
        ("2026-12-31", "2026-12-31", "2027-01-01"),
        ("2024-02-29", "2024-02-29", "2024-03-01"),  # a leap day
        ("2026-11", "2026-11-01", "2026-12-01"),
        ("2026-12", "2026-12-01", "2027-01-01"),
        ("2026-02", "2026-02-01", "2026-03-01"),
        ("2026-Q1", "2026-01-01", "2026-04-01"),
        ("2026-Q2", "2026-04-01", "2026-07-01"),
        ("2026-Q4", "2026-10-01", "2027-01-01"),
    ],
)
def test_a_period_name_covers_exactly_its_utc_instants(name: str, start: str, end: str) -> None:
    p = periods.parse(name)
    assert (p.start, p.end, p.name) == (at(start), at(end), name)
    assert periods.containing(p.kind, p.start) == p
    assert periods.containing(p.kind, p.end - timedelta(microseconds=1)) == p
    assert periods.containing(p.kind, p.end) != p
    assert periods.previous(p).end == p.start  # consecutive periods tile time


@pytest.mark.parametrize(  # full-width digits too: only ASCII digits name a period
    "bad", ["2026-13", "2026-00", "2026-Q5", "2026-Q0", "2025-02-29", "2026-1", "26-11", "2026-11-31", "1969-12",
            "\uff12\uff10\uff12\uff16-11", "2026-11 ", "2026/11", "", "9999-Q4"],
)  # fmt: skip
def test_a_malformed_period_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ValidationError) as refused:
        periods.parse(bad)
    assert refused.value.field == "period"


def test_an_instant_elsewhere_in_the_world_falls_in_its_utc_period() -> None:
    from zoneinfo import ZoneInfo

    late_in_oslo = datetime(2026, 12, 31, 23, 30, tzinfo=ZoneInfo("Europe/Oslo"))  # 22:30 UTC
    assert periods.containing(PeriodKind.DAY, late_in_oslo).name == "2026-12-31"
    early_in_tokyo = datetime(2027, 1, 1, 5, 0, tzinfo=ZoneInfo("Asia/Tokyo"))  # 20:00 UTC the day before
    assert periods.containing(PeriodKind.QUARTER, early_in_tokyo).name == "2026-Q4"


def test_closed_means_ended() -> None:
    p = periods.parse("2026-11-29")
    assert not p.is_closed(at("2026-11-29T23:59:59.999999"))
    assert p.is_closed(at("2026-11-30"))
    assert not p.has_started(at("2026-11-28T23:59:59")) and p.has_started(at("2026-11-29"))


def names(ps: list[periods.Period]) -> list[str]:
    return [p.name for p in ps]


def test_due_publishes_only_settled_periods_after_the_last_one() -> None:
    settle = timedelta(minutes=5)
    day = PeriodKind.DAY
    # Just after midnight the day that ended has not settled: the one before is the latest.
    assert names(due(day, at("2026-11-30T00:04"), settle, None)) == ["2026-11-28"]
    assert names(due(day, at("2026-11-30T00:05"), settle, None)) == ["2026-11-29"]
    # Nothing published yet: only the latest (no history is published by a new deployment).
    assert names(due(day, at("2026-11-30T12:00"), settle, None)) == ["2026-11-29"]
    # Published up to the latest: nothing to do, however often asked.
    assert due(day, at("2026-11-30T12:00"), settle, periods.parse("2026-11-29")) == []
    # After an outage: every period since the last publication, oldest first.
    assert names(due(day, at("2026-11-30T12:00"), settle, periods.parse("2026-11-26"))) == [
        "2026-11-27",
        "2026-11-28",
        "2026-11-29",
    ]
    caught_up = due(day, at("2026-11-30T12:00"), settle, periods.parse("2026-01-01"))
    assert len(caught_up) == MAX_CATCHUP and caught_up[0].name == "2026-01-02"  # the rest next time
    assert names(due(PeriodKind.QUARTER, at("2026-07-01T00:05"), settle, None)) == ["2026-Q2"]
    assert names(due(PeriodKind.MONTH, at("2027-01-01T00:10"), settle, periods.parse("2026-11"))) == ["2026-12"]


def test_figures_have_the_seed_shape_and_rates_over_what_was_scheduled() -> None:
    counts = PeriodCounts(
        scheduled=18440,
        completed=18412,
        retries=258,
        dead_lettered=4,
        breached=15,
        dal_scheduled=5000,
        dal_completed=4998,
        workflows_finished=4,
        workflow_latency_us=4 * 842_000,
        replay_backlog=12,
    )
    doc = figures(counts, periods.parse("2026-Q2"), "ECO-A123")
    assert doc == {
        "eco_number": "ECO-A123",
        "period": "2026-Q2",
        "jobs_scheduled": 18440,
        "jobs_completed": 18412,
        "job_success_rate": 0.998482,
        "retry_rate": 0.013991,
        "dead_letter_rate": 0.000217,
        "sla_breach_rate": 0.000813,
        "avg_workflow_latency_ms": 842,
        "replay_backlog": 12,
        "dal_batch_success_rate": 0.9996,
    }
    empty = figures(PeriodCounts(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), periods.parse("2026-11"))
    assert "eco_number" not in empty and empty["job_success_rate"] is None
    assert empty["avg_workflow_latency_ms"] is None and empty["dal_batch_success_rate"] is None
