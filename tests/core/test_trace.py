"""Trace context rules: W3C traceparent parsing and the derivation of trace and span ids."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.core.trace import (
    attempt_trace,
    parse_traceparent,
    run_trace_id,
    traceparent_of_trigger,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (VALID, VALID),
        (f"00-{TRACE}-{PARENT}-00", f"00-{TRACE}-{PARENT}-00"),  # not sampled: kept as given
        (f"01-{TRACE}-{PARENT}-01-future-field", VALID),  # a later version: its extra fields dropped
        (f"01-{TRACE}-{PARENT}-01", VALID),
        (f"00-{TRACE}-{PARENT}-01-extra", None),  # version 00 is exactly 55 characters
        (f"ff-{TRACE}-{PARENT}-01", None),  # version ff is invalid
        (f"00-{'0' * 32}-{PARENT}-01", None),  # all-zero trace id
        (f"00-{TRACE}-{'0' * 16}-01", None),  # all-zero parent id
        (f"00-{TRACE.upper()}-{PARENT}-01", None),  # uppercase hex is not allowed
        (f"00-{TRACE[:-1]}g-{PARENT}-01", None),
        (f"00_{TRACE}-{PARENT}-01", None),
        (f"00-{TRACE}-{PARENT}-1", None),  # too short
        (f"0x-{TRACE}-{PARENT}-01", None),
        ("", None),
        (None, None),
        (42, None),
    ],
)
def test_parse_traceparent_follows_the_w3c_rules(value: object, expected: str | None) -> None:
    assert parse_traceparent(value) == expected


def test_a_run_without_trace_context_gets_one_derived_from_its_id() -> None:
    digest = hashlib.sha256(b"TGJOBRUN-1").hexdigest()
    first = attempt_trace("TGJOBRUN-1", 1)
    assert first.trace_id == digest[:32] and first.parent_span_id == digest[32:48]
    assert first.span_id == digest[48:60] + "0001"
    assert first.traceparent == f"00-{first.trace_id}-{first.span_id}-01"
    assert parse_traceparent(first.traceparent) == first.traceparent
    second = attempt_trace("TGJOBRUN-1", 2)
    assert (second.trace_id, second.parent_span_id) == (first.trace_id, first.parent_span_id)
    assert second.span_id == digest[48:60] + "0002"
    assert attempt_trace("TGJOBRUN-1", 1) == first  # the same attempt, the same context, always
    assert run_trace_id("TGJOBRUN-1") == first.trace_id


def test_every_step_of_a_workflow_shares_the_workflow_trace() -> None:
    a = attempt_trace("TGJOBRUN-a", 1, workflow_run_id="TGWFRUN-9")
    b = attempt_trace("TGJOBRUN-b", 1, workflow_run_id="TGWFRUN-9")
    digest = hashlib.sha256(b"TGWFRUN-9").hexdigest()
    assert a.trace_id == b.trace_id == digest[:32] == run_trace_id("TGJOBRUN-a", "TGWFRUN-9")
    assert a.parent_span_id == b.parent_span_id == digest[32:48]
    assert a.span_id == hashlib.sha256(b"TGJOBRUN-a").hexdigest()[48:60] + "0001" != b.span_id


def test_an_adopted_traceparent_wins_and_keeps_the_callers_span_and_flags() -> None:
    adopted = f"00-{TRACE}-{PARENT}-00"
    ctx = attempt_trace("TGJOBRUN-1", 3, workflow_run_id="TGWFRUN-9", traceparent=adopted)
    assert (ctx.trace_id, ctx.parent_span_id, ctx.flags) == (TRACE, PARENT, "00")
    assert ctx.span_id == attempt_trace("TGJOBRUN-1", 3).span_id
    assert ctx.traceparent == f"00-{TRACE}-{ctx.span_id}-00"
    assert ctx.as_dict() == {
        "traceparent": ctx.traceparent,
        "trace_id": TRACE,
        "span_id": ctx.span_id,
        "parent_span_id": PARENT,
    }


def test_the_traceparent_of_a_stored_trigger_comes_from_its_policy_context() -> None:
    def doc(**fields: object) -> str:
        return json.dumps({"trigger_type": "manual", **fields})

    assert traceparent_of_trigger(doc(policy_context={"traceparent": VALID}), json.loads) == VALID
    assert traceparent_of_trigger(doc(policy_context={"traceparent": "junk"}), json.loads) is None
    assert traceparent_of_trigger(doc(payload={"traceparent": VALID}), json.loads) is None  # data is not context
    assert traceparent_of_trigger(doc(policy_context={}), json.loads) is None
    assert traceparent_of_trigger(None, json.loads) is None
    assert traceparent_of_trigger('{"traceparent": ', json.loads) is None  # unreadable: no context


@given(run_id=st.text(min_size=1, max_size=60), attempt=st.integers(min_value=1, max_value=10_000))
def test_every_derived_traceparent_is_a_valid_one(run_id: str, attempt: int) -> None:
    ctx = attempt_trace(run_id, attempt)
    assert parse_traceparent(ctx.traceparent) == ctx.traceparent
    assert len(ctx.trace_id) == 32 and len(ctx.span_id) == 16 and len(ctx.parent_span_id) == 16
