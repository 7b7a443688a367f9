"""Parameter validation (injection attempts, undeclared, required, defaults) and rendering."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.errors import ValidationError
from jobgate.core.models import ParamSpec
from jobgate.core.params import (
    DEFAULT_PARAM_PATTERN,
    ParamValueError,
    check_pattern,
    placeholders,
    render,
    validate_params,
)

PERIOD = ParamSpec("period")
COUNT = ParamSpec("count", pattern=r"^\d+$")
ANYTHING = ParamSpec("note", pattern=r".*")

INJECTIONS = [
    "; rm -rf /",
    "$(touch x)",
    "`id`",
    "../etc/passwd",
    "a\nb",
    "a\x00b",
    "a\rb",
    "a b",
    "a|b",
    "a&b",
    "a>b",
    "a<b",
    "a'b",
    'a"b',
    "a\\b",
    "*",
    "~root",
    "${HOME}",
    "a\tb",
    "a\x1b[31m",
    "a\x7f",
    "caf\u00e9",
    "a" * 257,
]


def refused(specs: list[ParamSpec], values: dict[str, object], name: str) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        validate_params(specs, values)
    assert caught.value.field == f"params.{name}"
    assert caught.value.source == "params"
    assert f"params.{name}" in str(caught.value)
    return caught.value


@pytest.mark.parametrize("value", INJECTIONS, ids=repr)
def test_injection_attempts_are_refused_by_the_default_pattern(value: str) -> None:
    refused([PERIOD], {"period": value}, "period")


@pytest.mark.parametrize("value", ["; rm -rf /", "$(touch x)", "`id`", "../etc/passwd", "12 ", "1e3", "-1", ""])
def test_declared_pattern_must_match_fully(value: str) -> None:
    error = refused([COUNT], {"count": value}, "count")
    assert "does not match" in error.message
    assert r"'^\\d+$'" in error.message


@pytest.mark.parametrize("value", ["12\n", "12\r", "12\r\n", "\n12", "1\x002"], ids=repr)
def test_newline_cannot_sneak_past_dollar(value: str) -> None:
    assert re.match(r"^\d+$", "12\n")  # what a naive re.match would have let through
    error = refused([COUNT], {"count": value}, "count")
    assert "control characters" in error.message


@pytest.mark.parametrize("value", ["a\nb", "a\x00b", "a\rb", "\x1b]0;title\x07", "tab\there", "del\x7f"], ids=repr)
def test_control_characters_are_refused_even_by_a_permissive_pattern(value: str) -> None:
    refused([ANYTHING], {"note": value}, "note")


@pytest.mark.parametrize(
    "value",
    [
        "abc\u202edef",
        "zero\u200bwidth",
        "\ufeffbom",
        "mark\u200e",
        "joiner\u2060",
        "lone\udc80",
        "x\u2066y",
        # found by a second regression review: format characters outside the first list
        "prod\u2063",
        "a\u2061",
        "x\u206a",
        "\ufff9a",
        "\U000e0041 lone tag",
        "\U0001d173",
        "cgj\u034f",
        "\u3164",
        "private\ue000",
    ],
    ids=repr,
)
def test_invisible_characters_are_refused_even_by_a_permissive_pattern(value: str) -> None:
    """Found by a review: with a pattern like ``.+``, a direction override or a zero-width space
    passed into run records, the audit log and the console, where a value can then print as
    another; a lone surrogate (a non-UTF-8 command-line argument) crashed the store's encoding."""
    error = refused([ANYTHING], {"note": value}, "note")
    assert "invisible ones" in error.message


@pytest.mark.parametrize(
    "value",
    [
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian with a zero-width non-joiner
        "\U0001f468\u200d\U0001f469\u200d\U0001f467 family",  # a ZWJ emoji sequence
        "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f flag",  # a tag sequence
        "\U0001face moose",  # newer than this Python's Unicode: unassigned here, text anyway
        "x\u00ady",  # a soft hyphen
        "caf\u00e9 \u0928\u092e\u0938\u094d\u0924\u0947",
    ],
    ids=repr,
)
def test_text_that_prints_as_itself_is_accepted_by_a_permissive_pattern(value: str) -> None:
    """Found by a regression review: refusing every Unicode C category refused Persian spelling,
    emoji sequences and flags, and new emoji only on hosts with an older Python."""
    assert validate_params([ANYTHING], {"note": value}) == {"note": value}


@pytest.mark.parametrize("pattern", ["(a|aa)+b", "(a|a)*c", "(?:x+x+)+y"])
def test_a_backtracking_pattern_is_refused_in_bounded_time_not_run_for_minutes(pattern: str) -> None:
    """Found by a review: ``(a+)+b`` against 37 characters held the server's CPU (health check
    included) for minutes; the match is bounded by ``PATTERN_SECONDS``."""
    spec = ParamSpec("tag", pattern=pattern)
    started = time.thread_time()
    error = refused([spec], {"tag": "a" * 60 + "!"}, "tag")
    assert time.thread_time() - started < 2.0  # real time: the bound itself is what is tested
    assert "backtracks" in error.message or "does not match" in error.message
    assert validate_params([spec], {"tag": "aab" if "b" in pattern else "aac" if "c" in pattern else "xxy"})


def test_permissive_pattern_accepts_what_it_declares() -> None:
    assert validate_params([ANYTHING], {"note": "; rm -rf / $(x) `id`"}) == {"note": "; rm -rf / $(x) `id`"}


def test_fullmatch_applies_to_alternations() -> None:
    spec = ParamSpec("mode", pattern="full|delta")
    assert validate_params([spec], {"mode": "delta"}) == {"mode": "delta"}
    refused([spec], {"mode": "fulldelta"}, "mode")
    refused([spec], {"mode": "full; rm"}, "mode")


@pytest.mark.parametrize(
    "value", ["2026-02", "ECO-7", "a.b:c@d+e=f,g_h", "x" * 256, "", "0"], ids=lambda v: repr(v)[:20]
)
def test_default_pattern_accepts_plain_tokens(value: str) -> None:
    assert validate_params([PERIOD], {"period": value}) == {"period": value}


def test_undeclared_parameter_is_refused() -> None:
    error = refused([PERIOD], {"period": "2026-02", "extra": "x"}, "extra")
    assert error.message == "not a declared parameter"
    refused([], {"x": None}, "x")


@pytest.mark.parametrize("values", [{}, {"period": None}], ids=["absent", "none"])
def test_required_missing_is_refused(values: dict[str, object]) -> None:
    error = refused([ParamSpec("period", required=True)], values, "period")
    assert error.message == "required parameter is missing"


def test_defaults_are_applied_and_overridable() -> None:
    specs = [
        ParamSpec("period", required=True, default="2026-01"),
        ParamSpec("mode", default="full"),
        ParamSpec("optional"),
    ]
    assert validate_params(specs, {}) == {"period": "2026-01", "mode": "full"}
    assert validate_params(specs, {"mode": "delta", "optional": "x"}) == {
        "period": "2026-01",
        "mode": "delta",
        "optional": "x",
    }
    assert validate_params(specs, {"optional": None}) == {"period": "2026-01", "mode": "full"}


def test_defaults_are_validated_too() -> None:
    refused([ParamSpec("count", pattern=r"\d+", default="many")], {}, "count")
    refused([ParamSpec("period", default="a b")], {}, "period")


@pytest.mark.parametrize(("raw", "text"), [(5, "5"), (0, "0"), (2.5, "2.5"), ("7", "7")])
def test_numbers_are_accepted_as_text(raw: object, text: str) -> None:
    assert validate_params([ParamSpec("n")], {"n": raw}) == {"n": text}


def _stable_id(raw: object) -> str:
    """The same id in every pytest-xdist worker (an object's repr names its address)."""
    return "object()" if type(raw) is object else repr(raw)


@pytest.mark.parametrize("raw", [True, False, [1], {"a": 1}, b"bytes", object()], ids=_stable_id)
def test_other_types_are_refused(raw: object) -> None:
    error = refused([ParamSpec("n")], {"n": raw}, "n")
    assert error.message == "must be a string or a number"


def test_source_is_named() -> None:
    with pytest.raises(ValidationError) as caught:
        validate_params([PERIOD], {"period": "a;b"}, source="definition payroll.close")
    assert caught.value.source == "definition payroll.close"
    assert str(caught.value).startswith("definition payroll.close: params.period: ")


def test_output_is_plain_strings_in_declaration_order() -> None:
    specs = [ParamSpec("b"), ParamSpec("a"), ParamSpec("c", default="3")]
    out = validate_params(specs, {"a": 1, "b": "2"})
    assert list(out) == ["b", "a", "c"]
    assert all(isinstance(v, str) for v in out.values())


# --- render and placeholders ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{period}}", "2026-02"),
        ("{{.period}}", "2026-02"),
        ("{{ period }}", "2026-02"),
        ("{{ .period }}", "2026-02"),
        ("--period={{period}}", "--period=2026-02"),
        ("{{period}}/{{.period}}", "2026-02/2026-02"),
        ("{{period}}-{{mode}}", "2026-02-full"),
        ("no placeholders", "no placeholders"),
        ("{period} {{{period}}}", "{period} {2026-02}"),
        ("{{1x}} {{x-y}} {{}}", "{{1x}} {{x-y}} {{}}"),  # not placeholders: left alone
        ("", ""),
    ],
)
def test_render_substitutes_both_spellings(template: str, expected: str) -> None:
    assert render(template, {"period": "2026-02", "mode": "full"}) == expected


@pytest.mark.parametrize("template", ["{{missing}}", "{{.missing}}", "a {{ missing }} b", "{{period}}{{missing}}"])
def test_render_refuses_a_missing_value_and_never_renders_blank(template: str) -> None:
    with pytest.raises(ValidationError) as caught:
        render(template, {"period": "2026-02"}, source="runner r args[1]")
    assert caught.value.field == "missing"
    assert caught.value.source == "runner r args[1]"
    assert "{{missing}}" in caught.value.message


def test_render_default_source() -> None:
    with pytest.raises(ValidationError) as caught:
        render("{{x}}", {})
    assert caught.value.source == "template"


def test_empty_value_is_a_value() -> None:
    assert render("[{{x}}]", {"x": ""}) == "[]"


def test_render_is_not_recursive() -> None:
    assert render("{{a}}", {"a": "{{b}}", "b": "secret"}) == "{{b}}"


def test_placeholders() -> None:
    assert placeholders("{{a}} {{.b}} {{ c }} {{ .a }} {{1x}} {x}") == {"a", "b", "c"}
    assert placeholders("plain") == set()


def test_check_pattern() -> None:
    check_pattern(r"^\d+$", field="params[0].pattern", source="def.yaml")
    with pytest.raises(ValidationError) as caught:
        check_pattern("(unclosed", field="params[0].pattern", source="def.yaml")
    assert (caught.value.field, caught.value.source) == ("params[0].pattern", "def.yaml")
    assert "invalid regular expression" in caught.value.message


# --- properties -----------------------------------------------------------------------------------

FORBIDDEN = set(" \t\n\r\x00;|&$`'\"\\/<>(){}[]*?!#~%^\x7f")


@settings(max_examples=200, deadline=None)
@given(value=st.text(max_size=40))
def test_default_pattern_never_admits_shell_or_path_syntax(value: str) -> None:
    try:
        out = validate_params([PERIOD], {"period": value})
    except ValidationError as error:
        assert error.field == "params.period"
        return
    assert out == {"period": value}
    assert not FORBIDDEN & set(value)
    assert value.isascii()
    assert re.fullmatch(DEFAULT_PARAM_PATTERN, value)


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.text(max_size=10),
    suffix=st.text(max_size=10),
    control=st.sampled_from([chr(c) for c in range(0x20)] + ["\x7f"]),
)
def test_any_control_character_is_refused(prefix: str, suffix: str, control: str) -> None:
    with pytest.raises(ValidationError):
        validate_params([ANYTHING], {"note": prefix + control + suffix})


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(values=st.dictionaries(names, st.text(max_size=10), min_size=1, max_size=5), dotted=st.booleans())
def test_render_fills_every_placeholder(values: dict[str, str], dotted: bool) -> None:
    dot = "." if dotted else ""
    template = "|".join(f"{{{{{dot}{name}}}}}" for name in values)
    assert placeholders(template) == set(values)
    assert render(template, values) == "|".join(values.values())


def test_a_decimal_keeps_every_digit_it_may_have_and_refuses_more() -> None:
    """Normalising under the default context rounded to 28 significant digits, silently."""
    from jobgate.core.params import canonical

    forty = "1234567890" * 4
    assert canonical("decimal", forty) == forty
    assert (
        canonical("decimal", "1234567890.123456789012345678901234567890") == "1234567890.12345678901234567890123456789"
    )
    assert canonical("decimal", "-0.000000000000000000000000000000000001") == "-0.000000000000000000000000000000000001"
    for too_long in ("1" * 41, "1" * 20 + "." + "1" * 21):
        with pytest.raises(ParamValueError):
            canonical("decimal", too_long)


def test_a_python_number_in_exponent_form_is_taken_as_its_value() -> None:
    """str(Decimal("0.0000001")) is 1E-7, which the decimal pattern refuses: numbers from Python
    (the client, a decorator's default) are written positionally."""
    from decimal import Decimal

    from jobgate.client.api import _params
    from jobgate.core.params import canonical

    assert canonical("decimal", Decimal("0.0000001")) == "0.0000001"
    assert canonical("decimal", Decimal("100").normalize()) == "100"
    assert canonical("decimal", 1e-7) == "0.0000001"
    assert _params({"a": Decimal("1E+2"), "b": 1e-7, "c": Decimal("12.50")}) == {
        "a": "100",
        "b": "0.0000001",
        "c": "12.50",
    }
    with pytest.raises(ParamValueError):
        canonical("decimal", Decimal("NaN"))
