"""Cron slots with real instants: DST in four kinds of zone, OR of the day fields, Feb 29, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobgate.core.errors import ValidationError
from jobgate.scheduling.model import Schedule, ScheduleKind, check_schedule
from jobgate.scheduling.plan import next_fires, slots

ANCHOR = datetime(2020, 1, 1, tzinfo=UTC)


def cron(expression: str, zone: str = "UTC") -> Schedule:
    return check_schedule(Schedule("s", "job", ScheduleKind.CRON, ANCHOR, timezone=zone, cron=expression))


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def fires(expression: str, zone: str, start: str, end: str) -> list[str]:
    found = slots(cron(expression, zone), utc(start), utc(end))
    return [s.fire_at.isoformat().replace("+00:00", "Z") for s in found]


# Each row: zone, expression, range (UTC), the exact fires (UTC). One fire per local day, none
# doubled, none skipped: a skipped local time fires right after the jump, a repeated one once.
DST_CASES = [
    # Europe/Oslo, 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist that day.
    (
        "Europe/Oslo",
        "30 2 * * *",
        "2026-03-27T12:00Z",
        "2026-03-30T12:00Z",
        ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
    ),
    # Europe/Oslo, 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice, fires the first.
    (
        "Europe/Oslo",
        "30 2 * * *",
        "2026-10-23T12:00Z",
        "2026-10-26T12:00Z",
        ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
    ),
    # America/New_York, 2026-03-08 02:00 EST -> 03:00 EDT.
    (
        "America/New_York",
        "30 2 * * *",
        "2026-03-07T00:00Z",
        "2026-03-09T23:00Z",
        ["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
    ),
    # America/New_York, 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice.
    (
        "America/New_York",
        "30 1 * * *",
        "2026-10-31T00:00Z",
        "2026-11-02T23:00Z",
        ["2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
    ),
    # Australia/Lord_Howe, a 30-minute shift: 2026-10-04 02:00 -> 02:30 (+10:30 -> +11).
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        "2026-10-02T00:00Z",
        "2026-10-05T00:00Z",
        ["2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
    ),
    # Australia/Lord_Howe, 2026-04-05 02:00 -> 01:30 (+11 -> +10:30): 01:45 happens twice.
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2026-04-03T00:00Z",
        "2026-04-06T00:00Z",
        ["2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"],
    ),
    # America/Santiago changes at midnight: 2026-09-06 00:00 -> 01:00 (-04 -> -03), so the
    # day's midnight does not exist; it fires at 01:00, the first instant of that day.
    (
        "America/Santiago",
        "0 0 * * *",
        "2026-09-04T12:00Z",
        "2026-09-07T12:00Z",
        ["2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"],
    ),
    # America/Santiago, 2026-04-05 00:00 -> 2026-04-04 23:00 (-03 -> -04): 23:30 twice, once.
    (
        "America/Santiago",
        "30 23 * * *",
        "2026-04-03T12:00Z",
        "2026-04-06T12:00Z",
        ["2026-04-04T02:30:00Z", "2026-04-05T02:30:00Z", "2026-04-06T03:30:00Z"],
    ),
]


@pytest.mark.parametrize(("zone", "expression", "start", "end", "expected"), DST_CASES)
def test_dst_fires_once_per_local_day(zone: str, expression: str, start: str, end: str, expected: list[str]) -> None:
    assert fires(expression, zone, start, end) == expected


def test_wildcard_hours_fire_at_each_real_instant_of_a_repeated_hour() -> None:
    # Every 30 minutes across Oslo's fall-back: 02:00 and 02:30 happen twice and are distinct
    # instants, so both passes fire (Debian cron does the same); nothing is doubled in UTC.
    # 23:30Z is 01:30 CEST; 00:00Z and 00:30Z are 02:00 and 02:30 CEST; 01:00Z and 01:30Z are
    # 02:00 and 02:30 again, in CET; 02:00Z is 03:00 CET.
    got = fires("*/30 * * * *", "Europe/Oslo", "2026-10-24T23:00Z", "2026-10-25T02:00Z")
    assert got == ["2026-10-24T23:30:00Z"] + [
        f"2026-10-25T{h}Z" for h in ("00:00:00", "00:30:00", "01:00:00", "01:30:00", "02:00:00")
    ]
    assert len(set(got)) == len(got)


def test_day_of_month_and_day_of_week_combine_with_or() -> None:
    # The 13th, or any Friday: January 2026 has Fridays 2, 9, 16, 23, 30 and the 13th is a Tuesday.
    got = fires("0 9 13 * 5", "UTC", "2026-01-01T00:00Z", "2026-01-31T23:59Z")
    assert [d[8:10] for d in got] == ["02", "09", "13", "16", "23", "30"]
    # Only one of the two restricted: the other is ignored, not OR-ed with '*'.
    assert len(fires("0 9 13 * *", "UTC", "2026-01-01T00:00Z", "2026-12-31T23:59Z")) == 12
    assert len(fires("0 9 * * 5", "UTC", "2026-01-01T00:00Z", "2026-01-31T23:59Z")) == 5


def test_feb_29_skips_the_non_leap_century_2100() -> None:
    got = [s.fire_at for s in next_fires(cron("0 0 29 2 *"), utc("2096-01-01T00:00Z"), 3)]
    assert got == [utc("2096-02-29T00:00Z"), utc("2104-02-29T00:00Z"), utc("2108-02-29T00:00Z")]


@pytest.mark.parametrize(
    ("macro", "same_as"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
    ],
)
def test_macros_expand_to_their_five_field_forms(macro: str, same_as: str) -> None:
    assert cron(macro).cron == same_as
    start, end = "2026-01-01T00:00Z", "2027-01-02T00:00Z"
    assert fires(macro, "UTC", start, end) == fires(same_as, "UTC", start, end)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("61 * * * *", "minute"),
        ("0 24 * * *", "hour"),
        ("0 0 32 * *", "day-of-month"),
        ("0 0 30 2 *", "day-of-month"),  # February never has a 30th
        ("0 0 * 13 *", "month"),
        ("0 0 * * 8", "day-of-week"),
        ("* * * *", "five fields"),
        ("* * * * * *", "five fields"),
        ("@reboot", "unknown cron macro"),
        ("", "needs an expression"),
    ],
)
def test_invalid_expressions_are_refused_naming_the_field(expression: str, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        cron(expression)
    assert err.value.field == "cron"
    assert words in err.value.message


def test_unknown_timezone_is_refused() -> None:
    with pytest.raises(ValidationError) as err:
        cron("0 * * * *", zone="Mars/Olympus_Mons")
    assert err.value.field == "timezone"


def test_fires_are_utc_and_strictly_after_the_start() -> None:
    got = list(slots(cron("0 * * * *"), utc("2026-01-01T05:00Z"), utc("2026-01-01T07:00Z")))
    assert [s.fire_at for s in got] == [utc("2026-01-01T06:00Z"), utc("2026-01-01T07:00Z")]
    assert all(s.fire_at.utcoffset() == timedelta(0) for s in got)


def test_a_plan_from_inside_a_repeated_hour_owes_nothing_already_run() -> None:
    # Oslo's 02:30 ran in the first pass (00:30Z). Every tick in the second pass (01:00Z-02:00Z)
    # plans from a watermark in that pass: nothing is owed until the next night, and `next`
    # (and a backfill's range) never starts with an instant before its lower bound.
    from jobgate.scheduling.plan import plan

    schedule = cron("30 2 * * *", "Europe/Oslo")
    for minute in range(0, 60, 5):
        mark = utc("2026-10-25T01:00Z") + timedelta(minutes=minute)
        made = plan(schedule, watermark=mark, now=mark + timedelta(seconds=30))
        assert made.fires == () and made.misses == ()
        assert [s.fire_at for s in next_fires(schedule, mark, 2)] == [
            utc("2026-10-26T01:30Z"),
            utc("2026-10-27T01:30Z"),
        ]


# Zones that skipped a whole day, moving across the date line: a correction of more than three
# hours (Debian cron's word), not a DST jump.
DATE_LINE_JUMPS = [
    ("Pacific/Apia", "2011-12-27T00:00:00Z", "2012-01-03T00:00:00Z"),
    ("Pacific/Kiritimati", "1994-12-27T00:00:00Z", "1995-01-04T00:00:00Z"),
    ("Pacific/Kwajalein", "1993-08-17T00:00:00Z", "1993-08-24T00:00:00Z"),
]


@pytest.mark.parametrize(("zone", "start", "end"), DATE_LINE_JUMPS)
@pytest.mark.parametrize("expression", ["0 12 * * *", "0 0 * * *", "30 23 * * *", "15 6,18 * * *", "0 9 * * 1-5"])
def test_a_skipped_day_is_not_caught_up_on_the_next(zone: str, start: str, end: str, expression: str) -> None:
    """Found by a review: a daily 12:00 in Pacific/Apia ran twice on 2011-12-31 (the skipped
    30th's slot at the jump, then the 31st's), both rendering the same business date."""
    from zoneinfo import ZoneInfo

    local = [utc(f).astimezone(ZoneInfo(zone)) for f in fires(expression, zone, start, end)]
    walls = [(t.date(), t.hour, t.minute) for t in local]
    assert len(walls) == len(set(walls))  # no local date and time fires twice
    days = sorted({d for d, _, _ in walls})[1:-1]  # whole local days: the range cuts the first and last
    expected = len(expression.split()[1].split(","))
    assert {sum(1 for w in walls if w[0] == d) for d in days} == {expected}  # as the expression says, no more
    assert all((t.hour, t.minute) in {(w[1], w[2]) for w in walls} for t in local)  # never off its time


def test_a_dst_jump_still_fires_its_skipped_time_at_the_jump() -> None:
    assert fires("30 2 * * *", "Europe/Oslo", "2026-03-28T00:00:00Z", "2026-03-30T00:00:00Z") == [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",  # 02:30 does not exist: at the jump, 03:00 CEST
    ]
