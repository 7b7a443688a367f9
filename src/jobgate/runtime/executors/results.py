"""What a run's result may be: a JSON object the store can hold, whichever executor made it.

A result is stored in the run's row, sealed into its record, and sent with its events: one
value that JSON cannot carry (NaN, an infinity, a lone surrogate, keys that collide as text), or
a result larger than a row should carry, must fail the attempt it came from, not the worker's
settlement of every run settled with it (found by a review: a command's outputs holding a lone
surrogate made every settlement of its worker fail, for ever). One check for the Python
executor's return value, a command's ``$JOBGATE_OUTPUTS`` and an HTTP target's answer.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_RESULT_BYTES = 1 << 20  # a result rides in its run's row and its events: 1 MiB of JSON at most
# Objects and arrays inside one another: the API's and the CLI's serialisers stop at 255 (a run
# with a deeper result broke its tenant's whole run list); no result needs more than this.
MAX_RESULT_DEPTH = 64


class NotStorable(ValueError):
    """Why a value cannot be a run's result; the message says it for a person."""


def storable(value: object, *, what: str) -> dict[str, Any]:
    """``value`` as the store will hold it (its JSON round trip, detached from any object the
    producer keeps mutating), or ``NotStorable`` naming ``what`` and the reason."""
    if not isinstance(value, dict):
        raise NotStorable(f"{what} is {type(value).__name__}; expected a JSON object")
    if _deeper_than(value, MAX_RESULT_DEPTH):
        raise NotStorable(f"{what} nests objects and arrays more than {MAX_RESULT_DEPTH} deep")
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        size = len(text.encode("utf-8"))  # every string must be Unicode text
    except UnicodeEncodeError:
        raise NotStorable(
            f"{what} holds a string that is not Unicode text (a lone surrogate: a file name decoded with "
            "surrogateescape?); decode it, or give its bytes as base64"
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise NotStorable(f"{what} is not JSON-serialisable: {exc}") from None
    if size > MAX_RESULT_BYTES:
        raise NotStorable(f"{what} is {size} bytes of JSON, over {MAX_RESULT_BYTES}: store it as an artifact instead")
    normalised: dict[str, Any] = json.loads(text)
    if len(normalised) != len(value):  # {1: "a", "1": "b"}: two keys became one
        raise NotStorable(f"{what} has keys that are the same as JSON text (an int and its digits as a string)")
    return normalised


def loads_strict(text: str) -> Any:
    """``json.loads`` of JSON itself: NaN, Infinity and numbers past a float's range (which
    Python's parser turns into infinities) are refused with ``ValueError``, and so is nesting
    past the parser's recursion limit (a few kilobytes of brackets)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deep to read") from None


def _deeper_than(value: object, limit: int) -> bool:
    """Whether objects and arrays nest in ``value`` more than ``limit`` deep (without recursion:
    a handler's value may nest past Python's own limit)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > limit:
            return True
        inner = current.values() if isinstance(current, dict) else current if isinstance(current, list | tuple) else ()
        stack.extend((v, depth + 1) for v in inner if isinstance(v, dict | list | tuple))
    return False


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past a number's range")
    return value
