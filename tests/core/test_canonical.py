"""Canonical JSON and digests: order independence, refusals, UTC instants."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core import canonical
from jobgate.core.canonical import DIGEST_PREFIX, canonical_json, digest, isoformat_utc, sha256_hex


def test_keys_sorted_compact_utf8() -> None:
    assert canonical_json({"b": 1, "a": "é", "c": [True, False, None]}) == (
        '{"a":"é","b":1,"c":[true,false,null]}'.encode()
    )


def test_nested_key_order_does_not_matter() -> None:
    one = {"outer": {"z": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": 0}}, "first": "v"}
    two = {"first": "v", "outer": {"a": {"x": 0, "y": [1, {"p": 3, "q": 2}]}, "z": 1}}
    assert canonical_json(one) == canonical_json(two)
    assert digest(one) == digest(two)


def test_list_order_does_matter() -> None:
    assert digest([1, 2]) != digest([2, 1])


def test_tuples_encode_as_lists() -> None:
    assert canonical_json((1, "a")) == canonical_json([1, "a"]) == b'[1,"a"]'


def test_digest_format_and_value() -> None:
    assert digest({}) == DIGEST_PREFIX + hashlib.sha256(b"{}").hexdigest()
    assert digest({"a": 1}) == "sha256:" + sha256_hex(b'{"a":1}')
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (float("nan"), "$"),
        (float("inf"), "$"),
        (float("-inf"), "$"),
        ({"a": float("nan")}, "$.a"),
        ({"a": [1, float("inf")]}, "$.a[1]"),
        ([{"x": {"y": float("-inf")}}], "$[0].x.y"),
        ((1, (2, float("nan"))), "$[1][1]"),
    ],
)
def test_non_finite_floats_are_refused_with_their_path(value: Any, path: str) -> None:
    with pytest.raises(ValueError, match="non-finite float") as caught:
        canonical_json(value)
    assert str(caught.value).startswith(f"{path}: ")
    with pytest.raises(ValueError):
        digest(value)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({1: "x"}, "object key 1 is not a string"),
        ({"a": {None: 1}}, "object key None is not a string"),
        (datetime(2026, 1, 1, tzinfo=UTC), "datetime has no canonical JSON form"),
        ({"at": date(2026, 1, 1)}, "date has no canonical JSON form"),
        ({"d": timedelta(seconds=1)}, "timedelta has no canonical JSON form"),
        ({1, 2}, "set has no canonical JSON form"),
        (b"raw", "bytes has no canonical JSON form"),
        (Decimal("1.5"), "Decimal has no canonical JSON form"),
        (object(), "object has no canonical JSON form"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_values_without_a_canonical_form_are_refused(value: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        canonical_json(value)


def test_finite_floats_and_big_ints_are_fine() -> None:
    assert (
        canonical_json({"f": 0.5, "i": 10**30, "neg": -1.25})
        == b'{"f":0.5,"i":1000000000000000000000000000000,"neg":-1.25}'
    )


# --- isoformat_utc --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instant", "text"),
    [
        (datetime(2026, 3, 1, 12, 0, tzinfo=UTC), "2026-03-01T12:00:00Z"),
        (datetime(2026, 3, 1, 12, 0, 0, 123, tzinfo=UTC), "2026-03-01T12:00:00.000123Z"),
        (
            datetime(2026, 3, 1, 14, 30, tzinfo=timezone(timedelta(hours=2, minutes=30))),
            "2026-03-01T12:00:00Z",
        ),
        (datetime(2026, 3, 1, 0, 0, tzinfo=timezone(timedelta(hours=-5))), "2026-03-01T05:00:00Z"),
        (datetime(2025, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-2))), "2026-01-01T01:00:00Z"),
    ],
)
def test_isoformat_utc(instant: datetime, text: str) -> None:
    assert isoformat_utc(instant) == text


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        isoformat_utc(datetime(2026, 3, 1, 12, 0))


# --- properties -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


def reorder(value: Any, rnd: Any) -> Any:
    """The same JSON value with every object's keys in a shuffled insertion order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: reorder(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [reorder(v, rnd) for v in value]
    return value


@settings(max_examples=100, deadline=None)
@given(value=json_values, rnd=st.randoms(use_true_random=False))
def test_digest_is_independent_of_key_insertion_order(value: Any, rnd: Any) -> None:
    assert canonical_json(reorder(value, rnd)) == canonical_json(value)
    assert digest(reorder(value, rnd)) == digest(value)


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_canonical_json_round_trips(value: Any) -> None:
    encoded = canonical_json(value)
    assert json.loads(encoded) == value
    assert canonical_json(json.loads(encoded)) == encoded


@settings(max_examples=100, deadline=None)
@given(
    instant=st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=45)), timezone(timedelta(hours=-11))]),
    )
)
def test_isoformat_utc_round_trips(instant: datetime) -> None:
    text = isoformat_utc(instant)
    assert text.endswith("Z")
    assert "+" not in text
    assert datetime.fromisoformat(text) == instant


plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
    | st.text(max_size=12)
    | st.sampled_from(["\n", "\t", "\x00", "\x7f", "\u2028", "é", "💥", '"', "\\", "\ud7ff"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.sampled_from(["é", "\n", "B", "a", "💥"]), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(value=plain_values | json_values)
def test_the_fast_encoder_writes_the_very_bytes_of_the_standard_library(value: Any) -> None:
    """canonical_json takes orjson for plain values; the standard library's bytes are the rule."""
    stdlib = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert canonical_json(value) == stdlib


def test_values_the_fast_encoder_would_write_differently_take_the_standard_library() -> None:
    for value in ({"f": 1.0}, {"big": 1 << 70}, {"ctl": "a\u0001b"}, {"k\x1f": 1}, [1e16, 0.1]):
        stdlib = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        assert canonical_json(value) == stdlib


class _Key(str):
    """A subclass: the quick check leaves it to the careful one."""


@settings(max_examples=500, deadline=None)
@given(value=plain_values | json_values)
def test_the_quick_plainness_check_agrees_with_the_careful_one(value: Any) -> None:
    """``_plain`` decides the submit path's documents; where it decides, ``_check`` agrees."""
    quick = canonical._plain(value)
    assert quick is None or quick == canonical._check(value, "$")


def test_the_quick_check_leaves_what_it_cannot_tell_to_the_careful_one() -> None:
    for value in ({"f": 1.5}, [_Key("a")], {_Key("k"): 1}, {1: "x"}, {"nan": float("nan")}, object()):
        assert canonical._plain(value) is None
    assert canonical_json({_Key("k"): [_Key("v")]}) == b'{"k":["v"]}'
