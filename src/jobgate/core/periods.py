"""Telemetry periods (seed 000 §37, §51): calendar days, months and quarters in UTC.

A period is named by what it covers — ``2026-11-29``, ``2026-11``, ``2026-Q2`` — and covers
``[start, end)`` in UTC, so a name always denotes the same instants whatever the host's
timezone, and consecutive periods tile time with no gap and no overlap. Pure: the caller
passes the instant it means by "now".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum

from jobgate.core.errors import ValidationError


class PeriodKind(StrEnum):
    DAY = "day"
    MONTH = "month"
    QUARTER = "quarter"


@dataclass(frozen=True, order=True)
class Period:
    start: datetime
    end: datetime
    kind: PeriodKind
    name: str

    def is_closed(self, now: datetime) -> bool:
        """Ended: nothing stamped later than ``now`` can fall in it any more."""
        return self.end <= now

    def has_started(self, now: datetime) -> bool:
        return self.start <= now


_NAME = re.compile(r"(?P<year>[0-9]{4})(?:-Q(?P<quarter>[1-4])|-(?P<month>[0-9]{2})(?:-(?P<day>[0-9]{2}))?)")
RULE = "a day YYYY-MM-DD, a month YYYY-MM or a quarter YYYY-Qn (UTC)"


def parse(text: str, *, field: str = "period") -> Period:
    """The period named ``text``, or ``ValidationError`` naming ``field``."""
    match = _NAME.fullmatch(text)
    if match is None:
        raise ValidationError(f"{text!r} is not {RULE}", field=field)
    year = int(match["year"])
    if not 1970 <= year <= 9998:
        raise ValidationError(f"{text!r}: the year must be between 1970 and 9998", field=field)
    if match["quarter"] is not None:
        return _quarter(year, int(match["quarter"]))
    month = int(match["month"])
    if not 1 <= month <= 12:
        raise ValidationError(f"{text!r}: no month {month:02d}", field=field)
    if match["day"] is None:
        return _month(year, month)
    try:
        day = date(year, month, int(match["day"]))
    except ValueError:
        raise ValidationError(f"{text!r}: no such day", field=field) from None
    return _day(day)


def containing(kind: PeriodKind, at: datetime) -> Period:
    """The period of ``kind`` that ``at`` falls in."""
    at = at.astimezone(UTC)
    if kind is PeriodKind.DAY:
        return _day(at.date())
    if kind is PeriodKind.MONTH:
        return _month(at.year, at.month)
    return _quarter(at.year, (at.month - 1) // 3 + 1)


def previous(period: Period) -> Period:
    """The period of the same kind just before ``period``."""
    return containing(period.kind, period.start - timedelta(microseconds=1))


def last_closed(kind: PeriodKind, now: datetime) -> Period:
    """The most recent period of ``kind`` that has ended at ``now``."""
    return previous(containing(kind, now))


def _day(d: date) -> Period:
    start = datetime(d.year, d.month, d.day, tzinfo=UTC)
    following = date.fromordinal(d.toordinal() + 1)
    return Period(
        start, datetime(following.year, following.month, following.day, tzinfo=UTC), PeriodKind.DAY, d.isoformat()
    )


def _month(year: int, month: int) -> Period:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end, PeriodKind.MONTH, f"{year:04d}-{month:02d}")


def _quarter(year: int, quarter: int) -> Period:
    first = 3 * (quarter - 1) + 1
    start = datetime(year, first, 1, tzinfo=UTC)
    end = datetime(year + quarter // 4, (first + 2) % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end, PeriodKind.QUARTER, f"{year:04d}-Q{quarter}")
