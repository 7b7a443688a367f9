"""Typed parameters: one canonical text per value, refusals that name the rule, declarations
checked in full when the definition is read (a default or a choice a run could never take is
refused there, not at the first submission)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.helpers import make_config

from jobgate.core.errors import ValidationError
from jobgate.core.models import ParamSpec
from jobgate.core.params import ParamValueError, canonical, param_value, typed, validate_params
from jobgate.definitions import parse_definition


def spec(kind: str, **more: object) -> ParamSpec:
    return ParamSpec("p", type=kind, **more)  # type: ignore[arg-type]


@given(st.decimals(allow_nan=False, allow_infinity=False, places=6, min_value=-(10**12), max_value=10**12))
def test_equal_decimals_have_one_text_and_read_back_equal(value: Decimal) -> None:
    text = canonical("decimal", str(value))
    assert Decimal(text) == value
    assert canonical("decimal", text) == text  # canonical is a fixed point
    assert canonical("decimal", format(value, "f") + "000" if "." in format(value, "f") else str(value)) == text
    assert "E" not in text and "e" not in text


@given(st.integers(min_value=-(10**29), max_value=10**29))
def test_integers_round_trip(value: int) -> None:
    assert typed("integer", canonical("integer", str(value))) == value
    assert canonical("integer", value) == str(value)


@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)), st.integers(-14 * 60, 14 * 60))
def test_a_moment_written_in_any_offset_is_one_utc_text(moment: datetime, minutes: int) -> None:
    local = moment.replace(tzinfo=timezone(timedelta(minutes=minutes)), microsecond=0)
    text = canonical("datetime", local.isoformat())
    assert text.endswith("Z")
    assert typed("datetime", text) == local
    assert canonical("datetime", local.astimezone(UTC).isoformat()) == text


@pytest.mark.parametrize(
    ("kind", "raw", "expected"),
    [
        ("decimal", "10.50", "10.5"),
        ("decimal", "-0.00", "0"),
        ("decimal", "1200", "1200"),
        ("decimal", 12, "12"),
        ("decimal", 0.1, "0.1"),
        ("decimal", 0.0000001, "0.0000001"),
        ("decimal", 1e16, "10000000000000000"),
        ("integer", "+007", "7"),
        ("boolean", True, "true"),
        ("boolean", "FALSE", "false"),
        ("date", "2026-02-28", "2026-02-28"),
        ("datetime", "2026-12-04T10:00:00+01:00", "2026-12-04T09:00:00Z"),
        ("datetime", "2026-12-04 09:00Z", "2026-12-04T09:00:00Z"),
    ],
)
def test_canonical_texts(kind: str, raw: object, expected: str) -> None:
    assert canonical(kind, raw) == expected


@pytest.mark.parametrize(
    ("kind", "raw", "reason"),
    [
        ("decimal", "1e3", "decimal number"),
        ("decimal", "NaN", "decimal number"),
        ("decimal", "1" * 50, "decimal number"),
        ("decimal", "12,5", "decimal number"),
        ("integer", "1.0", "whole number"),
        ("integer", "1_000", "whole number"),
        ("integer", " 1", "whole number"),
        ("integer", "9" * 31, "whole number"),
        ("boolean", "yes", "true or false"),
        ("date", "2026-02-30", "not a calendar date"),
        ("date", "20261204", "YYYY-MM-DD"),
        ("date", "2026-12-04T00:00:00Z", "YYYY-MM-DD"),
        ("datetime", "2026-12-04T09:00:00", "UTC offset"),
        ("datetime", "2026-12-04", "ISO 8601"),
        ("datetime", "2026-13-04T09:00:00Z", "not a valid"),
        ("datetime", "0001-01-01T00:00:00+01:00", "outside the years"),
        ("datetime", "9999-12-31T23:59:59-01:00", "outside the years"),
        ("integer", 10**40, "whole number"),
        ("decimal", float("inf"), "decimal number"),
    ],
)
def test_values_a_type_refuses_name_the_rule(kind: str, raw: object, reason: str) -> None:
    with pytest.raises(ParamValueError, match=reason):
        canonical(kind, raw)


def test_bounds_choices_and_booleans_elsewhere() -> None:
    amount = spec("decimal", minimum="0", maximum="1000")
    assert param_value(amount, "999.990") == "999.99"
    for bad, rule in (("-0.01", "at least 0"), ("1000.01", "at most 1000")):
        with pytest.raises(ParamValueError, match=rule):
            param_value(amount, bad)
    mode = spec("string", choices=("full", "delta"))
    with pytest.raises(ParamValueError, match="one of: full, delta"):
        param_value(mode, "half")
    with pytest.raises(ParamValueError, match="string or a number"):
        param_value(spec("string"), True)  # a bool is only a boolean's value


def test_validate_params_names_the_field_and_fills_canonical_defaults() -> None:
    specs = [ParamSpec("day", required=True, type="date"), ParamSpec("n", type="integer", default="5")]
    assert validate_params(specs, {"day": date(2026, 1, 2).isoformat()}) == {"day": "2026-01-02", "n": "5"}
    with pytest.raises(ValidationError) as refused:
        validate_params(specs, {"day": "tomorrow"}, source="job-a")
    assert refused.value.field == "params.day" and refused.value.source == "job-a"


def _definition(*params: dict[str, object]) -> dict[str, object]:
    return {"job_definition_id": "typed", "job_class": "MAINTENANCE_JOB", "handler": "m:f", "params": list(params)}


@pytest.mark.parametrize(
    ("param", "field", "reason"),
    [
        ({"name": "a", "type": "float"}, "params[0].type", "one of string, integer"),
        ({"name": "a", "type": "integer", "pattern": "[0-9]+"}, "params[0].pattern", "for string params"),
        ({"name": "a", "minimum": 1}, "params[0].minimum", "only integer and decimal"),
        ({"name": "a", "type": "integer", "minimum": 5, "maximum": 1}, "params[0].maximum", "below the minimum"),
        ({"name": "a", "type": "decimal", "minimum": "x"}, "params[0].minimum", "decimal number"),
        ({"name": "a", "choices": []}, "params[0].choices", "at least one"),
        ({"name": "a", "choices": ["x", "x"]}, "params[0].choices", "listed twice"),
        ({"name": "a", "type": "integer", "choices": [1, "two"]}, "params[0].choices[1]", "whole number"),
        ({"name": "a", "type": "date", "default": "2026-02-30"}, "params[0].default", "calendar date"),
        ({"name": "a", "choices": ["x", "y"], "default": "z"}, "params[0].default", "one of: x, y"),
        ({"name": "a", "type": "integer", "maximum": 9, "default": 10}, "params[0].default", "at most 9"),
    ],
)
def test_a_declaration_no_run_could_satisfy_is_refused_naming_the_field(
    tmp_path: Path, param: dict[str, object], field: str, reason: str
) -> None:
    config = make_config(tmp_path)
    with pytest.raises(ValidationError) as refused:
        parse_definition(_definition(param), "typed.yaml", config)
    assert refused.value.field == field and reason in refused.value.message


def test_declared_choices_and_bounds_are_kept_canonical(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    loaded = parse_definition(
        _definition(
            {"name": "n", "type": "integer", "choices": [1, "02"], "default": 2},
            {"name": "amount", "type": "decimal", "minimum": "0.00", "maximum": 10.50},
        ),
        "typed.yaml",
        config,
    )
    n, amount = loaded.definition.params
    assert (n.choices, n.default) == (("1", "2"), "2")
    assert (amount.minimum, amount.maximum) == ("0", "10.5")
