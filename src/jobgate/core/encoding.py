"""Instants as integers and compact JSON text: how values are written down, in the database and
in event lines alike (pure)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Built once: constructing the divisor on every call took 60 % of ``to_us``, which a worker
# calls several times for every run it settles (5 % of its loop's CPU, py-spy).
_MICROSECOND = timedelta(microseconds=1)


def to_us(instant: datetime) -> int:
    if instant.tzinfo is None:
        raise ValueError("naive datetime: instants are written as UTC microseconds")
    return (instant - _EPOCH) // _MICROSECOND


def opt_us(instant: datetime | None) -> int | None:
    return None if instant is None else to_us(instant)


def from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def opt_dt(value: int | None) -> datetime | None:
    return None if value is None else _EPOCH + timedelta(microseconds=value)


def dumps(value: Any) -> str:
    """Compact JSON with sorted keys for a column. orjson is an order of magnitude faster than
    the standard library on the worker's hot path (event payloads, transition details); the
    standard library takes what orjson refuses (integers beyond 64 bits, non-string keys).
    Stored documents are not digested (digests use ``canonical_json``), so the two encoders
    only need to decode to the same value, which they do."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_LONG_INTEGER = re.compile(r"\d{19}")


def loads(value: str | None) -> Any:
    """Decode a column's JSON exactly: orjson for speed, the standard library where orjson
    would change the value (it reads integers beyond 64 bits as floats) or refuses it (NaN,
    written by older versions)."""
    if value is None:
        return None
    if _LONG_INTEGER.search(value):
        return json.loads(value)
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)
