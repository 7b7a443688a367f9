"""Magic params (seed 004): values a schedule's params may take from the fire being made.

``{{current_month}}`` (``2026-06``), ``{{current_date}}`` (``2026-06-01``), ``{{yesterday}}``
(``2026-05-31``) are dates of the fire instant in the schedule's timezone, so a monthly job
at 00:30 in Oslo gets Oslo's month, not UTC's. ``{{window_start}}`` and ``{{window_end}}``
are a batch window's bounds (ISO 8601, UTC). Anything else between double braces is refused
when the schedule is stored, not when it fires.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import ValidationError
from jobgate.core.models import ExecutionWindow

NAMES = ("current_month", "current_date", "yesterday", "window_start", "window_end")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def check(params: Mapping[str, str]) -> None:
    for name, value in params.items():
        if not isinstance(value, str):
            raise ValidationError(f"param {name!r} must be a string", field=f"params.{name}")
        for found in _PLACEHOLDER.findall(value):
            if found not in NAMES:
                known = ", ".join("{{" + n + "}}" for n in NAMES)
                raise ValidationError(f"unknown magic param {{{{{found}}}}} (known: {known})", field=f"params.{name}")


def render(
    params: Mapping[str, str], fire_at: datetime, zone: ZoneInfo, window: ExecutionWindow | None
) -> dict[str, str]:
    """``params`` with every magic param replaced by its value for this fire. Each value is
    worked out only where a param names it: a fire on the calendar's first day has no
    yesterday, and is refused only by a param that asks for it (naming that param)."""

    def value(name: str, param: str) -> str:
        if name == "window_start":
            return isoformat_utc(window.start) if window is not None else ""
        if name == "window_end":
            return isoformat_utc(window.end) if window is not None else ""
        try:
            local = fire_at.astimezone(zone).date()
        except OverflowError:
            raise ValidationError(
                "the fire's local date is outside the years 1 to 9999", field=f"params.{param}"
            ) from None
        if name == "current_month":
            return f"{local.year:04d}-{local.month:02d}"  # strftime leaves years before 1000 unpadded
        if name == "current_date":
            return local.isoformat()
        if local == date.min:  # yesterday
            raise ValidationError("the fire is on the calendar's first day: no yesterday", field=f"params.{param}")
        return (local - timedelta(days=1)).isoformat()

    return {
        param: _PLACEHOLDER.sub(lambda m, param=param: value(m.group(1), param), text)  # type: ignore[misc]
        for param, text in params.items()
    }
