"""W3C trace context for runs and attempts (seed 000 §56): derived, never stored.

Every attempt of every run has a trace context, and it costs no column and no write:

- **trace id**: the trace id of the ``traceparent`` its trigger carried, when it carried a
  valid one (the API's ``traceparent`` request header, or ``policy_context.traceparent`` of
  any trigger): the run joins its caller's trace. Otherwise the first 32 hex digits of
  SHA-256 of the run's ``workflow_run_id`` when it is a workflow step, so every step of a
  workflow shares one trace, else of its ``job_run_id``.
- **parent span id** (the span an attempt's span hangs under): the caller's span id when the
  trace was adopted; otherwise hex digits 32-48 of the same digest, a "root" span standing
  for the run (or the workflow) that no process emits.
- **span id** of an attempt: hex digits 48-60 of SHA-256 of its ``job_run_id``, then the
  attempt number in four hex digits (attempt 2 of a run ends in ``0002``).

Derived from the run's identity alone, the same attempt always gets the same context: a
replay, a log search months later and the executor all agree without a lookup, and the
worker pays one hash per attempt (two for a workflow step). The ``traceparent`` handed to an executor is
``00-<trace id>-<attempt span id>-<flags>``: the attempt is the parent of whatever the
executor does. Flags are the caller's when adopted (its sampling decision stands), else
``01`` (sampled).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, NamedTuple

TRACEPARENT_KEY = "traceparent"  # in a trigger's policy_context, and the HTTP header's name
_HEX = frozenset("0123456789abcdef")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_VERSION = re.compile(r"[0-9a-f]{2}")


class TraceContext(NamedTuple):
    """One attempt's place in a trace: lowercase hex ids, as W3C Trace Context writes them.
    (A named tuple: one is built for every attempt, at a fifth of a frozen dataclass's cost.)"""

    trace_id: str  # 32 hex
    span_id: str  # 16 hex: the attempt's span
    parent_span_id: str  # 16 hex: the caller's span, or the derived root span of the run/workflow
    flags: str = "01"

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` to pass on: the attempt's span is the parent of what it calls."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def as_dict(self) -> dict[str, str]:
        return {
            "traceparent": self.traceparent,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
        }


def parse_traceparent(value: object) -> str | None:
    """``value`` as a normalised version-00 ``traceparent``, or None when it is not a valid one.

    The W3C rules: ``version-traceid-parentid-flags`` in lowercase hex; version ``ff`` is
    invalid; version ``00`` is exactly 55 characters; a later version may append fields after
    a ``-``, which are dropped (we speak 00); an all-zero trace id or parent id is invalid.
    An invalid value is ignored, not refused: the specification says to start a new trace.
    """
    if not isinstance(value, str) or len(value) < 55:
        return None
    version = value[:2]
    if not _VERSION.fullmatch(version) or version == "ff":
        return None
    if len(value) > 55 and (version == "00" or value[55] != "-"):
        return None
    head = value[:55]
    if head[2] != "-" or head[35] != "-" or head[52] != "-":
        return None
    trace_id, parent_id, flags = head[3:35], head[36:52], head[53:55]
    if not (set(trace_id) <= _HEX and set(parent_id) <= _HEX and set(flags) <= _HEX):
        return None
    if trace_id == _ZERO_TRACE or parent_id == _ZERO_SPAN:
        return None
    return f"00-{trace_id}-{parent_id}-{flags}"


def traceparent_of_trigger(trigger_json: str | None, loads: Any) -> str | None:
    """The valid ``policy_context.traceparent`` of a stored trigger document, if it has one.

    Called for every run a worker claims, so the common case (no trace context given) is a
    substring test on the stored text and no decoding. ``loads`` is the store's JSON decoder.
    """
    if not trigger_json or TRACEPARENT_KEY not in trigger_json:
        return None
    try:
        doc = loads(trigger_json)
    except ValueError:
        return None
    context = doc.get("policy_context") if isinstance(doc, dict) else None
    return parse_traceparent(context.get(TRACEPARENT_KEY)) if isinstance(context, dict) else None


def _hex_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def attempt_trace(
    job_run_id: str, attempt: int, *, workflow_run_id: str | None = None, traceparent: str | None = None
) -> TraceContext:
    """The trace context of ``attempt`` of a run (see the module doc). ``traceparent`` must
    come from ``parse_traceparent`` (the run's adopted one, normalised)."""
    own = _hex_digest(job_run_id)
    span_id = f"{own[48:60]}{attempt & 0xFFFF:04x}"
    if traceparent is not None:
        return TraceContext(traceparent[3:35], span_id, traceparent[36:52], traceparent[53:55])
    root = own if workflow_run_id is None else _hex_digest(workflow_run_id)
    return TraceContext(root[:32], span_id, root[32:48], "01")


def run_trace_id(job_run_id: str, workflow_run_id: str | None = None, traceparent: str | None = None) -> str:
    """The trace id of a run (every attempt shares it): to find its logs and spans."""
    if traceparent is not None:
        return traceparent[3:35]
    return _hex_digest(workflow_run_id or job_run_id)[:32]
