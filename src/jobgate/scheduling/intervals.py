"""Interval expressions of definitions' schedules: ``900``, ``15m``, ``every: 1h``, ``2d``."""

from __future__ import annotations

import re

_INTERVAL = re.compile(r"(?:every\s*:?\s*)?([1-9][0-9]*)\s*([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def interval_seconds(expression: str) -> int | None:
    """Seconds of an ``interval`` schedule (``900``, ``15m``, ``every: 1h``), ``None`` if malformed.

    One reading of the format, for the definition rule that accepts it and the schedule built from it.
    """
    match = _INTERVAL.fullmatch(expression.strip())
    if match is None:
        return None
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
