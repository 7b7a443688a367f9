"""Cron expressions, through cronsim.

Why cronsim and not croniter or a parser of our own: cronsim is small, maintained (it runs
Healthchecks.io's cron checks), and implements Debian cron's semantics that users expect and
that home-made parsers get wrong: day-of-month and day-of-week combine with OR when both are
restricted; a fixed-time job whose local time is skipped by a DST jump runs once, right after
the jump; one whose local time is repeated when clocks go back runs once (the first time).
Jobs with a wildcard hour (``*/30 * * * *``) fire at every real instant that matches, so
during a repeated hour they fire in both passes: those are different instants.

cronsim has no ``@daily``-style macros; they are expanded here to the five-field forms Vixie
cron documents. ``@reboot`` has no place in a durable scheduler and is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
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


def expand(expression: str) -> str:
    """The five-field form of ``expression`` (macros expanded, white space normalised)."""
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in MACROS:
            known = ", ".join(MACROS)
            raise ValidationError(f"unknown cron macro {text!r} (known: {known})", field="cron")
        return MACROS[text.lower()]
    return text


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
    """Matching instants strictly after ``after``, in UTC, ascending, without end."""
    for local in CronSim(expand(expression), after.astimezone(zone)):
        yield local.astimezone(UTC)
