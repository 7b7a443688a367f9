"""The console's forms: ``application/x-www-form-urlencoded`` bodies, read with the standard
library (every console form is a handful of short fields; nothing is uploaded)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import Request

MAX_FORM_BYTES = 16_384


async def form_of(request: Request) -> dict[str, str]:
    """The form's fields (the last of a repeated name), or nothing for an over-long body.
    Starlette keeps the body, so a page reads it again after the CSRF check has."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    return dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))
