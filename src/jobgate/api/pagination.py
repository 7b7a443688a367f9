"""Opaque cursors for list endpoints.

A cursor is the sort key of the last row a page returned, base64url-encoded JSON: the next
page starts strictly after it, so rows inserted meanwhile neither repeat nor shift the
pages. A cursor that does not decode, or holds what no page could have ended at (a NUL, a
lone surrogate, an integer or an instant no store holds), is a 400 naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator

from jobgate.api.errors import BadRequest

T = TypeVar("T")
MAX_LIMIT = 500
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+$"  # base64url, unpadded
_MAX_KEY_TEXT = 1024  # longer than any id or instant a page ends at
_INT64 = 1 << 63


def encode(key: Sequence[Any]) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str, length: int) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadRequest("not a cursor this server issued", field="cursor") from None
    if not isinstance(key, list) or len(key) != length or not all(_storable(k) for k in key):
        raise BadRequest("not a cursor this server issued", field="cursor")
    return key


def _storable(part: object) -> bool:
    """A key part a row could hold: text every store takes (no NUL, no lone surrogate), or a
    64-bit integer (not a bool)."""
    if isinstance(part, bool):
        return False
    if isinstance(part, int):
        return -_INT64 <= part < _INT64
    if not isinstance(part, str) or len(part) > _MAX_KEY_TEXT or "\x00" in part:
        return False
    try:
        part.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_time_key(at: datetime, key: str) -> str:
    return encode([at.isoformat(), key])


def decode_time_key(cursor: str | None) -> tuple[datetime, str] | None:
    """The (instant, id) a newest-first page ended at; None for the first page."""
    if cursor is None:
        return None
    at, key = decode(cursor, 2)
    try:
        instant = datetime.fromisoformat(str(at))
        if instant.tzinfo is not None:
            instant.astimezone(UTC)  # an instant in year 1 or 9999 that UTC cannot hold
    except (ValueError, OverflowError):
        instant = None
    if instant is None or instant.tzinfo is None or not isinstance(key, str):  # a page ends at an id: text
        raise BadRequest("not a cursor this server issued", field="cursor")
    return instant, key


def page_in_memory(
    items: Sequence[T], key: Callable[[T], str], *, cursor: str | None, limit: int
) -> tuple[list[T], str | None]:
    """Pages over a short list sorted by ``key`` (definitions, schedules, tokens)."""
    ordered = sorted(items, key=key)
    if cursor is not None:
        after = decode(cursor, 1)[0]
        if not isinstance(after, str):  # these pages end at an id, never at a number
            raise BadRequest("not a cursor this server issued", field="cursor")
        ordered = [i for i in ordered if key(i) > after]
    page = ordered[:limit]
    more = len(ordered) > limit
    return page, (encode([key(page[-1])]) if more and page else None)


def _written_instant(value: Any) -> Any:
    """A query instant is written as a date and time: pydantic alone reads a bare number as
    seconds since 1970, so ``created_from=2026`` meant 00:33:46 on 1 January 1970."""
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value.strip())):
        raise ValueError("give an ISO 8601 date and time with its timezone (e.g. 2026-01-01T00:00:00Z), not a number")
    return value


_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")

# A query parameter's instant: ISO 8601 text, never a bare number (``aware`` then asks its zone).
Instant = Annotated[datetime | None, BeforeValidator(_written_instant)]


def aware(value: datetime | None, field: str) -> datetime | None:
    """A query instant must say its timezone: a naive one would be read in the server's."""
    if value is not None and value.tzinfo is None:
        raise BadRequest("give a timezone (e.g. 2026-01-01T00:00:00Z)", field=field)
    if value is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise BadRequest("is outside the years 1 to 9999 in UTC", field=field) from None
    return value
