"""Cron expressions, through cronsim.

Why cronsim and not croniter or a parser of our own: cronsim is small, maintained (it runs
Healthchecks.io's cron checks), and implements Debian cron's semantics that users expect and
that home-made parsers get wrong: day-of-month and day-of-week combine with OR when both are
restricted; a fixed-time job whose local time is skipped by a DST jump runs once, right after
the jump; one whose local time is repeated when clocks go back runs once (the first time). A
jump forward of more than three hours is, as for Debian cron, a correction of the clock (a zone
moving across the date line: Pacific/Apia skipped 2011-12-30): the times it skips do not fire,
or a daily job would run twice on the day after, for the same business date.
Jobs with a wildcard hour (``*/30 * * * *``) fire at every real instant that matches, so
during a repeated hour they fire in both passes: those are different instants.

cronsim has no ``@daily``-style macros; they are expanded here to the five-field forms Vixie
cron documents. ``@reboot`` has no place in a durable scheduler and is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from jobgate.core.errors import ValidationError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


# ``5-5/2`` is the range 5..5 stepped by 2, so only 5; cronsim reads a one-value range before a
# step as a start (``5/2``: 5, 7, 9, ...). Written as the single value it means, it is exact.
_ONE_VALUE_RANGE = re.compile(r"(?<![0-9A-Za-z])([0-9]+)-\1/[0-9]+(?![0-9])")


def expand(expression: str) -> str:
    """The five-field form of ``expression`` (macros expanded, white space normalised)."""
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in MACROS:
            known = ", ".join(MACROS)
            raise ValidationError(f"unknown cron macro {text!r} (known: {known})", field="cron")
        return MACROS[text.lower()]
    return _ONE_VALUE_RANGE.sub(r"\1", text)


def validate(expression: str) -> str:
    """Refuse an invalid expression with the cron field at fault; return the expanded form."""
    text = expand(expression)
    if len(text.split(" ")) != 5:
        raise ValidationError(
            f"{expression!r}: a cron expression has five fields (minute hour day-of-month month day-of-week)",
            field="cron",
        )
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        # cronsim names the field ("Bad day-of-month"); keep its words, add ours.
        raise ValidationError(f"{expression!r}: {str(exc).lower()}", field="cron") from None
    return text


def fire_times(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Matching instants strictly after ``after``, in UTC, strictly ascending, without end.

    cronsim answers only the calendar question, in naive wall-clock time where it has no zone
    logic to get wrong: which wall-clock minutes match. Turning each into real instants is done
    here, by the rules above. cronsim's own zone handling, asked directly, yielded the first pass
    of a repeated hour when started inside the second (an instant before ``after``: the scheduler
    planned a slot that had run), and in zones whose shift is not a whole hour (Lord Howe,
    Chatham) it stepped over real instants of wildcard-hour expressions.
    """
    text = expand(expression)
    minute, hour = text.split(" ")[:2]
    fixed = not minute.startswith("*") and not hour.startswith("*")  # Debian cron's distinction
    try:
        first = _first_wall(after.astimezone(zone), zone)
    except OverflowError:  # ``after`` is before the zone's year 1 (west of UTC) or past its 9999
        if after.year > 1:
            return
        first = datetime.min  # every local time of the calendar's first day is after it
    walls = _Walls(text, first)
    last = after.astimezone(UTC)
    for wall in walls:
        for at in _instants(wall, zone, fixed, walls):
            if at > last:  # a skipped time fires at the jump: several may land on one instant
                last = at
                yield at


_SECOND = timedelta(seconds=1)
# Debian cron: "clock changes of more than 3 hours are considered to be corrections to the clock
# or timezone"; the jobs of a skipped span up to that long run at the jump, longer ones not.
CORRECTION = timedelta(hours=3)


class _Walls:
    """The matching wall-clock times (naive, ascending) from cronsim; one can be put back."""

    def __init__(self, text: str, start: datetime) -> None:
        self._back: list[datetime] = []
        try:
            self._sim = CronSim(text, start - _SECOND)  # cronsim yields strictly after its start
        except OverflowError:  # the calendar's first minute: nothing before it to start from
            self._sim = CronSim(text, start)
            if _matches(self._sim, start):
                self._back.append(start)

    def __iter__(self) -> Iterator[datetime]:
        return self

    def __next__(self) -> datetime:
        return self._back.pop() if self._back else next(self._sim)

    def put_back(self, wall: datetime) -> None:
        self._back.append(wall)


def _matches(sim: CronSim, wall: datetime) -> bool:
    """Whether the wall-clock minute ``wall`` is one of ``sim``'s (what cronsim, which only
    looks strictly after its start, cannot say of its start)."""
    return (
        wall.second == 0
        and wall.minute in sim.minutes
        and wall.hour in sim.hours
        and wall.month in sim.months
        and sim.match_day(wall.date())
    )


def _first_wall(local: datetime, zone: ZoneInfo) -> datetime:
    """The earliest wall-clock time that can still map to an instant after ``local``: its own
    minute, or, when ``local`` is in the first pass of a repeated hour, the start of that hour
    (whose second pass is yet to come)."""
    wall = local.replace(tzinfo=None, second=0, microsecond=0)
    early, late = _offsets(wall, zone)
    if local.fold == 0 and early > late:
        first = (wall - early).replace(tzinfo=UTC)
        return _local(_transition(first, (wall - late).replace(tzinfo=UTC), zone), late)
    return wall


def _instants(wall: datetime, zone: ZoneInfo, fixed: bool, walls: _Walls) -> list[datetime]:
    """The instants a matching wall-clock time fires at, ascending. A time that exists once: that
    instant. A skipped time: a fixed-time job fires once at the jump (none when the jump is a
    correction, over ``CORRECTION``), a wildcard one not at all (it fires at the real instants
    around it). A repeated time: a fixed-time job fires at the
    first pass; a wildcard one at both, so the rest of the repeated span's matches are taken
    from ``walls`` and all first passes come before all second passes."""
    early, late = _offsets(wall, zone)
    if early == late:
        return [(wall - early).replace(tzinfo=UTC)]
    if early < late:  # in a gap: fold=0 reads the offset before the jump, the smaller one
        if not fixed or late - early > CORRECTION:
            return []
        return [_transition((wall - late).replace(tzinfo=UTC), (wall - early).replace(tzinfo=UTC), zone)]
    first = (wall - early).replace(tzinfo=UTC)
    if fixed:
        return [first]
    repeated_until = _local(_transition(first, (wall - late).replace(tzinfo=UTC), zone), early)
    group = [wall]
    for more in walls:
        if more >= repeated_until:
            walls.put_back(more)
            break
        group.append(more)
    return [(w - early).replace(tzinfo=UTC) for w in group] + [(w - late).replace(tzinfo=UTC) for w in group]


def _offsets(wall: datetime, zone: ZoneInfo) -> tuple[timedelta, timedelta]:
    """The UTC offsets of a wall-clock time read as its first and its second occurrence: equal
    for a time that exists once, first > second in a repeated span, first < second in a gap."""
    early = wall.replace(tzinfo=zone, fold=0).utcoffset()
    late = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert early is not None and late is not None
    return early, late


def _transition(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The instant, to the second, in ``(before, after]`` at which the zone's offset changes
    (``before`` and ``after`` are on either side of one change)."""
    offset = before.astimezone(zone).utcoffset()
    low, high = 0, int((after - before) / _SECOND)
    while high - low > 1:
        middle = (low + high) // 2
        if (before + middle * _SECOND).astimezone(zone).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return before + high * _SECOND


def _local(instant: datetime, offset: timedelta) -> datetime:
    """The naive wall-clock time of a UTC instant at ``offset``."""
    return instant.replace(tzinfo=None) + offset
