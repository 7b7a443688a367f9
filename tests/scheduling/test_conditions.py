"""Conditions over facts and the episode rule: fire on false -> true, once per episode."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.core.errors import ValidationError
from jobgate.scheduling.conditions import parse, step


@pytest.mark.parametrize(
    ("text", "value", "holds"),
    [
        ("replay.drift_ratio > 0.05", 0.06, True),
        ("replay.drift_ratio > 0.05", 0.05, False),
        ("q >= 3", 3, True),
        ("q < -1.5", -2, True),
        ("q <= 0", 0.1, False),
        ("alert.x == 1", 1.0, True),
        ("alert.x != 1", 1.0, False),
    ],
)
def test_conditions_compare_the_fact_with_the_threshold(text: str, value: float, holds: bool) -> None:
    assert parse(text).holds(value) is holds


@pytest.mark.parametrize("text", ["", "x", "x > ", "x >> 1", "1x > 2", "x > abc", "x > nan", "x > inf", "x ~ 1"])
def test_bad_conditions_are_refused_naming_the_field(text: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse(text)
    assert err.value.field == "condition"


def test_a_condition_round_trips_through_its_text() -> None:
    c = parse("  ratio   >=   1e-07 ")
    assert str(c) == "ratio >= 1e-07" and parse(str(c)) == c


@given(st.lists(st.booleans(), max_size=60))
def test_one_fire_per_episode(observations: list[bool]) -> None:
    is_open, fires = False, 0
    for holds in observations:
        s = step(is_open, holds)
        fires += s.fire
        is_open = s.open
    starts = sum(1 for i, h in enumerate(observations) if h and (i == 0 or not observations[i - 1]))
    assert fires == starts
