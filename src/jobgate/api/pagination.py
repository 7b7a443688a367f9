"""Opaque cursors for list endpoints.

A cursor is the sort key of the last row a page returned, base64url-encoded JSON: the next
page starts strictly after it, so rows inserted meanwhile neither repeat nor shift the
pages. A cursor that does not decode is a 400 naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobgate.api.errors import BadRequest

T = TypeVar("T")
MAX_LIMIT = 500
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+$"  # base64url, unpadded


def encode(key: Sequence[Any]) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str, length: int) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadRequest("not a cursor this server issued", field="cursor") from None
    if not isinstance(key, list) or len(key) != length or not all(isinstance(k, str | int) for k in key):
        raise BadRequest("not a cursor this server issued", field="cursor")
    return key


def encode_time_key(at: datetime, key: str) -> str:
    return encode([at.isoformat(), key])


def decode_time_key(cursor: str | None) -> tuple[datetime, str] | None:
    """The (instant, id) a newest-first page ended at; None for the first page."""
    if cursor is None:
        return None
    at, key = decode(cursor, 2)
    try:
        instant = datetime.fromisoformat(str(at))
    except ValueError:
        instant = None
    if instant is None or instant.tzinfo is None:
        raise BadRequest("not a cursor this server issued", field="cursor")
    return instant, str(key)


def page_in_memory(
    items: Sequence[T], key: Callable[[T], str], *, cursor: str | None, limit: int
) -> tuple[list[T], str | None]:
    """Pages over a short list sorted by ``key`` (definitions, schedules, tokens)."""
    ordered = sorted(items, key=key)
    if cursor is not None:
        after = str(decode(cursor, 1)[0])
        ordered = [i for i in ordered if key(i) > after]
    page = ordered[:limit]
    more = len(ordered) > limit
    return page, (encode([key(page[-1])]) if more and page else None)


def aware(value: datetime | None, field: str) -> datetime | None:
    """A query instant must say its timezone: a naive one would be read in the server's."""
    if value is not None and value.tzinfo is None:
        raise BadRequest("give a timezone (e.g. 2026-01-01T00:00:00Z)", field=field)
    return value
