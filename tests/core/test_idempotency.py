"""Idempotency keys and run ids: same request -> same key; any identity change -> new key."""

from __future__ import annotations

import re
from datetime import timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.canonical import digest
from jobgate.core.idempotency import RUN_ID_PREFIX, idempotency_key, run_id_for, trigger_identity
from jobgate.core.models import ExecutionWindow, Trigger, TriggerType

from .support import NOW, make_trigger, window

T = TriggerType
DIGEST = "sha256:" + "ef" * 32
SCOPE = {"tenant_id": "acme", "eco_number": "ECO-7"}
BATCH = make_trigger(T.BATCH_WINDOW, window=window())
GOLDEN = "sha256:b3da5807e47ecc8cacb6bcb781ea71a612c3287abd574924790a04497b04bb9c"


def key(
    *,
    definition: str = "payroll.close",
    trigger: Trigger = BATCH,
    scope: dict[str, Any] | None = None,
    config_digest: str = DIGEST,
) -> str:
    return idempotency_key(
        job_definition_id=definition,
        trigger=trigger,
        scope=SCOPE if scope is None else scope,
        config_digest=config_digest,
    )


# --- trigger identity ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trigger", "identity"),
    [
        (make_trigger(T.EVENT, "t1", source_event_id="evt-9"), "event:evt-9"),
        (make_trigger(T.QUEUE, "t1", source_event_id="msg-9"), "event:msg-9"),
        (make_trigger(T.EVENT, "t1"), "trigger:t1"),
        (make_trigger(T.EVENT, "t1", source_event_id=""), "trigger:t1"),
        (make_trigger(T.MANUAL, "t1", request_id="req-4"), "request:req-4"),
        (make_trigger(T.MANUAL, "t1"), "trigger:t1"),
        (make_trigger(T.MANUAL, "t1", source_event_id="evt-9"), "trigger:t1"),
        (make_trigger(T.CRON, "t1", source_event_id="evt-9", request_id="req-4"), "trigger:t1"),
        (make_trigger(T.EVENT, "t1", request_id="req-4"), "trigger:t1"),
        (make_trigger(T.BATCH_WINDOW, "t1", window=window()), "trigger:t1"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_trigger_identity(trigger: Trigger, identity: str) -> None:
    assert trigger_identity(trigger) == identity


@pytest.mark.parametrize("trigger_type", [t for t in TriggerType if t not in (T.EVENT, T.QUEUE, T.MANUAL)])
def test_other_triggers_are_identified_by_trigger_id(trigger_type: TriggerType) -> None:
    trigger = make_trigger(trigger_type, "t7", source_event_id="e", request_id="r")
    assert trigger_identity(trigger) == "trigger:t7"


# --- the key ------------------------------------------------------------------------------------


def test_key_shape_and_golden_value() -> None:
    k = key()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", k)
    # Pinned: a replay years later must derive the same key from the same request.
    assert k == GOLDEN


def test_key_is_the_digest_of_the_documented_fields() -> None:
    assert key() == digest(
        {
            "job_definition_id": "payroll.close",
            "trigger": "trigger:trg-1",
            "scope": SCOPE,
            "config_digest": DIGEST,
            "execution_window": ["2026-03-01T00:00:00Z", "2026-03-01T06:00:00Z"],
        }
    )


def test_same_inputs_same_key_and_run_id() -> None:
    twin = Trigger("trg-1", T.BATCH_WINDOW, window=window())
    assert key() == key(trigger=twin, scope=dict(SCOPE))
    assert run_id_for(key(), NOW) == run_id_for(key(trigger=twin), NOW)


@pytest.mark.parametrize(
    "changes",
    [
        {"definition": "payroll.open"},
        {"trigger": make_trigger(T.BATCH_WINDOW, "trg-2", window=window())},
        {"trigger": make_trigger(T.BATCH_WINDOW, window=window(1, 6))},
        {"trigger": make_trigger(T.BATCH_WINDOW, window=window(0, 7))},
        {"trigger": make_trigger(T.BATCH_WINDOW)},
        {"scope": {"tenant_id": "acme", "eco_number": "ECO-8"}},
        {"scope": {"tenant_id": "other", "eco_number": "ECO-7"}},
        {"scope": {"tenant_id": "acme"}},
        {"scope": {"tenant_id": "acme", "eco_number": "ECO-7", "region": "eu"}},
        {"scope": {}},
        {"config_digest": "sha256:" + "00" * 32},
    ],
    ids=[
        "definition",
        "trigger-id",
        "window-start",
        "window-end",
        "no-window",
        "scope-value",
        "scope-tenant",
        "scope-fewer-keys",
        "scope-more-keys",
        "scope-empty",
        "config-digest",
    ],
)
def test_any_identity_change_changes_the_key(changes: dict[str, Any]) -> None:
    assert key(**changes) != key()
    assert run_id_for(key(**changes), NOW) != run_id_for(key(), NOW)


@pytest.mark.parametrize(
    "trigger",
    [
        make_trigger(T.BATCH_WINDOW, window=window(), requested_by="bob"),
        make_trigger(T.BATCH_WINDOW, window=window(), reason="because"),
        make_trigger(T.BATCH_WINDOW, window=window(), payload={"x": 1}),
        make_trigger(T.BATCH_WINDOW, window=window(), policy_context={"risk": "high"}),
        make_trigger(T.BATCH_WINDOW, window=window(), event_type="x.y"),
    ],
    ids=["requested_by", "reason", "payload", "policy_context", "event_type"],
)
def test_non_identity_trigger_fields_do_not_change_the_key(trigger: Trigger) -> None:
    assert key(trigger=trigger) == key()


def test_event_triggers_key_on_the_source_event_id() -> None:
    first = make_trigger(T.EVENT, "delivery-1", source_event_id="evt-9")
    redelivered = make_trigger(T.EVENT, "delivery-2", source_event_id="evt-9", payload={"retry": True})
    other = make_trigger(T.EVENT, "delivery-1", source_event_id="evt-10")
    assert key(trigger=first) == key(trigger=redelivered)
    assert key(trigger=first) != key(trigger=other)


def test_queue_triggers_key_on_the_source_event_id() -> None:
    a = make_trigger(T.QUEUE, "m-1", source_event_id="msg-1")
    b = make_trigger(T.QUEUE, "m-2", source_event_id="msg-1")
    assert key(trigger=a) == key(trigger=b)


def test_manual_triggers_key_on_the_request_id() -> None:
    first = make_trigger(T.MANUAL, "click-1", request_id="req-4", requested_by="alice")
    repeated = make_trigger(T.MANUAL, "click-2", request_id="req-4", requested_by="alice")
    other = make_trigger(T.MANUAL, "click-1", request_id="req-5", requested_by="alice")
    assert key(trigger=first) == key(trigger=repeated)
    assert key(trigger=first) != key(trigger=other)


def test_cron_triggers_with_different_ids_are_different_runs() -> None:
    a = make_trigger(T.CRON, "fire-1", source_event_id="same", request_id="same")
    b = make_trigger(T.CRON, "fire-2", source_event_id="same", request_id="same")
    assert key(trigger=a) != key(trigger=b)


def test_window_is_compared_as_an_instant_not_a_spelling() -> None:
    w = window()
    plus2 = timezone(timedelta(hours=2))
    shifted = ExecutionWindow(w.start.astimezone(plus2), w.end.astimezone(plus2))
    assert key(trigger=make_trigger(T.BATCH_WINDOW, window=shifted)) == key()


def test_naive_window_is_refused() -> None:
    w = window()
    naive = ExecutionWindow(w.start.replace(tzinfo=None), w.end.replace(tzinfo=None))
    with pytest.raises(ValueError, match="naive"):
        key(trigger=make_trigger(T.BATCH_WINDOW, window=naive))


# --- run ids ------------------------------------------------------------------------------------


def test_run_id_is_the_prefix_the_creation_millisecond_and_80_bits_of_the_key() -> None:
    k = key()
    millis = 1_772_366_400_000  # 2026-03-01T12:00:00Z
    assert run_id_for(k, NOW) == f"TGJOBRUN-{millis:012x}" + k[len("sha256:") :][:20]
    assert run_id_for(k, NOW).startswith(RUN_ID_PREFIX)
    assert re.fullmatch(r"TGJOBRUN-[0-9a-f]{32}", run_id_for(k, NOW))


def test_run_id_for_a_key_without_prefix() -> None:
    assert run_id_for("abc", NOW) == f"TGJOBRUN-{1_772_366_400_000:012x}abc"


def test_run_id_refuses_a_naive_instant() -> None:
    with pytest.raises(ValueError, match="naive"):
        run_id_for(key(), NOW.replace(tzinfo=None))


@settings(max_examples=200, deadline=None)
@given(
    first=st.integers(min_value=0, max_value=10**9),
    gap_ms=st.integers(min_value=1, max_value=10**9),
    a=st.text(max_size=8),
    b=st.text(max_size=8),
)
def test_run_ids_sort_by_creation_time_whatever_the_keys(first: int, gap_ms: int, a: str, b: str) -> None:
    # Index locality rests on this: a run created later always sorts after an earlier one.
    earlier = NOW + timedelta(milliseconds=first)
    later = earlier + timedelta(milliseconds=gap_ms)
    assert run_id_for(digest(a), earlier) < run_id_for(digest(b), later)


# --- properties -----------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
scopes = st.dictionaries(st.text(max_size=10), json_scalars, max_size=8)


@settings(max_examples=100, deadline=None)
@given(scope=scopes, data=st.data())
def test_key_is_independent_of_scope_insertion_order(scope: dict[str, Any], data: st.DataObject) -> None:
    order = data.draw(st.permutations(list(scope)))
    reordered = {name: scope[name] for name in order}
    assert list(reordered) == order
    assert key(scope=reordered) == key(scope=scope)


@settings(max_examples=100, deadline=None)
@given(a=scopes, b=scopes)
def test_different_scopes_give_different_keys(a: dict[str, Any], b: dict[str, Any]) -> None:
    # JSON equality (1 == True, 1 == 1.0) aside, distinct scopes never share a key.
    if a != b:
        assert key(scope=a) != key(scope=b)


@settings(max_examples=100, deadline=None)
@given(event_id=st.text(min_size=1, max_size=20), first=st.text(max_size=10), second=st.text(max_size=10))
def test_redelivery_of_an_event_always_finds_the_same_run(event_id: str, first: str, second: str) -> None:
    a = make_trigger(T.EVENT, first, source_event_id=event_id)
    b = make_trigger(T.EVENT, second, source_event_id=event_id)
    assert run_id_for(key(trigger=a), NOW) == run_id_for(key(trigger=b), NOW)
