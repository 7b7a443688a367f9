"""Response documentation shared by routes: what OpenAPI cannot infer from a handler.

A creating route answers 201 with what it made and 200 with the same shape when the request
repeats one it already answered (an idempotency key, a retry asked again, a schedule or a
pack stored as it was): both are documented, so a client (and the fuzzer) can rely on them.
"""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel

REPEATED = "a repeat: what an earlier request made, returned again (nothing new stored)"


def repeated(model: type[Any]) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry of a route that answers 200 to a repeat of its 201."""
    return {200: {"model": model, "description": REPEATED}}


def json_reply(model: BaseModel, *, status_code: int) -> Response:
    """``model`` as the JSON body of a ``status_code`` answer, serialized here on the request's
    thread. A route declared ``def`` that returns its model has FastAPI validate and serialize
    it again in a second hop to the thread pool; a hot route (``POST /api/v1/runs``) answers
    with this instead and keeps its ``response_model`` for the OpenAPI document."""
    return Response(model.model_dump_json(by_alias=True), status_code=status_code, media_type="application/json")
