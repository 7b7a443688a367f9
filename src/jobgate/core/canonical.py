"""Canonical JSON and SHA-256 digests.

Digests identify definition versions, configuration snapshots and idempotency keys, so the
encoding must never depend on dict order, float formatting quirks or the platform. The rule
is RFC 8785-like: keys sorted, no insignificant white space, UTF-8, and no floats that are
not finite. Datetimes are refused rather than silently stringified, so every caller decides
how an instant is written (always ISO 8601 UTC with a ``Z``; see ``isoformat_utc``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from datetime import UTC, datetime
from typing import Any

DIGEST_PREFIX = "sha256:"


def _check(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path}: non-finite float {value!r} has no canonical form")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path}: object key {key!r} is not a string")
            _check(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
    elif not isinstance(value, str | int | float | bool) and value is not None:
        raise ValueError(f"{path}: {type(value).__name__} has no canonical JSON form")


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` as canonical JSON bytes (sorted keys, compact, UTF-8)."""
    _check(value, "$")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return DIGEST_PREFIX + sha256_hex(canonical_json(value))


@functools.lru_cache(maxsize=256)
def isoformat_utc(instant: datetime) -> str:
    """Write an aware instant as ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``; naive instants are refused.

    Cached: a worker stamps every event of a batch with the same instant."""
    if instant.tzinfo is None:
        raise ValueError("naive datetime: jobgate only handles timezone-aware instants")
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")
