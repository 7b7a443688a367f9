"""The console's forms: ``application/x-www-form-urlencoded`` bodies, read with the standard
library (every console form is a handful of short fields; nothing is uploaded)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import Request

from jobgate.core.errors import ValidationError

# Room for every field a console form offers at its longest: a 2,000-character reason of
# four-byte characters is 24 KB once percent-encoded (three bytes of text for each byte).
MAX_FORM_BYTES = 131_072


async def form_of(request: Request) -> dict[str, str]:
    """The form's fields (the last of a repeated name). A body longer than any console form
    sends is refused as such, naming the limit (not read as an empty form, which would then
    be refused for a missing CSRF token). Starlette keeps the body, so a page reads it again
    after the CSRF check has."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise ValidationError(
            f"the form is {len(body):,} bytes, longer than a console form may be ({MAX_FORM_BYTES:,});"
            " shorten its fields",
            field="form",
        )
    return dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))
