"""Parameter validation and template rendering for command runners and body templates.

Rules, in order: an undeclared parameter is refused; a required one must be present; a string
value must fully match its declared pattern (``regex.fullmatch``, so a trailing newline cannot
sneak past ``$``, within ``PATTERN_SECONDS``), or the default safe pattern when none is
declared; a typed value (integer, decimal, boolean, date, datetime) must parse as its type and
is kept as that type's one canonical text, which no shell or option parser reads as anything
but a value; control and invisible characters (NUL, newline, lone surrogates, direction
overrides, the zero-width space: ``readable_value``) are refused everywhere, as they would let
one value print as another. Rendering is plain substitution of ``{{name}}`` or ``{{.name}}`` (the
seed 004 spelling); it never evaluates anything, and argv is passed to the process without a
shell, so a value can at worst be a strange but inert argument.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from decimal import Context, Decimal

import regex

from jobgate.core.errors import ValidationError
from jobgate.core.models import ParamSpec

# No '/', no whitespace, no shell metacharacters, no leading '-' (a value must never become an
# option of the program it is passed to), not '.' or '..' (never a path step): safe as one argv
# element and as a file name.
DEFAULT_PARAM_PATTERN = r"(?!-)(?!\.{1,2}$)[A-Za-z0-9_.:@+=,-]{0,256}"
# How long a declared pattern may take to decide one value. A pattern that backtracks
# catastrophically (``(a|aa)+b``) would otherwise hold a process's CPU for minutes on a value of
# forty characters: in a server, every request. Patterns are matched by the ``regex`` engine
# (``re``'s syntax, far fewer such patterns, and a time limit), which releases the GIL meanwhile.
PATTERN_SECONDS = 0.25
UNREADABLE = (
    "control characters and invisible ones (newline, NUL, zero-width space, direction overrides, ...) are not allowed"
)
# What a parameter value may not hold: controls (C0, C1), lone surrogates (text that was not
# UTF-8), line and paragraph separators, private-use characters, and the invisible ones that make
# a value print as another — Unicode's format characters (direction overrides and isolates,
# marks, the zero-width space, the word joiner, invisible operators, annotation marks, the
# byte-order mark...), the combining grapheme joiner and the Hangul fillers. The joiners scripts
# and emoji need (U+200C, U+200D), the soft hyphen, a flag's tag sequence and code points newer
# than this Python's Unicode are text.
_UNREADABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\ue000-\uf8ff\U000f0000-\U0010ffff"
    "\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\u034f\u115f\u1160\u3164\uffa0]"
)
# A tag character is text only inside a flag's sequence: a black flag, tags, a cancel tag.
_FLAG = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
_TAG = re.compile("[\U000e0020-\U000e007f]")


def readable_value(text: str) -> bool:
    """Whether ``text`` prints as itself (``UNREADABLE`` says what is refused)."""
    if _UNREADABLE.search(text) is not None:
        return False
    return _TAG.search(text) is None or _TAG.search(_FLAG.sub("", text)) is None


def check_text(value: str | None, field: str, *, lines: bool = False) -> None:
    """Free text a person wrote (a reason, a title, a label) is refused, naming ``field``, when
    it holds what would not print as itself: a terminal escape would rewrite an admin's screen
    when the CLI lists it, a direction override would make it read as other words in the audit
    log. ``lines`` lets line breaks and tabs through (a reason may be a paragraph)."""
    if value is None:
        return
    text = value.replace("\r\n", "\n").replace("\n", " ").replace("\t", " ") if lines else value
    if not readable_value(text):
        raise ValidationError(UNREADABLE if not lines else _UNREADABLE_LINES, field=field)


_UNREADABLE_LINES = (
    "control characters other than line breaks and tabs, and invisible ones (NUL, escape, zero-width space, "
    "direction overrides, ...) are not allowed"
)


def escaped(text: str, *, lines: bool = False) -> str:
    """``text`` with every character ``readable_value`` refuses written as its escape
    (``\\x1b``, ``\\u202e``): what a terminal or a log line shows of text it did not check.
    ``lines``: line breaks and tabs are kept (a table cell may hold a paragraph)."""
    if _UNREADABLE.search(text) is None and _TAG.search(text) is None:
        return text
    return _TAG.sub(_escape, _UNREADABLE.sub(_escape_kept if lines else _escape, text))


def _escape_kept(match: re.Match[str]) -> str:
    return match.group() if match.group() in "\n\t" else _escape(match)


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Callable[[str], object]:
    """A declared pattern's matcher, compiled once: the default one (a character class and a
    bound, linear by construction) by ``re``; any other by ``regex``, with the time limit."""
    if pattern == DEFAULT_PARAM_PATTERN:
        return re.compile(pattern).fullmatch
    compiled = regex.compile(pattern)
    return functools.partial(compiled.fullmatch, timeout=PATTERN_SECONDS)


_PLACEHOLDER = re.compile(r"\{\{\s*\.?([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
RESERVED = frozenset({"tmpfile", "workdir", "run_id", "attempt"})
PARAM_TYPES = ("string", "integer", "decimal", "boolean", "date", "datetime")
_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")
_DECIMAL = re.compile(r"[+-]?(?=[0-9.]{1,41}$)(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
MAX_DECIMAL_DIGITS = 40
_EXACT = Context(prec=MAX_DECIMAL_DIGITS + 2)  # room for every digit a decimal param may have


def number_text(value: float | Decimal) -> str:
    """A Python number as positional text (``1E-7`` is ``0.0000001``, a float its shortest
    repr): what a decimal param takes; NaN and infinities stay as ``str`` writes them (refused)."""
    if isinstance(value, float):
        return format(Decimal(repr(value)), "f") if math.isfinite(value) else str(value)
    return format(value, "f") if value.is_finite() else str(value)


_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9]{2}:[0-9]{2})?"
)


def validate_params(
    specs: Iterable[ParamSpec], values: Mapping[str, object], *, source: str = "params"
) -> dict[str, str]:
    """Return the complete, validated parameter map (defaults filled in, every value in its
    type's canonical text) or raise ``ValidationError`` naming ``params.NAME``."""
    by_name = {spec.name: spec for spec in specs}
    for name in values:
        if name not in by_name:
            raise ValidationError("not a declared parameter", field=f"params.{name}", source=source)
    out: dict[str, str] = {}
    for spec in by_name.values():
        raw = values.get(spec.name, spec.default)
        if raw is None:
            if spec.required:
                raise ValidationError("required parameter is missing", field=f"params.{spec.name}", source=source)
            continue
        try:
            out[spec.name] = param_value(spec, raw)
        except ParamValueError as exc:
            raise ValidationError(str(exc), field=f"params.{spec.name}", source=source) from None
    return out


class ParamValueError(ValueError):
    """A value its parameter's declaration refuses; the message says why, for a person."""


def param_value(spec: ParamSpec, raw: object) -> str:
    """The canonical text of ``raw`` as ``spec`` declares it, or ``ParamValueError``.

    One function for a submitted value and a declared default alike, so a default that passes
    the definition's check is a value a run accepts."""
    if raw is True or raw is False:
        if spec.type != "boolean":
            raise ParamValueError("must be a string or a number")
    elif not isinstance(raw, str | int | float):
        raise ParamValueError("must be a string or a number")
    text = raw if isinstance(raw, str) else str(raw)
    if not readable_value(text):
        raise ParamValueError(UNREADABLE)
    if spec.type == "string":
        pattern = spec.pattern or DEFAULT_PARAM_PATTERN
        try:
            matched = _compiled(pattern)(text)
        except TimeoutError:
            raise ParamValueError(
                f"the pattern {pattern!r} took more than {PATTERN_SECONDS} s to decide this value: it backtracks;"
                " the definition's pattern needs fixing"
            ) from None
        if matched is None:
            which = "the pattern" if spec.pattern else "the default safe pattern (no spaces, slashes, shell signs)"
            raise ParamValueError(f"value does not match {which} {pattern!r}")
        value = text
    else:
        value = canonical(spec.type, raw)
        if spec.minimum is not None and Decimal(value) < Decimal(spec.minimum):
            raise ParamValueError(f"must be at least {spec.minimum}")
        if spec.maximum is not None and Decimal(value) > Decimal(spec.maximum):
            raise ParamValueError(f"must be at most {spec.maximum}")
    if spec.choices and value not in spec.choices:
        raise ParamValueError("must be one of: " + ", ".join(spec.choices))
    return value


def canonical(kind: str, raw: object) -> str:
    """The one text of a typed value: ``integer`` ``-12``; ``decimal`` without exponent or
    trailing zeros (``10.5``); ``boolean`` ``true``/``false``; ``date`` ``2026-12-04``;
    ``datetime`` in UTC with ``Z`` (an offset is required: a wall time alone is ambiguous)."""
    if kind not in PARAM_TYPES:
        raise ParamValueError(f"unknown type {kind!r} (one of: {', '.join(PARAM_TYPES)})")
    if kind == "boolean":
        if isinstance(raw, bool):
            return "true" if raw else "false"
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower()
        raise ParamValueError("must be true or false")
    if kind == "integer":
        if isinstance(raw, int) and _INTEGER.fullmatch(str(raw)):
            return str(raw)
        if isinstance(raw, str) and _INTEGER.fullmatch(raw):
            return str(int(raw))
        raise ParamValueError("must be a whole number (digits, optionally signed, at most 30)")
    if kind == "decimal":
        text = number_text(raw) if isinstance(raw, float | Decimal) else str(raw)
        if not _DECIMAL.fullmatch(text) or sum(c.isdigit() for c in text) > MAX_DECIMAL_DIGITS:
            raise ParamValueError("must be a decimal number such as 12, -0.5 or 1250.75 (at most 40 digits)")
        number = Decimal(text).normalize(_EXACT)  # the default context would round to 28 digits
        plain = format(number, "f")
        return "0" if number.is_zero() else plain
    if not isinstance(raw, str):
        raise ParamValueError(f"must be an ISO 8601 {kind} written as text")
    if kind == "date":
        if not _DATE.fullmatch(raw):
            raise ParamValueError("must be a date written YYYY-MM-DD")
        try:
            return date.fromisoformat(raw).isoformat()
        except ValueError:
            raise ParamValueError(f"{raw!r} is not a calendar date") from None
    if not _DATETIME.fullmatch(raw):
        raise ParamValueError("must be an ISO 8601 date and time with a UTC offset, e.g. 2026-12-04T09:30:00Z")
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ParamValueError(f"{raw!r} is not a valid date and time") from None
    if moment.tzinfo is None:
        raise ParamValueError("needs a UTC offset (Z or +01:00): a wall time alone is ambiguous")
    try:
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the first instant Python can hold
        raise ParamValueError(f"{raw!r} is outside the years 1 to 9999 in UTC") from None


def typed(kind: str, value: str) -> object:
    """A canonical text (``canonical``) as its Python value: what a typed handler receives."""
    if kind == "integer":
        return int(value)
    if kind == "decimal":
        return Decimal(value)
    if kind == "boolean":
        return value == "true"
    if kind == "date":
        return date.fromisoformat(value)
    if kind == "datetime":
        return datetime.fromisoformat(value)
    return value


def placeholders(template: str) -> set[str]:
    return set(_PLACEHOLDER.findall(template))


def render(template: str, values: Mapping[str, str], *, source: str = "template") -> str:
    """Substitute every placeholder; a placeholder with no value is an error, never blank."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValidationError(f"template references {{{{{name}}}}} which has no value", field=name, source=source)
        return values[name]

    return _PLACEHOLDER.sub(substitute, template)


def check_pattern(pattern: str, *, field: str, source: str) -> None:
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise ValidationError(f"invalid regular expression: {exc}", field=field, source=source) from None
