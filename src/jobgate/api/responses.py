"""Response documentation shared by routes: what OpenAPI cannot infer from a handler.

A creating route answers 201 with what it made and 200 with the same shape when the request
repeats one it already answered (an idempotency key, a retry asked again, a schedule or a
pack stored as it was): both are documented, so a client (and the fuzzer) can rely on them.
"""

from __future__ import annotations

from typing import Any

REPEATED = "a repeat: what an earlier request made, returned again (nothing new stored)"


def repeated(model: type[Any]) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry of a route that answers 200 to a repeat of its 201."""
    return {200: {"model": model, "description": REPEATED}}
