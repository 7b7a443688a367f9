"""Cron fire times against an independent model, in every IANA zone with DST, 2026-2030.

The model below knows nothing of cronsim or of ``jobgate.scheduling.cron``: it walks every UTC
minute of a range, reads the zone's wall clock there, and matches the expression's fields by
hand. Wildcard-hour expressions fire at every real instant whose wall clock matches; fixed-time
ones fire once per matching wall-clock time: at its first occurrence when it is repeated, at
the jump when it is skipped. Starts are drawn around every transition, including inside both
passes of every repeated span, where planning once went wrong (a fire before its start).
"""

from __future__ import annotations

import functools
import itertools
import zoneinfo
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobgate.scheduling.cron import fire_times

MINUTE = timedelta(minutes=1)
YEARS = range(2026, 2031)


@functools.cache
def transitions(zone: str) -> tuple[tuple[datetime, timedelta, timedelta], ...]:
    """(instant, offset before, offset after) of every offset change in 2026-2030, to the second."""
    tz = ZoneInfo(zone)
    out = []
    day = datetime(YEARS.start, 1, 1, tzinfo=UTC)
    end = datetime(YEARS.stop, 1, 1, tzinfo=UTC)
    offset = day.astimezone(tz).utcoffset()
    while day < end:
        nxt = day + timedelta(days=1)
        new = nxt.astimezone(tz).utcoffset()
        if new != offset:
            low, high = day, nxt
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(tz).utcoffset() == offset:
                    low = middle
                else:
                    high = middle
            assert offset is not None and new is not None
            out.append((high.replace(microsecond=0), offset, new))
            offset = new
        day = nxt
    return tuple(out)


def _dst_zones() -> list[str]:
    found = []
    for name in sorted(zoneinfo.available_timezones()):
        tz = ZoneInfo(name)
        winter = datetime(2026, 1, 15, tzinfo=UTC).astimezone(tz).utcoffset()
        summer = datetime(2026, 7, 15, tzinfo=UTC).astimezone(tz).utcoffset()
        if winter != summer and transitions(name):
            found.append(name)
    return found


DST_ZONES = _dst_zones()


def field_matches(spec: str, value: int, low: int, high: int) -> bool:
    """One cron field, by hand: lists of ``*``, ``a``, ``a-b``, each optionally ``/step``."""
    for item in spec.split(","):
        base, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first, last = (int(x) for x in base.split("-"))
        else:
            first = last = int(base)
        if first <= value <= last and (value - first) % step == 0:
            return True
    return False


def wall_matches(expression: str, wall: datetime) -> bool:
    minute, hour, dom, month, dow = expression.split()
    return (
        field_matches(minute, wall.minute, 0, 59)
        and field_matches(hour, wall.hour, 0, 23)
        and field_matches(dom, wall.day, 1, 31)
        and field_matches(month, wall.month, 1, 12)
        and field_matches(dow, wall.isoweekday() % 7, 0, 6)
    )


@dataclass(frozen=True)
class Grid:
    """Every UTC minute around ``(start, end]`` and the zone's wall clock at each."""

    start: datetime
    end: datetime
    instants: list[datetime]
    walls: list[datetime]

    @classmethod
    def of(cls, zone: str, start: datetime, end: datetime) -> Grid:
        tz = ZoneInfo(zone)
        margin = timedelta(hours=3)  # longer than any repeated span, so first passes are seen
        first = (start - margin).replace(second=0, microsecond=0)
        instants = [first + k * MINUTE for k in range(int((end + margin - first) / MINUTE) + 1)]
        return cls(start, end, instants, [m.astimezone(tz).replace(tzinfo=None) for m in instants])


def model(expression: str, grid: Grid) -> list[datetime]:
    """The fires in ``(start, end]`` by brute force, minute by minute."""
    pairs = list(zip(grid.instants, grid.walls, strict=True))
    minute, hour = expression.split()[:2]
    if minute.startswith("*") or hour.startswith("*"):
        found = [m for m, w in pairs if wall_matches(expression, w)]
    else:
        earliest: dict[datetime, datetime] = {}
        for m, w in pairs:
            earliest.setdefault(w, m)
        found = []
        wall, last = min(grid.walls), max(grid.walls)
        while wall <= last:
            if wall_matches(expression, wall):
                if wall in earliest:
                    found.append(earliest[wall])
                else:  # skipped by a jump: the first instant after it
                    found.append(next(m for m, w in pairs if w > wall))
            wall += MINUTE
    return sorted({m for m in found if grid.start < m <= grid.end})


def planned(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    out = []
    for at in fire_times(expression, ZoneInfo(zone), start):
        if at > end:
            break
        out.append(at)
    return out


def check(expressions: Sequence[str], zone: str, start: datetime, hours: float) -> None:
    grid = Grid.of(zone, start, start + timedelta(hours=hours))
    for expression in expressions:
        got = planned(expression, zone, start, grid.end)
        assert all(at > start for at in got), f"{expression}: a fire at or before the start {start}"
        assert all(a < b for a, b in itertools.pairwise(got)), f"{expression}: fires not strictly ascending"
        assert got == model(expression, grid), expression


def _minute_fields() -> st.SearchStrategy[str]:
    return _field(59)


def _field(high: int) -> st.SearchStrategy[str]:
    value = st.integers(0, high)
    return st.one_of(
        st.just("*"),
        st.integers(2, max(2, high // 2)).map(lambda n: f"*/{n}"),
        value.map(str),
        st.lists(value, min_size=2, max_size=3, unique=True).map(lambda v: ",".join(map(str, sorted(v)))),
        st.tuples(value, value).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.tuples(value, value, st.integers(2, 7)).map(lambda abn: f"{min(abn[:2])}-{max(abn[:2])}/{abn[2]}"),
    )


@st.composite
def starts(draw: st.DrawFn) -> tuple[str, datetime]:
    """A DST zone and an instant near one of its transitions (or anywhere in the years)."""
    zone = draw(st.sampled_from(DST_ZONES))
    changes = transitions(zone)
    if draw(st.integers(0, 4)) == 0:
        instant = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 5 * 365 * 86400)))
    else:
        at, _, _ = draw(st.sampled_from(changes))
        instant = at + timedelta(seconds=draw(st.integers(-3 * 3600, 3 * 3600)))
    return zone, instant


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(minute=_minute_fields(), hour=_field(23), where=starts())
def test_fire_times_agree_with_the_minute_by_minute_model(minute: str, hour: str, where: tuple[str, datetime]) -> None:
    zone, start = where
    check([f"{minute} {hour} * * *"], zone, start, hours=26)


def _folds() -> Iterator[tuple[str, datetime, timedelta]]:
    for zone in DST_ZONES:
        for at, before, after in transitions(zone):
            if before > after:
                yield zone, at, before - after


FOLDS = list(_folds())


def test_every_fold_of_2026_to_2030_is_covered() -> None:
    assert len(DST_ZONES) > 50 and len(FOLDS) > 250


@pytest.mark.parametrize("pass_", ["first", "second"])
def test_starts_inside_either_pass_of_every_repeated_span(pass_: str) -> None:
    # A quarter into a pass: fixed-time jobs at that wall time and at one later in the repeated
    # span (whose slot, seen from the second pass, is the first pass: already gone), a wildcard
    # job every 15 minutes, and a wildcard-hour job at the later minute.
    for zone, at, size in FOLDS:
        start = (at - size * 3 / 4 if pass_ == "first" else at + size / 4).replace(second=0)
        wall = start.astimezone(ZoneInfo(zone))
        later = (start + size / 2).astimezone(ZoneInfo(zone))
        expressions = (
            f"{wall.minute} {wall.hour} * * *",
            f"{later.minute} {later.hour} * * *",
            "*/15 * * * *",
            f"{later.minute} * * * *",
        )
        check(expressions, zone, start, hours=3)


@pytest.mark.parametrize(
    ("expression", "zone", "start", "expected"),
    [
        # Found 1: planning from inside Oslo's second 02:xx pass never returns the first pass.
        ("30 2 * * *", "Europe/Oslo", "2026-10-25T01:10Z", "2026-10-26T01:30Z"),
        # Lord Howe's 30-minute jump (02:00 -> 02:30): 06:00 local is real and fires.
        ("0 */6 * * *", "Australia/Lord_Howe", "2026-10-03T13:45Z", "2026-10-03T19:00Z"),
        # Chatham jumps 02:45 -> 03:45: 03:45 local is the first real minute of hour 3.
        ("* 3 * * *", "Pacific/Chatham", "2026-09-26T12:00Z", "2026-09-26T14:00Z"),
    ],
)
def test_pinned_cases(expression: str, zone: str, start: str, expected: str) -> None:
    begin = datetime.fromisoformat(start.replace("Z", "+00:00"))
    first = next(fire_times(expression, ZoneInfo(zone), begin))
    assert first == datetime.fromisoformat(expected.replace("Z", "+00:00"))
    check([expression], zone, begin, hours=30)
