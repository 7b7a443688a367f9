"""Errors named in the seed's words: a refusal from a shared handler or service names the field
as jobgate calls it (``job_definition_id``, ``jobs``, ``cron``); a client of the seed's API
sent ``name``, ``scenarios``, ``schedule`` and must read those back."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from jobgate.core.errors import JobgateError

_HEAD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(.*)$", re.DOTALL)


def renamed(field: str | None, names: Mapping[str, str]) -> str | None:
    """``field`` with its leading name replaced as ``names`` says (``jobs[2]`` -> ``scenarios[2]``)."""
    if field is None:
        return None
    match = _HEAD.match(field)
    if match is None or match.group(1) not in names:
        return field
    return names[match.group(1)] + match.group(2)


@contextmanager
def seed_names(**names: str) -> Iterator[None]:
    """Re-raise any refusal inside with its field renamed (its kind and message unchanged)."""
    try:
        yield
    except JobgateError as exc:
        exc.field = renamed(exc.field, names)
        raise
